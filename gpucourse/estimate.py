"""Episode 5's memory estimates, for the episodes that build on them.

Episode 5 writes these functions in its cells, as the lesson; episode 6 (running out of memory and
fitting more) imports them from here instead of repeating them. ``tests/test_memory_episodes.py``
checks that the two copies stay the same.

``state_bytes`` counts weights, gradients and Adam's two moments (16 bytes per float32 parameter);
``activation_bytes_per_sample`` adds up every layer's output for one sample; ``mlp_estimate`` is
the two together for episode 3's MLP at any width, depth and batch; ``largest`` finds the largest
size for which a test holds, by bisection.
"""

from __future__ import annotations

import math


def make_mlp(n_features, width, depth=2):          # episode 3's network
    from torch import nn

    layers, n_in = [], n_features
    for _ in range(depth):
        layers += [nn.Linear(n_in, width), nn.ReLU()]
        n_in = width
    layers.append(nn.Linear(n_in, 1))
    return nn.Sequential(*layers)


def make_cnn(width):                               # episode 4's build_model, in PyTorch
    from torch import nn

    layers, channels = [], 3
    for filters in (width, 2 * width, 4 * width):
        for _ in range(2):
            layers += [nn.Conv2d(channels, filters, 3, padding=1, bias=False), nn.BatchNorm2d(filters), nn.ReLU()]
            channels = filters
        layers.append(nn.MaxPool2d(2))
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.2), nn.Linear(channels, 10)]
    return nn.Sequential(*layers)


def training_step(model, optimizer, x, y, loss_fn):
    optimizer.zero_grad(set_to_none=True)            # frees the previous step's gradients
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()


def state_bytes(model, bytes_per_parameter=16):
    """Weights + gradients + Adam's two moments, in float32: 4 + 4 + 8 bytes per
    trainable parameter."""
    return bytes_per_parameter * sum(p.numel() for p in model.parameters() if p.requires_grad)


def activation_bytes_per_sample(model, sample_shape, bytes_per_number=4):
    """Every layer's output for one sample, plus the input: roughly what forward
    keeps for backward."""
    import torch

    sizes = [math.prod(sample_shape)]
    layers = [m for m in model.modules() if not list(m.children())]          # the innermost modules
    hooks = [m.register_forward_hook(lambda m, inputs, out: sizes.append(out.numel())) for m in layers]
    with torch.no_grad():
        model.eval()(torch.zeros(1, *sample_shape))                             # a batch of one
    model.train()
    for hook in hooks:
        hook.remove()
    return bytes_per_number * sum(sizes)


def mlp_parameters(width, depth, n_in=15):
    return (n_in + 1) * width + (depth - 1) * (width + 1) * width + (width + 1)


def mlp_estimate(width, depth, batch, step_bytes_per_parameter=16, n_in=15):
    """§1's estimate for make_mlp(n_in, width, depth): the larger of forward/backward
    (16 bytes per parameter + batch × (input + two outputs per layer + output)) and
    the optimizer step (no activations left then)."""
    n = mlp_parameters(width, depth, n_in)
    return max(16 * n + 4 * batch * (n_in + 2 * depth * width + 1), step_bytes_per_parameter * n)


def largest(fits, low, high, tolerance=0.0):
    """The largest n with fits(n), by bisection, given fits(low) and not fits(high);
    to within tolerance × n."""
    while high - low > max(1, tolerance * low):
        middle = (low + high) // 2
        if fits(middle):
            low = middle
        else:
            high = middle
    return low
