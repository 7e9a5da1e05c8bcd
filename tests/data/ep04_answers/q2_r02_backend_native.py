MISTAKE = 'right: tf.device(first logical CPU) on TF, x.cpu().double() on torch; device_type by branching'
KIND = 'right'

import keras

def cpu_reference(x):
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf
        with tf.device(tf.config.list_logical_devices("CPU")[0].name):
            x64 = tf.cast(x, tf.float64)
            return tf.matmul(x64, x64, transpose_b=True)
    x64 = x.cpu().double()
    return x64 @ x64.T


def device_type(name):
    name = str(name).upper()
    if "DEVICE:" in name:
        name = name.split("DEVICE:")[-1]
    kind = name.split(":")[0]
    return {"CUDA": "GPU"}.get(kind, kind)


def answers():
    return (cpu_reference, device_type)
