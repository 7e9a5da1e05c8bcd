MISTAKE = "x.double() @ x.double().T: pure torch, follows x's device, no CPU request"
KIND = 'wrong'

import keras

def cpu_reference(x):
    x64 = x.double()
    return x64 @ x64.T


def device_type(name):
    kind = str(name).rsplit("device:", 1)[-1].split(":")[0].upper()
    return "GPU" if kind == "CUDA" else kind


def answers():
    return (cpu_reference, device_type)
