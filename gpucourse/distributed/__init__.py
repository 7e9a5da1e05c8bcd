"""Launching the episode 9 training scripts from a notebook, safely.

A notebook cannot be a worker of a multi-process job: ``torch.multiprocessing.spawn``
pickles the function it starts by name, and a function defined in a notebook lives in
``__main__``, which a fresh worker process does not have ("Can't get attribute ... on
<module '__main__'>"). So the training scripts live in this package, as ordinary modules,
and the notebook launches them the way one would on a cluster: with ``torchrun``
(``python -m torch.distributed.run``) or, for TensorFlow, one process per worker.

``launch`` runs such a command with a deadline, captures its output and prints it when the
run is over (or, given ``log=``, keeps it whole in that file and prints only the lines asked
for, the outcome and the file's path), and stops every process the command started (launcher and workers, in whatever
session they are: torchrun puts each worker in one of its own) when it returns; when one of several commands started together fails, the others are stopped at
once rather than left waiting for it. ``free_port`` and ``free_ports`` ask the operating system for TCP ports nobody
is using, so that runs in parallel (two test workers, two learners on one machine) do not
collide; if a port is taken in the seconds between that choice and a worker's bind, the run
fails with "Address already in use" and ``launch_many`` tries it once more.

A deadline counts the run's own work: every Python process a launch starts (torchrun's own and
one per worker) first imports torch, which takes seconds on an idle machine and several times
as long on a busy one. So ``launch`` adds, per such process, the time this machine took to
start one (``startup_seconds``, measured once, at the first launch) to the ``timeout`` asked for.
"""

from __future__ import annotations

import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

__all__ = ["Run", "first_error", "free_port", "free_ports", "kill_group", "launch", "launch_many",
           "run_with_deadline", "startup_seconds", "torchrun", "track"]


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
GRACE_S = 5.0  # from SIGTERM to SIGKILL: time for workers to save and exit cleanly
_MARK = "GPUCOURSE_LAUNCH"  # in the environment of every process a launch starts, and of theirs


_STARTUP: list = []   # the seconds startup_seconds measured, once per process


def startup_seconds() -> float:
    """Seconds this machine takes to start a Python process that imports torch, as torchrun and
    every worker do before anything else: measured the first time it is asked (a few seconds on
    an idle machine, several times that on a busy one) and kept for the life of this process."""
    if not _STARTUP:
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import torch"], env=_env(None), stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        _STARTUP.append(time.perf_counter() - start)
    return _STARTUP[0]


def python_processes(command: list) -> int:
    """How many Python processes ``command`` starts: torchrun's own and one per worker
    (``--nproc-per-node``), or 1."""
    args = [str(c) for c in command]
    if "torch.distributed.run" not in args:
        return 1
    for i, arg in enumerate(args):
        name, _, value = arg.partition("=")
        if name.replace("_", "-") == "--nproc-per-node":
            value = value or (args[i + 1] if i + 1 < len(args) else "")
            return 1 + (int(value) if value.isdigit() else (os.cpu_count() or 1))
    return 2                              # torchrun's default: one worker


def _env(extra: dict | None) -> dict:
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")          # one thread per worker: workers share the cores
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    env[_MARK] = f"{os.environ.get(_MARK, '')} {os.getpid()}-{secrets.token_hex(8)}".strip()
    return env


