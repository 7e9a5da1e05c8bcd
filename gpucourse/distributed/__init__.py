"""Launching the episode 7 training scripts from a notebook, safely.

A notebook cannot be a worker of a multi-process job: ``torch.multiprocessing.spawn``
pickles the function it starts by name, and a function defined in a notebook lives in
``__main__``, which a fresh worker process does not have ("Can't get attribute ... on
<module '__main__'>"). So the training scripts live in this package, as ordinary modules,
and the notebook launches them the way one would on a cluster: with ``torchrun``
(``python -m torch.distributed.run``) or, for TensorFlow, one process per worker.

``launch`` runs such a command with a deadline, captures its output and prints it when the
run is over, and kills the whole process group (launcher and workers) if it fails or runs
out of time; when one of several commands started together fails, the others are stopped at
once rather than left waiting for it. ``free_port`` and ``free_ports`` ask the operating system for TCP ports nobody
is using, so that runs in parallel (two test workers, two learners on one machine) do not
collide; if a port is taken in the seconds between that choice and a worker's bind, the run
fails with "Address already in use" and ``launch_many`` tries it once more.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

__all__ = ["Run", "first_error", "free_port", "free_ports", "kill_group", "launch", "launch_many",
           "run_with_deadline", "torchrun"]


@dataclass
class Run:
    """What a launched command did: exit code (None if it was killed at the deadline, ``STOPPED`` if
    it was stopped because another command of the same run failed), output, seconds."""

    command: list
    returncode: int | None
    output: str
    seconds: float

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    @property
    def timed_out(self) -> bool:
        return self.returncode is None


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now (the OS picks it)."""
    return free_ports(1)[0]


def free_ports(n: int) -> list[int]:
    """``n`` distinct TCP ports on 127.0.0.1, all free right now.

    Each socket stays bound until all ``n`` are chosen, so the OS cannot hand out one port twice.
    """
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            socks.append(s)
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


PORT_CLASH = "Address already in use"


def _env(extra: dict | None) -> dict:
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")          # one thread per worker: workers share the cores
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def kill_group(proc: subprocess.Popen) -> None:
    """Kill the process group of ``proc`` (it was started in a session of its own)."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=5)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)           # anything left in the group (workers)
    except ProcessLookupError:
        pass


def launch_many(commands: list, timeout: float, env: dict | list | None = None, show: bool = True,
                labels: list | None = None, retry: bool | object = True) -> list:
    """Start several commands at once (e.g. two "nodes"), wait for all, with one deadline.

    Every command runs in a process group of its own; at the deadline, or if the caller is
    interrupted, every group still alive is killed. Output is captured (stdout and stderr
    together) and printed when all have finished.

    Parameters
    ----------
    commands : list of list of str
    timeout : float
        Seconds for all of them together.
    env : dict or list of dict, optional
        Extra environment variables, the same for all or one dict per command.
    show : bool
        Print each command's output after the run.
    labels : list of str, optional
        Printed above each command's output.
    retry : bool or callable
        If a command fails with "Address already in use" (another program took a port
        between its choice and the bind), run all of them once more, within the same
        deadline. A callable is called first and returns ``(commands, env)`` for that second
        try, e.g. with new ports; True reruns the same commands (right for ``--standalone``
        torchrun, which picks its own port).

    Returns
    -------
    list of Run
    """
    start = time.perf_counter()
    runs = run_with_deadline(commands, env, start + timeout)
    if retry and any(not r.ok and not r.timed_out and PORT_CLASH in r.output for r in runs) \
            and time.perf_counter() - start < timeout - 5:
        if show:
            print(f"({PORT_CLASH}: a port was taken by another program; trying once more)")
        if callable(retry):
            commands, env = retry()
        runs = run_with_deadline(commands, env, start + timeout)
    labels = labels or [" ".join(map(str, c[:1] + c[-3:])) for c in commands]
    for run, label in zip(runs, labels):
        run.seconds = time.perf_counter() - start
        if show:
            if len(commands) > 1:
                print(f"──── {label} ────")
            print(run.output.rstrip())
            if run.timed_out:
                print(f"✗ killed after the {timeout:g} s deadline (all its processes were stopped). A run that "
                      "stops making progress usually waits for a partner: a worker or node that never started, "
                      "a port another program holds, or a collective that one rank never reaches.")
            elif run.returncode == STOPPED:
                print("✗ stopped because another command of this run failed (see its output).")
            elif not run.ok:
                error = first_error(run.output)
                print(f"✗ exited with code {run.returncode}." + (f" First error: {error}" if error else ""))
    return runs


STOPPED = -999    # the return code of a command stopped because another command of the same run failed

_ERROR_LINE = re.compile(r"^(?:\[rank\d+\]:\s*)?(?:[\w.-]+\.py: )?"            # "[rank1]: ", "prog.py: "
                         r"((?:[\w.]+(?:Error|Exception)|[\w.]*error)(?::\s.*|$))")   # "ValueError: ...", "error: ..."
_NOT_THE_CAUSE = ("ChildFailedError", "SignalException")


def first_error(output: str) -> str | None:
    """The first line of ``output`` that names an error (``ValueError: ...``, ``error: ...``), if any.

    The root cause comes first: torchrun's own ``ChildFailedError`` report and the errors of the
    workers it then stopped come after it.
    """
    for line in output.splitlines():
        m = _ERROR_LINE.match(line.strip())
        if m and not any(skip in line for skip in _NOT_THE_CAUSE):
            return m.group(1).strip()
    return None


def run_with_deadline(commands: list, env, deadline: float) -> list:
    """Start every command in a session of its own, wait until ``deadline``, kill what is left."""
    envs = env if isinstance(env, list) else [env] * len(commands)
    start = time.perf_counter()
    procs, files, codes = [], [], []
    try:
        for command, extra in zip(commands, envs):
            out = tempfile.TemporaryFile()          # the output, read back after the run
            files.append(out)
            procs.append(subprocess.Popen([str(c) for c in command], stdout=out, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, env=_env(extra), start_new_session=True))
        codes = [None] * len(procs)
        while None in codes and time.perf_counter() < deadline:
            codes = [proc.poll() for proc in procs]
            if any(code not in (None, 0) for code in codes):   # one part failed: the others would wait
                codes = [STOPPED if code is None else code for code in codes]   # for it: stop them now
                break
            time.sleep(0.05)
    finally:
        for proc in procs:
            kill_group(proc)              # always: at the deadline, on an error, on an interrupt
    seconds = time.perf_counter() - start
    runs = []
    for command, code, out in zip(commands, codes, files):
        out.seek(0)
        text = out.read().decode(errors="replace")
        out.close()
        runs.append(Run([str(c) for c in command], code, text, seconds))
    return runs


def launch(command: list, timeout: float, env: dict | None = None, show: bool = True, retry=True) -> Run:
    """Run one command with a deadline; see ``launch_many``."""
    return launch_many([command], timeout, env=env, show=show, retry=retry)[0]


def torchrun(*args) -> list:
    """``python -m torch.distributed.run ARGS``, with the interpreter of this kernel."""
    return [sys.executable, "-m", "torch.distributed.run", *map(str, args)]
