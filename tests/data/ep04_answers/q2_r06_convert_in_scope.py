MISTAKE = "right: the solution, x converted to float64 inside keras.device('cpu:0'), then @"
KIND = "right"

import keras


def cpu_reference(x):
    with keras.device("cpu:0"):
        x64 = keras.ops.convert_to_tensor(x, "float64")
        return x64 @ keras.ops.transpose(x64)


def device_type(name):
    kind = str(name).rsplit("device:", 1)[-1].split(":")[0].upper()
    return "GPU" if kind == "CUDA" else kind


def answers():
    return (cpu_reference, device_type)
