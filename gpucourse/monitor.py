"""Watch a device work: sample utilisation and memory in the background (episode 11).

On a GPU, ``nvidia-smi`` samples them itself in a loop::

    nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv,noheader,nounits -lms 100

``utilization.gpu`` is the percentage of the last sample period (1/6 s to 1 s, depending on
the product) during which at least one kernel was running on the GPU: a GPU that waits
for its next batch shows it as a drop. Without a GPU (or without ``nvidia-smi``) the same
trace comes from this process (the one that trains; DataLoader workers only read data) through
``psutil``: its CPU time as a percentage of one core, and its resident memory.

Use it around the code to watch::

    with Monitor(device) as mon:
        train(...)
    mon.plot(ax)
"""

from __future__ import annotations

import datetime as _dt
import shutil
import subprocess
import tempfile
import threading
import time

__all__ = ["Monitor", "parse_smi_line", "training_window", "BUSY_ABOVE"]

QUERY = "timestamp,utilization.gpu,memory.used"

#: A sample above this (%) counts as busy: the device is training, not idle.
BUSY_ABOVE = 5.0


def parse_smi_line(line: str) -> tuple[_dt.datetime, float, float] | None:
    """``"2026/11/24 13:58:44.123, 87, 1523"`` → (time, 87.0, 1523.0); None for anything else."""
    parts = [p.strip() for p in line.split(",")]
    if len(parts) != 3:
        return None
    try:
        stamp = _dt.datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f")
        return stamp, float(parts[1]), float(parts[2])
    except ValueError:       # "[N/A]" on GPUs that do not report it, a header, a warning
        return None


