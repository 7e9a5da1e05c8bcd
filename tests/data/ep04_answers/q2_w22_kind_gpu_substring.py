MISTAKE = "device_type: 'GPU' if 'GPU' in name else 'CPU' (misses cuda)"
KIND = 'wrong'

import keras

def cpu_reference(x):
    with keras.device("cpu:0"):
        x64 = keras.ops.cast(x, "float64")
        return x64 @ keras.ops.transpose(x64)


def device_type(name):
    return "GPU" if "GPU" in str(name) else "CPU"


def answers():
    return (cpu_reference, device_type)