class _Tree:
    """Every process one command started, whatever session or process group it moved to.

    torchrun starts each worker in a session of its own, so signalling torchrun's process
    group does not reach the workers, and a worker whose parent died is re-parented to PID 1
    and is nobody's descendant any more. Environments are inherited, though: each command gets
    a token of its own in ``GPUCOURSE_LAUNCH`` (added to any it inherited), so every process
    whose environment holds the token is one the command started, wherever it now is.
    """

    def __init__(self, proc: subprocess.Popen):
        import psutil

        self.proc = proc
        self.known: dict = {}
        self.token = None
        try:
            root = psutil.Process(proc.pid)
            self.known[proc.pid] = root
            self.token = root.environ().get(_MARK, "").split()[-1]
        except (psutil.Error, IndexError):  # gone already, or started without the token
            pass

    def collect(self) -> None:
        """Add the command's descendants and every process that carries its token."""
        import psutil

        for parent in list(self.known.values()):
            try:
                children = parent.children(recursive=True)
            except psutil.Error:
                continue
            for child in children:
                self.known.setdefault(child.pid, child)
        if self.token is None:
            return
        for proc in psutil.process_iter():
            if proc.pid in self.known or proc.pid == os.getpid():
                continue
            try:
                if self.token in proc.environ().get(_MARK, "").split():
                    self.known[proc.pid] = proc
            except psutil.Error:  # another user's process, or gone
                continue


def _running(proc) -> bool:
    import psutil

    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _signal(procs, sig) -> None:
    import psutil

    for proc in procs:
        try:
            proc.send_signal(sig)  # psutil checks that the PID still names the same process
        except psutil.Error:
            pass


def _wait_gone(procs, seconds: float) -> list:
    """Wait until every process has exited (a zombie counts as exited); return those still alive."""
    end = time.monotonic() + seconds
    alive = [p for p in procs if _running(p)]
    while alive and time.monotonic() < end:
        time.sleep(0.05)
        alive = [p for p in alive if _running(p)]
    return alive


def _stop(trees: list, grace: float = GRACE_S) -> None:
    """SIGTERM every process of every tree, SIGKILL whatever is alive after ``grace`` seconds."""
    for tree in trees:
        tree.collect()            # before any signal: a worker whose parent dies is re-parented
    alive = [p for tree in trees for p in tree.known.values() if _running(p)]
    _signal(alive, signal.SIGTERM)
    _wait_gone(alive, grace)
    for tree in trees:
        tree.collect()            # anything started in the meantime (a launcher restarting a worker)
    survivors = [p for tree in trees for p in tree.known.values() if _running(p)]
    _signal(survivors, signal.SIGKILL)
    stuck = _wait_gone(survivors, 5.0)
    for tree in trees:
        try:
            tree.proc.wait(timeout=1)   # reap our own child: no zombie, and its exit code is known
        except subprocess.TimeoutExpired:
            pass
    if stuck:
        print(f"Warning: processes {sorted(p.pid for p in stuck)} did not exit even after SIGKILL (stuck "
              "in the kernel, e.g. in a GPU driver call); check them with `ps` or `nvidia-smi`.")


def kill_group(proc: subprocess.Popen, grace: float = GRACE_S) -> None:
    """Stop ``proc`` and every process it started, in whichever session or group they are.

    SIGTERM to all of them, then SIGKILL to whatever is still alive after ``grace`` seconds.
    Every process whose environment carries the command's token (see ``_env``) is found, even
    one whose parent died; the token is read from ``proc`` itself, so if ``proc`` may have
    exited before this is called, call ``track(proc)`` right after starting it.
    """
    _stop([getattr(proc, "_gpucourse_tree", None) or _Tree(proc)], grace)


def track(proc: subprocess.Popen) -> subprocess.Popen:
    """Note the launch token of ``proc`` (started with ``env=_env(...)``) while it is surely alive,
    for ``kill_group``; returns ``proc``."""
    proc._gpucourse_tree = _Tree(proc)
    return proc


