MISTAKE = 'cast outside the CPU scope, matmul inside' + " (with @, not keras.ops.matmul)"
KIND = 'wrong'

import keras

def cpu_reference(x):
    x64 = keras.ops.cast(x, "float64")
    with keras.device("cpu:0"):
        return x64 @ keras.ops.transpose(x64)


def device_type(name):
    kind = str(name).rsplit("device:", 1)[-1].split(":")[0].upper()
    return "GPU" if kind == "CUDA" else kind


def answers():
    return (cpu_reference, device_type)
