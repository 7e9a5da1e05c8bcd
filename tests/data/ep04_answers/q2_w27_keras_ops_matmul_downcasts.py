MISTAKE = "right-looking: cast first on the CPU, then keras.ops.matmul, which on Keras-on-torch computes float64 inputs in float32 (result_type maps float64 to float32 off TensorFlow)"
KIND = "wrong on torch (Keras downcasts)"

import keras

def cpu_reference(x):
    with keras.device("cpu"):
        x64 = keras.ops.cast(x, "float64")
        return keras.ops.matmul(x64, keras.ops.transpose(x64))


import re
def device_type(name):
    kinds = re.findall(r"(cpu|gpu|cuda)", str(name).lower())
    return "GPU" if kinds[-1] in ("gpu", "cuda") else "CPU"


def answers():
    return (cpu_reference, device_type)
