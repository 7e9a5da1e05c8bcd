"""TensorFlow's GPU memory, in a fresh process (episode 6, §2).

Memory growth can be set only once per process and TensorFlow keeps what it took until the process
ends, so each run is a new Python process::

    python -m gpucourse.tf_memory_child growth-on           # memory growth on; report memory
    python -m gpucourse.tf_memory_child growth-off search   # off; then run out and halve the batch

It prints one line of JSON: the TensorFlow version, the device, what ``nvidia-smi`` says the GPU
uses before and after TensorFlow starts (``GPU_UUID`` names the GPU), what
``tf.config.experimental.get_memory_info`` reports, and, with ``search``, each try of a halving
search for a batch that trains. Without a GPU the search runs under an address-space cap of 1 GiB
more than the process uses (Linux only), so that it runs out there and not in the machine's
memory. ``run()`` starts such a process from a notebook and returns the JSON as a dict.
"""

from __future__ import annotations

import gc
import json
import math
import os
import subprocess
import sys
import time


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


def halving_search(tf, where, gpus, report):
    """Train one Keras step at a batch too large for the memory, halving it after each out-of-memory error."""
    import keras

    with tf.device(where):
        model = keras.Sequential([keras.Input((1024,)), keras.layers.Dense(1024, activation="relu"),
                                  keras.layers.Dense(1)])
        model.compile(optimizer="adam", loss="mse")

    def attempt(batch):                   # one training step; its tensors go with this function's frame
        with tf.device(where):
            model.train_on_batch(tf.random.normal([batch, 1024]), tf.zeros([batch, 1]))

    total_mib = gpu_mib("memory.total") if gpus else None      # first try: inputs of 4 KiB each, twice the GPU
    batch = 2 ** math.ceil(math.log2(2 * total_mib * 2**20 / 4096)) if total_mib else 2**18   # or the cap
    tries = []
    while batch >= 1:
        failed = False
        start = time.perf_counter()
        try:
            attempt(batch)
        except tf.errors.ResourceExhaustedError as exc:
            failed = True                 # only note it, as in PyTorch
            text = str(exc).strip().splitlines()[0]
            report.setdefault("first error", type(exc).__name__ + ": " + text[text.find("OOM"):][:120])
        gc.collect()                      # outside the except block
        tries.append(f"{batch:,}: {'out of memory' if failed else 'trained'} ({time.perf_counter() - start:.1f} s)")
        if not failed:
            break
        batch //= 2
    report["halving search"] = tries
    report["largest batch found"] = batch


def main(argv=None) -> dict:
    argv = sys.argv[1:] if argv is None else argv
    growth, search = argv[0] == "growth-on", "search" in argv[1:]
    from gpucourse.frameworks import import_tensorflow, tensorflow_gpus

    tf = import_tensorflow()              # `import tensorflow as tf`, quietly; lists the GPUs, starts nothing
    gpus = tensorflow_gpus(tf)[:1]        # none where this TensorFlow cannot run on the GPU (sm_120)
    if gpus:
        tf.config.set_visible_devices(gpus, "GPU")
        tf.config.experimental.set_memory_growth(gpus[0], growth)    # before TensorFlow uses the GPU
    where = "GPU:0" if gpus else "CPU:0"
    report = {"tensorflow": tf.__version__, "device": where, "memory growth": growth if gpus else "no GPU"}
    report["used before (MiB)"] = gpu_mib() if gpus else None
    report["memory info at start"] = memory_info(tf, where)
    with tf.device(where):
        tf.random.normal([1024, 1024])    # 4 MiB; the first operation starts TensorFlow on the device
    report["memory info with 4 MiB"] = memory_info(tf, where)
    report["used after (MiB)"] = gpu_mib() if gpus else None
    if search:
        if not gpus:
            cap_address_space()
        halving_search(tf, where, gpus, report)
        report["memory info at the end"] = memory_info(tf, where)
    print(json.dumps(report))
    return report


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

    return run_child([sys.executable, "-m", "gpucourse.tf_memory_child", *args], env=env, timeout=timeout)


if __name__ == "__main__":
    main()
