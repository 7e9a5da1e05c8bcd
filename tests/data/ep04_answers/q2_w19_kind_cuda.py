MISTAKE = "device_type returns 'CUDA' for torch names"
KIND = 'wrong'

import keras

def cpu_reference(x):
    with keras.device("cpu:0"):
        x64 = keras.ops.cast(x, "float64")
        return x64 @ keras.ops.transpose(x64)


def device_type(name):
    return str(name).rsplit("device:", 1)[-1].split(":")[0].upper()


def answers():
    return (cpu_reference, device_type)