def launch_many(commands: list, timeout: float, env: dict | list | None = None, show: bool = True,
                labels: list | None = None, retry: bool | object = True, log: str | os.PathLike | None = None,
                lines: str | None = None) -> list:
    """Start several commands at once (e.g. two "nodes"), wait for all, with one deadline.

    Every command runs in a session of its own; when they have all finished, or at the deadline,
    or if the caller is interrupted, every process they started is stopped (SIGTERM, then SIGKILL
    after ``GRACE_S`` seconds), including workers in sessions of their own. Output is captured (stdout and stderr
    together) and printed when all have finished.

    Parameters
    ----------
    commands : list of list of str
    timeout : float
        Seconds for all of them together, once they have started: the deadline adds, for every
        Python process the commands start (``python_processes``), the time this machine takes
        to start one (``startup_seconds``).
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
    log : str or path-like, optional
        Write every command's whole output to this file (under its label) and print, instead
        of the output, only the lines that ``lines`` matches and one line with the outcome
        and the file's path: a notebook shows what matters, the log keeps the rest.
    lines : str, optional
        A regular expression; with ``log``, the output lines it matches are printed, each once.

    Returns
    -------
    list of Run
    """
    processes = sum(python_processes(c) for c in commands)
    start_up = processes * startup_seconds()
    start = time.perf_counter()
    deadline = start + timeout + start_up
    runs = run_with_deadline(commands, env, deadline)
    if retry and any(not r.ok and not r.timed_out and PORT_CLASH in r.output for r in runs) \
            and deadline - time.perf_counter() > start_up + 5:
        if show:
            print(f"({PORT_CLASH}: a port was taken by another program; trying once more)")
        if callable(retry):
            commands, env = retry()
        runs = run_with_deadline(commands, env, deadline)
    late = _timed_out_line(timeout, start_up, processes)
    labels = labels or [" ".join(map(str, c[:1] + c[-3:])) for c in commands]
    for run in runs:
        run.seconds = time.perf_counter() - start
    if log is not None:
        _write_log(log, runs, labels)
        if show:
            _print_short(runs, labels, late, log, lines)
        return runs
    for run, label in zip(runs, labels):
        if show:
            if len(commands) > 1:
                print(f"──── {label} ────")
            print(run.output.rstrip())
            if run.timed_out:
                print(late)
            elif run.returncode == STOPPED:
                print("✗ stopped because another command of this run failed (see its output).")
            elif not run.ok:
                error = first_error(run.output)
                print(f"✗ exited with code {run.returncode}." + (f" First error: {error}" if error else ""))
    return runs


STOPPED = -999    # the return code of a command stopped because another command of the same run failed

def _timed_out_line(timeout: float, start_up: float, processes: int) -> str:
    """The line printed for a run stopped at its deadline."""
    return (f"✗ killed after the {timeout + start_up:.0f} s deadline ({timeout:g} s for the run and "
            f"{start_up:.0f} s to start its {processes} Python process{'es' if processes > 1 else ''} "
            "on this machine); all its processes were stopped. A run that stops making progress "
            "usually waits for a partner: a worker or node that never started, a port another "
            "program holds, or a collective that one rank never reaches.")


def _write_log(log, runs: list, labels: list) -> None:
    """Every command's whole output, under its label, in one file."""
    with open(log, "w", encoding="utf-8") as fh:
        for run, label in zip(runs, labels):
            fh.write(f"──── {label}: {' '.join(run.command)}\n{run.output.rstrip()}\n"
                     f"──── exit code {run.returncode}\n")


def _print_short(runs: list, labels: list, late: str, log, lines: str | None) -> None:
    """The matching lines (each once), then one line: the outcome and where the log is."""
    if lines:
        pattern = re.compile(lines)
        found = [line for run in runs for line in run.output.splitlines() if pattern.search(line)]
        for line in dict.fromkeys(found):
            print(line)
    seconds = max(run.seconds for run in runs)
    failed = [(run, label) for run, label in zip(runs, labels) if not run.ok]
    if not failed:
        print(f"✓ ok after {seconds:.1f} s (whole output: {log})")
    for run, label in failed:
        who = f"{label}: " if len(runs) > 1 else ""
        if run.timed_out:
            print(f"{who}{late} (whole output: {log})")
        elif run.returncode == STOPPED:
            print(f"{who}✗ stopped because another command of this run failed.")
        else:
            error = first_error(run.output)
            print(f"{who}✗ exit code {run.returncode} after {seconds:.0f} s."
                  + (f" First error: {error}" if error else "") + f" (whole output: {log})")


