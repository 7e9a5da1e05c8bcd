MISTAKE = "right: keras.device('cpu') (no index), @ operator, regex device_type"
KIND = 'right'

import keras
import re


def cpu_reference(x):
    with keras.device("cpu"):
        x64 = keras.ops.cast(x, "float64")
        return x64 @ keras.ops.transpose(x64)


def device_type(name):
    kinds = re.findall(r"(cpu|gpu|cuda)", str(name).lower())
    return "GPU" if kinds[-1] in ("gpu", "cuda") else "CPU"


def answers():
    return (cpu_reference, device_type)