class Monitor:
    """Samples utilisation (%) and memory (MiB) every ``interval_s`` seconds in a background thread.

    Parameters
    ----------
    device : torch.device or str or None
        A CUDA device: sample that GPU with ``nvidia-smi``. Anything else: this process with ``psutil``.
    interval_s : float
        Seconds between samples.

    Attributes
    ----------
    times, util, memory_mib : list of float
        Seconds since ``start``, utilisation in %, memory in MiB.
    source : str
        What was sampled, for the plot's labels.
    """

    def __init__(self, device=None, interval_s: float = 0.1):
        self.interval_s = interval_s
        self.times, self.util, self.memory_mib = [], [], []
        self._device = device
        self._stop = threading.Event()
        self._thread = None
        self._proc = None
        self._first_unparsed = None   # nvidia-smi's first line that is not a sample
        kind = getattr(device, "type", str(device or "cpu")).split(":")[0]
        self.gpu = kind == "cuda" and shutil.which("nvidia-smi") is not None
        if kind == "cuda" and not self.gpu:
            print("(nvidia-smi was not found, so the CPU side of this process is sampled instead of the GPU)")
        self.source = "GPU (nvidia-smi)" if self.gpu else "CPU of this process (psutil)"
        self.util_label = "GPU utilisation (%)" if self.gpu else "CPU (% of one core)"
        self.memory_label = "GPU memory used (MiB)" if self.gpu else "resident memory (MiB)"

    # --- start and stop ---------------------------------------------------------------------

    def start(self) -> "Monitor":
        self._t0 = time.perf_counter()
        self._wall0 = _dt.datetime.now()
        target = self._read_smi if self.gpu else self._sample_psutil
        if self.gpu:
            self._errors = tempfile.TemporaryFile(mode="w+")
            self._proc = subprocess.Popen(self._smi_command(), stdout=subprocess.PIPE, stderr=self._errors,
                                          stdin=subprocess.DEVNULL, text=True, bufsize=1)
        self._thread = threading.Thread(target=target, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> "Monitor":
        self._stop.set()
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._proc is not None and self._proc.stdout:
            self._proc.stdout.close()
        if self._proc is not None:
            self._errors.seek(0)
            errors = self._errors.read().strip()
            self._errors.close()
            if not self.times:
                print(f"(nvidia-smi gave no samples: {self._why_no_samples(errors)}; "
                      f"the command was: {' '.join(self._smi_command())})")
        return self

    def __enter__(self) -> "Monitor":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # --- the two samplers -------------------------------------------------------------------

    def _smi_command(self) -> list:
        command = ["nvidia-smi", f"--query-gpu={QUERY}", "--format=csv,noheader,nounits",
                   "-lms", str(max(1, round(self.interval_s * 1000)))]
        index = getattr(self._device, "index", None)
        try:      # nvidia-smi numbers GPUs in PCI order, CUDA may not: name ours by its UUID
            import torch

            uuid = torch.cuda.get_device_properties(index or 0).uuid
            command += ["-i", f"GPU-{uuid}"]
        except Exception:  # noqa: BLE001 - an old torch without .uuid, or no CUDA here (tests)
            if index is not None:
                command += ["-i", str(index)]
        return command

    def _why_no_samples(self, errors: str) -> str:
        """nvidia-smi's own explanation: it prints most of them on stdout, some on stderr."""
        said = [text for text in (self._first_unparsed, errors.splitlines()[0] if errors else None) if text]
        return "; ".join(said) if said else "no output"

    def _read_smi(self) -> None:
        for line in self._proc.stdout:
            parsed = parse_smi_line(line)
            if parsed is None:
                if self._first_unparsed is None and line.strip():
                    self._first_unparsed = line.strip()   # e.g. 'Field "x" is not a valid field to query.'
                continue
            stamp, util, memory = parsed
            self._append((stamp - self._wall0).total_seconds(), util, memory)
            if self._stop.is_set():
                break

    def _sample_psutil(self) -> None:
        import psutil

        me = psutil.Process()     # the process that trains: the "device" here (workers only read data)
        me.cpu_percent(None)      # the first call only starts the count
        while not self._stop.wait(self.interval_s):
            self._append(time.perf_counter() - self._t0, me.cpu_percent(None), me.memory_info().rss / 2**20)

    def _append(self, t: float, util: float, memory: float) -> None:
        self.times.append(t)
        self.util.append(util)
        self.memory_mib.append(memory)

    # --- reading it -------------------------------------------------------------------------

    def plot(self, ax_util, ax_memory=None, label: str | None = None, **style) -> None:
        """Draw utilisation (and memory) against time on the given axes."""
        ax_util.plot(self.times, self.util, label=label, **style)
        ax_util.set_ylabel(self.util_label)
        if ax_memory is not None:
            ax_memory.plot(self.times, self.memory_mib, label=label, **style)
            ax_memory.set_ylabel(self.memory_label)
        for ax in (ax_util, ax_memory):
            if ax is not None:
                ax.set_xlabel("seconds since the start")

    def mean_util(self) -> float:
        """Mean utilisation over the samples (%), NaN if there are none."""
        return sum(self.util) / len(self.util) if self.util else float("nan")

    def training_window(self, busy_above: float = BUSY_ABOVE) -> slice:
        """The samples from the first busy one to the last: see :func:`training_window`."""
        return training_window(self.util, busy_above)

    def training_mean_util(self, busy_above: float = BUSY_ABOVE) -> float:
        """Mean utilisation (%) from the first busy sample to the last; NaN if none is busy.

        The idle start (workers starting, the first reads) and the idle end are not
        training, so they are left out: the rule exercise 4 of episode 11 grades.
        """
        window = self.util[self.training_window(busy_above)]
        return sum(window) / len(window) if window else float("nan")


def training_window(util, busy_above: float = BUSY_ABOVE) -> slice:
    """The slice of ``util`` from its first sample above ``busy_above`` % to its last.

    Before the first batch arrives and after the last step the device is idle; that is
    not training. The slice is empty when no sample is busy.

    Examples
    --------
    >>> training_window([0, 0, 90, 40, 95, 0])
    slice(2, 5, None)
    """
    busy = [i for i, u in enumerate(util) if u > busy_above]
    return slice(busy[0], busy[-1] + 1) if busy else slice(0, 0)
