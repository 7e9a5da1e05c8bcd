MISTAKE = "picks 'the GPU if there is one, else the CPU'" + " (with @, not keras.ops.matmul)"
KIND = 'wrong'

import keras

def cpu_reference(x):
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf
        dev = (tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("CPU"))[0].name
    else:
        import torch
        dev = "cuda:0" if torch.cuda.is_available() else "cpu:0"
    with keras.device(dev):
        x64 = keras.ops.cast(x, "float64")
        return x64 @ keras.ops.transpose(x64)


def device_type(name):
    kind = str(name).rsplit("device:", 1)[-1].split(":")[0].upper()
    return "GPU" if kind == "CUDA" else kind


def answers():
    return (cpu_reference, device_type)
