"""Figures written the way people write them: ``1,240 GB/s``, ``0.052 s``, ``3.1 TFLOP/s``.

Python's ``:.3g`` turns 1,240 into ``1.24e+03``: correct, and unreadable beside a datasheet.
``readable`` keeps about three significant figures, groups thousands with commas, and keeps
exponent notation only where it helps: magnitudes of a billion and more, and values so small
that three significant figures would need more than six decimals.
"""

from __future__ import annotations

import math
import numbers

#: Below this magnitude a figure is written with its decimals (0.000123); smaller ones use an exponent.
SMALLEST_PLAIN = 1e-6
#: From this magnitude on, a figure keeps an exponent (1.2e+09): a reader counts digits otherwise.
LARGEST_PLAIN = 1e9


def readable(value, unit: str = "", digits: int = 3) -> str:
    """``value`` with about ``digits`` significant figures, thousands grouped, then ``unit``.

    >>> readable(1240.4, "GB/s")
    '1,240 GB/s'
    >>> readable(0.05213, "s")
    '0.0521 s'
    >>> readable(12.0)
    '12'
    >>> readable(3.2e10, "B")
    '3.2e+10 B'
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return f"{value} {unit}".strip()
    if isinstance(value, numbers.Integral):
        value = int(value)                    # a NumPy or PyTorch integer too
    else:
        value = float(value)                  # a NumPy float32 prints its own way
    if isinstance(value, int):
        text = f"{value:,}" if abs(value) < LARGEST_PLAIN else f"{value:.{digits}g}"
        return f"{text} {unit}".strip()
    if not math.isfinite(value) or value == 0:
        return f"{value:g} {unit}".strip()
    magnitude = abs(value)
    if magnitude >= LARGEST_PLAIN or magnitude < SMALLEST_PLAIN:
        return f"{value:.{digits}g} {unit}".strip()
    # Decimals that leave `digits` significant figures; none at and above 10**(digits-1).
    decimals = max(0, digits - 1 - math.floor(math.log10(magnitude)))
    text = f"{round(value, decimals):,.{decimals}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return f"{text} {unit}".strip()
