MISTAKE = "device_type reads TensorFlow names only (tf.DeviceSpec); torch's 'cuda:0' unreadable"
KIND = 'wrong'

import keras

def cpu_reference(x):
    with keras.device("cpu:0"):
        x64 = keras.ops.cast(x, "float64")
        return x64 @ keras.ops.transpose(x64)


def device_type(name):
    import tensorflow as tf
    return tf.DeviceSpec.from_string(str(name)).device_type


def answers():
    return (cpu_reference, device_type)
