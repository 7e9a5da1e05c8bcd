"""TensorFlow's GPU memory, in a fresh process (episode 6, §2).

Memory growth can be set only once per process and TensorFlow keeps what it took until the process
ends, so each run is a new Python process::

    python -m gpucourse.children.tf_memory_child growth-on           # memory growth on; report memory
    python -m gpucourse.children.tf_memory_child growth-off search   # off; then run out and halve the batch

It prints one line of JSON: the TensorFlow version, the device, what ``nvidia-smi`` says the GPU
uses before and after TensorFlow starts (``GPU_UUID`` names the GPU), what
``tf.config.experimental.get_memory_info`` reports, and, with ``search``, the batches a halving
search for a batch that trains tried. Without a GPU the search runs under an address-space cap of
1 GiB more than the process uses (Linux only), so that it runs out there and not in the machine's
memory. ``run()`` starts such a process from a notebook and returns the JSON as a dict;
``describe()`` says it in three lines.

The lesson is two functions that episode 6 writes out in cells, :func:`use_memory_growth` and
:func:`halve_until_it_trains` (``tests/test_taught_ep06.py`` keeps them equal); the rest is the
plumbing of a fresh process.
"""

from __future__ import annotations

import gc
import json
import math
import os
import subprocess
import sys
import time

from gpucourse.memory import format_bytes


def gpu_mib(what="memory.used"):
    """``nvidia-smi``'s figure for the GPU named by ``GPU_UUID`` (``-i`` ignores CUDA_VISIBLE_DEVICES)."""
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={what}", "--format=csv,noheader,nounits",
                              f"--id={os.environ['GPU_UUID']}"], capture_output=True, text=True, timeout=30).stdout
        return float(out.split()[0])
    except (KeyError, OSError, ValueError, IndexError, subprocess.TimeoutExpired):
        return None                       # no nvidia-smi, or no GPU named


def memory_info(tf, where):
    try:
        return tf.config.experimental.get_memory_info(where)
    except ValueError as exc:             # documented for devices whose memory is not tracked
        return f"ValueError: {exc}"


def cap_address_space():
    """Without a GPU: let this process use at most 1 GiB more address space than it uses now."""
    import resource

    with open("/proc/self/status") as status:
        vm = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmSize"))
    resource.setrlimit(resource.RLIMIT_AS, (vm + 2**30, resource.getrlimit(resource.RLIMIT_AS)[1]))


def use_memory_growth(tf, gpu, growth):
    """Let TensorFlow see only ``gpu``; with ``growth`` it takes memory as it needs it, otherwise
    nearly all of the GPU when it starts (episode 6, §2 shows this function in a cell)."""
    tf.config.set_visible_devices([gpu], "GPU")
    tf.config.experimental.set_memory_growth(gpu, growth)    # before TensorFlow uses the GPU


def halve_until_it_trains(tf, step, batch):
    """Run step(batch), halving the batch after each ResourceExhaustedError (episode 6, §2)."""
    while batch >= 1:
        failed = False
        try:
            step(batch)
        except tf.errors.ResourceExhaustedError:
            failed = True            # only note it, as in PyTorch
        gc.collect()                 # outside the except block; TensorFlow has no empty_cache()
        if not failed:
            return batch
        batch //= 2
    return 0


def search(tf, where, gpus, report):
    """Train one step of a wide Keras model at a batch too large for the memory, with
    :func:`halve_until_it_trains`; note the tries, the first error and the time in ``report``."""
    import keras

    with tf.device(where):
        model = keras.Sequential([keras.Input((1024,)), keras.layers.Dense(1024, activation="relu"),
                                  keras.layers.Dense(1)])
        model.compile(optimizer="adam", loss="mse")
    tries, errors = [], []

    def step(batch):                      # one training step; its tensors go with this frame
        tries.append(batch)
        try:
            with tf.device(where):
                model.train_on_batch(tf.random.normal([batch, 1024]), tf.zeros([batch, 1]))
        except tf.errors.ResourceExhaustedError as exc:
            errors.append(str(exc).strip().splitlines()[0])   # a string keeps no tensors alive
            raise

    total_mib = gpu_mib("memory.total") if gpus else None      # first try: inputs of 4 KiB each, twice the GPU
    first = 2 ** math.ceil(math.log2(2 * total_mib * 2**20 / 4096)) if total_mib else 2**18   # or the cap
    start = time.perf_counter()
    found = halve_until_it_trains(tf, step, first)
    report["halving search"] = {"tries": tries, "seconds": round(time.perf_counter() - start, 1)}
    if errors:
        report["first error"] = "ResourceExhaustedError: " + errors[0][errors[0].find("OOM"):][:120]
    report["largest batch found"] = found


