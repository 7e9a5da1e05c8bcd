MISTAKE = 'valid with true division, floats in the shape'
KIND = 'wrong'

def conv2d_facts(input_shape, filters, kernel_size, padding):
    h, w, c = input_shape
    k = kernel_size
    s = ((h - k) / 1 + 1, (w - k) / 1 + 1) if padding == 'valid' else (h, w)
    return (*s, filters), (k * k * c + 1) * filters / 1


def answers():
    return (conv2d_facts,)