_ERROR_LINE = re.compile(r"^(?:\[rank\d+\]:\s*)?(?:[\w.-]+\.py: )?"            # "[rank1]: ", "prog.py: "
                         r"((?:[\w.]+(?:Error|Exception)|[\w.]*error)(?::\s.*|$))")   # "ValueError: ...", "error: ..."
_NOT_THE_CAUSE = ("ChildFailedError", "SignalException")
#: What a rank reports when another rank has already failed and left: an effect, not the cause. The
#: two ranks write to one stream, so such a line may come before the cause (a timeout, say) does.
_PEER_GONE = ("Connection closed by peer", "Connection reset by peer", "Broken pipe")
#: "[/__w/pytorch/pytorch/third_party/gloo/.../unbound_buffer.cc:78] ": where in C++ the error was
#: raised, which says nothing to the reader of a Python error.
_SOURCE_LOCATION = re.compile(r"\[[^\]\s]+\.(?:cc|cpp|cu|h|hpp):\d+\] ")


def first_error(output: str) -> str | None:
    """The error line of ``output`` (``ValueError: ...``, ``error: ...``) that names the cause, if any.

    The root cause comes first: torchrun's own ``ChildFailedError`` report and the errors of the
    workers it then stopped come after it. A rank's "connection closed by peer" is an effect of
    another rank's failure, whatever its place in the output: it is named only when no other error
    is. The C++ source location some errors carry (Gloo's ``[.../unbound_buffer.cc:78]``) is left
    out.
    """
    errors = []
    for line in output.splitlines():
        m = _ERROR_LINE.match(line.strip())
        if m and not any(skip in line for skip in _NOT_THE_CAUSE):
            errors.append(_SOURCE_LOCATION.sub("", m.group(1)).strip())
    causes = [e for e in errors if not any(effect in e for effect in _PEER_GONE)]
    return (causes or errors or [None])[0]


def run_with_deadline(commands: list, env, deadline: float) -> list:
    """Start every command in a session of its own, wait until ``deadline``, then stop every process
    the commands started (see ``kill_group``): none is alive when this returns."""
    envs = env if isinstance(env, list) else [env] * len(commands)
    start = time.perf_counter()
    procs, trees, files, codes = [], [], [], []
    try:
        for command, extra in zip(commands, envs):
            out = tempfile.TemporaryFile()          # the output, read back after the run
            files.append(out)
            procs.append(subprocess.Popen([str(c) for c in command], stdout=out, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, env=_env(extra), start_new_session=True))
            trees.append(_Tree(procs[-1]))   # now, while it surely runs: it holds the token
        codes = [None] * len(procs)
        while None in codes and time.perf_counter() < deadline:
            codes = [proc.poll() for proc in procs]
            if any(code not in (None, 0) for code in codes):   # one part failed: the others would wait
                codes = [STOPPED if code is None else code for code in codes]   # for it: stop them now
                break
            time.sleep(0.05)
    finally:
        _stop(trees)                      # always: at the deadline, on an error, on an interrupt
    seconds = time.perf_counter() - start
    runs = []
    for command, code, out in zip(commands, codes, files):
        out.seek(0)
        text = out.read().decode(errors="replace")
        out.close()
        runs.append(Run([str(c) for c in command], code, text, seconds))
    return runs


def launch(command: list, timeout: float, env: dict | None = None, show: bool = True, retry=True,
           log: str | os.PathLike | None = None, lines: str | None = None) -> Run:
    """Run one command with a deadline; see ``launch_many``."""
    return launch_many([command], timeout, env=env, show=show, retry=retry, log=log, lines=lines)[0]


def torchrun(*args) -> list:
    """``python -m torch.distributed.run ARGS``, with the interpreter of this kernel."""
    return [sys.executable, "-m", "torch.distributed.run", *map(str, args)]
