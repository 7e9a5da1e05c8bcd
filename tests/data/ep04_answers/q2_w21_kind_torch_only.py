MISTAKE = "device_type reads torch names only (torch.device): TF's long names unreadable"
KIND = 'wrong'

import keras

def cpu_reference(x):
    with keras.device("cpu:0"):
        x64 = keras.ops.cast(x, "float64")
        return x64 @ keras.ops.transpose(x64)


def device_type(name):
    import torch
    kind = torch.device(str(name)).type
    return "GPU" if kind == "cuda" else kind.upper()


def answers():
    return (cpu_reference, device_type)
