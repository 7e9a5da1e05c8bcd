MISTAKE = "torch's own `with torch.device('cpu'):` (moves no existing tensor; only factory functions follow it)"
KIND = 'wrong'

import keras


def cpu_reference(x):
    import torch
    with torch.device("cpu"):
        x64 = x.double()
        return x64 @ x64.T


def device_type(name):
    kind = str(name).rsplit("device:", 1)[-1].split(":")[0].upper()
    return "GPU" if kind == "CUDA" else kind


def answers():
    return (cpu_reference, device_type)