def main(argv=None) -> dict:
    argv = sys.argv[1:] if argv is None else argv
    growth, searching = argv[0] == "growth-on", "search" in argv[1:]
    from gpucourse.frameworks import import_tensorflow, tensorflow_gpus

    tf = import_tensorflow()              # `import tensorflow as tf`, quietly; lists the GPUs, starts nothing
    gpus = tensorflow_gpus(tf)[:1]        # none where this TensorFlow cannot run on the GPU (sm_120)
    if gpus:
        use_memory_growth(tf, gpus[0], growth)
    where = "GPU:0" if gpus else "CPU:0"
    report = {"tensorflow": tf.__version__, "device": where, "memory growth": growth if gpus else "no GPU"}
    report["used before (MiB)"] = gpu_mib() if gpus else None
    report["memory info at start"] = memory_info(tf, where)
    with tf.device(where):
        tf.random.normal([1024, 1024])    # 4 MiB; the first operation starts TensorFlow on the device
    report["memory info with 4 MiB"] = memory_info(tf, where)
    report["used after (MiB)"] = gpu_mib() if gpus else None
    if searching:
        if not gpus:
            cap_address_space()
        search(tf, where, gpus, report)
        report["memory info at the end"] = memory_info(tf, where)
    print(json.dumps(report))
    return report


def _bytes(info, key):
    return format_bytes(info[key]) if isinstance(info, dict) else "?"


def describe(report: dict) -> str:
    """A child's report in three lines: where TensorFlow ran, its memory, and the search in one line."""
    growth = report["memory growth"]
    lines = [f"TensorFlow {report['tensorflow']} on {report['device']}, memory growth: "
             f"{growth if isinstance(growth, str) else ('on' if growth else 'off')}"]
    if report.get("used after (MiB)") is not None:
        lines[0] += (f"; nvidia-smi: {report['used before (MiB)']:.0f} MiB used before, "
                     f"{report['used after (MiB)']:.0f} MiB after a 4 MiB tensor")
    info = report["memory info with 4 MiB"]
    memory = (f"get_memory_info with a 4 MiB tensor: current {_bytes(info, 'current')}, peak "
              f"{_bytes(info, 'peak')}" if isinstance(info, dict) else f"get_memory_info: {info}")
    if isinstance(report.get("memory info at the end"), dict):
        memory += f"; after the search: peak {_bytes(report['memory info at the end'], 'peak')}"
    lines.append(memory)
    search_ = report.get("halving search")
    if search_:
        error = report.get("first error", "")
        shape = error[error.find("OOM"):].split(" and type")[0] if error else "no error"
        lines.append(f"halving search: batch {search_['tries'][0]:,} → {report['largest batch found']:,} "
                     f"in {len(search_['tries'])} tries ({search_['seconds']:.0f} s); first: {shape}")
    else:
        lines.append("no halving search here: without a GPU it needs Linux, to cap the process's memory")
    return "\n".join(lines)


def gpu_uuid(device) -> str:
    """nvidia-smi's name (``GPU-…``) of torch's CUDA ``device``, for :func:`run`; "" for any other device."""
    import torch

    device = torch.device(device)
    if device.type != "cuda":
        return ""
    uuid = str(torch.cuda.get_device_properties(device).uuid)
    return uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"


def run(*args, gpu_uuid="", timeout=600):
    """Run this module in a fresh Python process with ``args``; return its JSON report, or None (saying why).

    ``gpu_uuid`` (``GPU-…``) makes TensorFlow's GPU:0 the notebook's GPU. ``TF_FORCE_GPU_ALLOW_GROWTH`` is set
    to match ``args`` (Colab sets it to true, which would override ``set_memory_growth``), and oneDNN is off
    (on a CPU its kernels abort the process, instead of raising, when the address-space cap stops them).
    """
    env = {**os.environ, "TF_ENABLE_ONEDNN_OPTS": "0", "GPU_UUID": gpu_uuid,
           "TF_FORCE_GPU_ALLOW_GROWTH": "true" if args and args[0] == "growth-on" else "false"}
    if gpu_uuid:
        env["CUDA_VISIBLE_DEVICES"] = gpu_uuid
    from gpucourse.memory import run_child

    return run_child([sys.executable, "-m", "gpucourse.children.tf_memory_child", *args], env=env, timeout=timeout)


if __name__ == "__main__":
    main()
