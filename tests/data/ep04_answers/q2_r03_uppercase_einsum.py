MISTAKE = "right: keras.device('CPU:0'), einsum; device_type via 'cpu' test on the last component"
KIND = 'right'

import keras

def cpu_reference(x):
    with keras.device("CPU:0"):
        x64 = keras.ops.cast(x, "float64")
        return keras.ops.einsum("ik,jk->ij", x64, x64)


def device_type(name):
    last = str(name).lower().split("/")[-1].replace("device:", "")
    return "CPU" if last.startswith("cpu") else "GPU"


def answers():
    return (cpu_reference, device_type)
