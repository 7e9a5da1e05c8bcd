"""Start :mod:`gpucourse.children.survive_train` in a child process, and kill or signal it mid-run (episode 11).

``run`` starts the script in a process group of its own, reads its ``step N`` lines as they
come, and, once step ``kill_at`` is reported, sends ``sig`` (SIGKILL by default: no handler,
no clean-up, exactly like a lost Colab runtime or a node that dies). The child always has a
deadline; whatever happens (the deadline, an error, an interrupt in the notebook) its whole
process group is killed before ``run`` returns.
"""

from __future__ import annotations

import queue
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from .distributed import _env, kill_group, startup_seconds, track

__all__ = ["Result", "command", "run"]

_STEP = re.compile(r"^step (\d+) ")


@dataclass
class Result:
    """What a run did: its exit code (None at the deadline), its output lines, its last step."""

    returncode: int | None
    lines: list = field(default_factory=list)
    last_step: int = 0
    signalled_at: int | None = None      # the step after which the signal was sent
    seconds: float = 0.0
    pid: int | None = None

    @property
    def killed(self) -> bool:
        return self.returncode == -signal.SIGKILL

    def summary(self, tail: int = 3) -> str:
        if self.returncode is None:
            how = "✗ stopped at the deadline"
        elif self.returncode < 0:
            how = f"killed by {signal.Signals(-self.returncode).name} after step {self.signalled_at}"
        elif self.returncode == 0:
            how = "finished"
        elif self.returncode > 128:
            how = f"stopped on {signal.Signals(self.returncode - 128).name} with exit code {self.returncode}"
        else:
            how = f"✗ failed with exit code {self.returncode}"
        shown = [line for line in self.lines if not _STEP.match(line)][-tail:]
        return (f"{how}; last step printed: {self.last_step} ({self.seconds:.1f} s)\n"
                + "\n".join(f"  | {line}" for line in shown))


def command(out, **options) -> list:
    """``python -m gpucourse.children.survive_train --out OUT --key value ...`` (True means a bare flag)."""
    cmd = [sys.executable, "-m", "gpucourse.children.survive_train", "--out", str(Path(out))]
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            cmd.append(flag)
        elif value not in (None, False):
            cmd += [flag, str(value)]
    return cmd


def run(out, *, timeout: float, kill_at: int | None = None, sig: int = signal.SIGKILL,
        kill_when: str | None = None, env: dict | None = None, **options) -> Result:
    """Run the training script once; send ``sig`` when it reports step ``kill_at`` (None: never),
    or when it prints a line that starts with ``kill_when``.

    SIGKILL goes to the whole process group (the script and any DataLoader workers); another
    signal (SIGUSR1, SIGTERM) goes to the script alone, which saves and stops. The script waits
    after printing step ``kill_at`` until the signal comes, so the signal lands at that step
    however long a busy machine takes to pass the line on (a few steps take milliseconds).
    ``timeout`` is for the training: the deadline adds the time this machine takes to start a
    Python process that imports torch (``distributed.startup_seconds``, measured once).
    """
    if kill_at is not None:
        options.setdefault("pause_at", kill_at)
    timeout += startup_seconds()
    start = time.perf_counter()
    proc = track(subprocess.Popen(command(out, **options), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, env=_env(env), start_new_session=True,
                                  text=True, bufsize=1))   # known while alive: kill_group finds its workers later
    lines: queue.Queue = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(l.rstrip("\n")) for l in proc.stdout] + [lines.put(None)],
                              daemon=True)
    reader.start()
    result = Result(returncode=None, pid=proc.pid)
    try:
        while True:
            left = start + timeout - time.perf_counter()
            if left <= 0:
                break
            try:
                line = lines.get(timeout=min(left, 0.5))
            except queue.Empty:
                continue
            if line is None:                                   # the child closed its output: it ended
                result.returncode = proc.wait(timeout=max(1.0, start + timeout - time.perf_counter()))
                break
            result.lines.append(line)
            m = _STEP.match(line)
            if m:
                result.last_step = int(m.group(1))
            due = (kill_at is not None and result.last_step >= kill_at) or \
                (kill_when is not None and line.startswith(kill_when))
            if due and result.signalled_at is None:
                result.signalled_at = result.last_step
                if sig == signal.SIGKILL:
                    _killpg(proc.pid)
                else:
                    proc.send_signal(sig)
    except subprocess.TimeoutExpired:
        pass
    finally:
        kill_group(proc)          # always: at the deadline, after an error, on an interrupt
        reader.join(timeout=5)    # the group is gone, so its output ends
        if not reader.is_alive():
            proc.stdout.close()
    result.seconds = time.perf_counter() - start
    return result


def _killpg(pid: int) -> None:
    import os

    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
