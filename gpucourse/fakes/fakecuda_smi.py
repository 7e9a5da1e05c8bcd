"""The fake runtime's ``nvidia-smi``: answers from the state file ``gpucourse.fakes.fakecuda`` writes.

It runs as a script (``python -S -E fakecuda_smi.py ARGS``, standard library only), so that
it starts fast and imports neither torch nor the course. It answers what the course asks:

* ``-L``: one line per GPU;
* ``--query-gpu=FIELD,...`` with ``--format=csv[,noheader][,nounits]`` and ``-i``/``--id``;
  an unknown field is refused on stdout, as the real tool does (``Field "x" is not a valid
  field to query.``, exit code 2);
* ``-l SECONDS`` / ``-lms MILLISECONDS``: the query again every period until it is stopped,
  one line per GPU per sample, flushed at once (a pipe gets each line as it is printed), and
  a quiet exit on SIGTERM or a closed pipe;
* no arguments: a short table.

The state file is read again at every sample, so memory that the fake's allocator takes
between two samples shows in the next one.
"""

from __future__ import annotations

import datetime
import json
import os
import signal
import sys
import time

UNITS = {"memory.total": " MiB", "memory.used": " MiB", "memory.free": " MiB",
         "utilization.gpu": " %", "utilization.memory": " %"}
HEADERS = {"timestamp": "timestamp", "index": "index", "name": "name", "uuid": "uuid",
           "driver_version": "driver_version", "memory.total": "memory.total [MiB]",
           "memory.used": "memory.used [MiB]", "memory.free": "memory.free [MiB]",
           "compute_mode": "compute_mode", "utilization.gpu": "utilization.gpu [%]",
           "utilization.memory": "utilization.memory [%]"}


def read_state() -> dict:
    """The fake runtime's devices, driver and CUDA version."""
    with open(os.environ["GPUCOURSE_FAKE_GPU_STATE"]) as state:
        return json.load(state)


def field_value(name: str, gpu: dict, state: dict, now: datetime.datetime):
    """One field of one GPU, without its unit."""
    values = {
        "timestamp": lambda: now.strftime("%Y/%m/%d %H:%M:%S.%f")[:-3],
        "index": lambda: gpu["index"], "name": lambda: gpu["name"], "uuid": lambda: "GPU-" + gpu["uuid"],
        "driver_version": lambda: state["driver_version"],
        "memory.total": lambda: gpu["total"] >> 20, "memory.used": lambda: gpu["used"] >> 20,
        "memory.free": lambda: (gpu["total"] - gpu["used"]) >> 20,
        "compute_mode": lambda: gpu["mode"], "utilization.gpu": lambda: 0, "utilization.memory": lambda: 0,
    }
    return values[name]()


def option(args: list, *names: str) -> str | None:
    """The value of ``--name=value`` or ``--name value`` (the first of ``names`` given)."""
    for i, arg in enumerate(args):
        for name in names:
            if arg.startswith(name + "="):
                return arg.split("=", 1)[1]
            if arg == name and i + 1 < len(args):
                return args[i + 1]
    return None


def period_s(args: list) -> float | None:
    """Seconds between samples from ``-l`` or ``-lms``; None for a single answer."""
    ms, seconds = option(args, "-lms", "--loop-ms"), option(args, "-l", "--loop")
    if ms is not None:
        return int(ms) / 1000
    if seconds is not None:
        return float(seconds)
    return None


def selected(gpus: list, ids: str | None) -> list:
    if ids is None:
        return gpus
    want = ids.split(",")
    return [g for g in gpus if str(g["index"]) in want or "GPU-" + g["uuid"] in want]


def query_lines(state: dict, names: list, ids: str | None, units: bool) -> list:
    now = datetime.datetime.now()
    return [", ".join(f"{field_value(n, g, state, now)}{UNITS.get(n, '') if units else ''}" for n in names)
            for g in selected(state["gpus"], ids)]


def table_lines(state: dict, ids: str | None) -> list:
    width = 77
    head = (f"NVIDIA-SMI {state['driver_version']}    Driver Version: {state['driver_version']}    "
            f"CUDA Version: {state['cuda_version']}")
    rows = [f"{g['index']}  {g['name']:<44} {g['used'] >> 20:>6}MiB / {g['total'] >> 20:>6}MiB"
            for g in selected(state["gpus"], ids)]
    rule = "+" + "-" * width + "+"
    return [rule, *(f"| {line:<{width - 2}} |" for line in [head, *rows]), rule]


def main(args: list) -> int:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))     # stopped by its reader: no traceback
    state = read_state()
    ids = option(args, "--id", "-i")
    if ids is not None and not selected(state["gpus"], ids):
        print("No devices were found", flush=True)
        return 6
    if "-L" in args:
        for g in selected(state["gpus"], ids):
            print(f"GPU {g['index']}: {g['name']} (UUID: GPU-{g['uuid']})")
        return 0
    query = option(args, "--query-gpu")
    names = [q.strip() for q in query.split(",")] if query else None
    bad = [n for n in names or () if n not in HEADERS]
    if bad:
        print(f'Field "{bad[0]}" is not a valid field to query.', flush=True)
        return 2
    fmt = option(args, "--format") or ""
    if names and "noheader" not in fmt:
        print(", ".join(HEADERS[n] for n in names), flush=True)
    every = period_s(args)
    while True:
        lines = (query_lines(state, names, ids, units="nounits" not in fmt) if names
                 else table_lines(state, ids))
        print("\n".join(lines), flush=True)
        if every is None:
            return 0
        time.sleep(every)
        try:
            state = read_state()
        except FileNotFoundError:     # the fake that wrote it has ended: so does the loop
            return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except BrokenPipeError:           # the reader closed the pipe: stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)
