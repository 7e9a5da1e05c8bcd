"""Run a command while LOAD CPU-bound processes keep the machine busy; stop them afterwards.

    python tools/busy.py --load 8 -- python -m pytest tests/test_distributed.py

The course's tests must pass on a machine that is doing other work (a shared node, a laptop
compiling something, two test workers on two cores). This starts ``--load`` processes that
spin on the CPU, runs the command beside them, and stops them however the command ends: its
own exit, an error here, Ctrl-C or SIGTERM. Each spinner also watches its parent and exits
within a fraction of a second once this script is gone, even if it was killed with SIGKILL,
so no spinner outlives a run. At the end it prints the command's duration and the 1-minute
load average seen while it ran (from /proc/loadavg, sampled every few seconds), and it exits
with the command's exit code.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time

# A spinner: pure-Python work in short slices, checking between slices that the process which
# started it is still its parent (if that one dies, the spinner is re-parented and stops).
SPIN = ("import os, sys\n"
        "parent = int(sys.argv[1])\n"
        "while os.getppid() == parent:\n"
        "    for _ in range(200_000):\n"
        "        pass\n")


def load_average() -> float | None:
    """The 1-minute load average, or None where the system does not report one."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


class LoadSampler(threading.Thread):
    """Reads the 1-minute load average every ``every`` seconds until stopped."""

    def __init__(self, every: float = 5.0):
        super().__init__(daemon=True, name="load-sampler")
        self.every, self.samples, self.done = every, [], threading.Event()

    def run(self) -> None:
        while not self.done.wait(self.every):
            value = load_average()
            if value is not None:
                self.samples.append(value)


def start_spinners(n: int) -> list:
    return [subprocess.Popen([sys.executable, "-c", SPIN, str(os.getpid())], stdin=subprocess.DEVNULL,
                             start_new_session=True)      # Ctrl-C reaches the command, not them: we stop them
            for _ in range(n)]


def stop(procs: list) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
    for proc in procs:
        proc.wait()


def _terminated(signum, frame):
    raise SystemExit(128 + signum)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                usage="%(prog)s [--load N] [--warmup S] -- COMMAND [ARGS...]")
    p.add_argument("--load", type=int, default=8, help="CPU-bound processes to run beside it (default 8)")
    p.add_argument("--warmup", type=float, default=0.0,
                   help="seconds to wait before the command starts, for the load average to climb (default 0)")
    p.add_argument("command", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        p.error("give the command to run after --")
    if args.load < 0:
        p.error(f"--load must be 0 or more, not {args.load}")
    signal.signal(signal.SIGTERM, _terminated)
    spinners, sampler, job = [], LoadSampler(), None
    code = 1
    before = load_average()
    print(f"busy: load average {before if before is None else round(before, 1)} before; "
          f"starting {args.load} CPU-bound processes on {os.cpu_count()} CPUs", flush=True)
    try:
        spinners = start_spinners(args.load)
        sampler.start()
        time.sleep(max(args.warmup, 0.0))
        start = time.monotonic()
        job = subprocess.Popen(command)
        try:
            code = job.wait()
        except KeyboardInterrupt:                    # the command got the same Ctrl-C: let it finish
            code = job.wait()
        seconds = time.monotonic() - start
        seen = sampler.samples
        if seen:
            print(f"busy: the command took {seconds:.0f} s and exited with {code}; 1-minute load average "
                  f"while it ran: mean {sum(seen) / len(seen):.1f}, max {max(seen):.1f} "
                  f"({len(seen)} readings)", flush=True)
        else:
            print(f"busy: the command took {seconds:.0f} s and exited with {code}", flush=True)
    finally:
        sampler.done.set()
        if job is not None and job.poll() is None:   # we were stopped: stop the command too
            job.terminate()
            try:
                job.wait(timeout=30)
            except subprocess.TimeoutExpired:
                job.kill()
                job.wait()
        stop(spinners)
    return 128 - code if code < 0 else code      # killed by signal N: 128 + N, as a shell reports it


if __name__ == "__main__":
    sys.exit(main())
