"""Figures are printed as people write them (gpucourse.numbers.readable)."""

import pytest

from gpucourse.numbers import readable
from gpucourse import reference


@pytest.mark.parametrize("value, unit, expected", [
    (1240.4, "GB/s", "1,240 GB/s"),
    (0.05213, "s", "0.0521 s"),
    (12.0, "", "12"),
    (999.7, "ms", "1,000 ms"),
    (12_345_678, "tokens", "12,345,678 tokens"),
    (2.5e-5, "s", "0.000025 s"),
    (3.2e10, "B", "3.2e+10 B"),
    (-1534.2, "", "-1,534"),
    (0.0, "s", "0 s"),
    (float("nan"), "", "nan"),
    ("n/a", "x", "n/a x"),
])
def test_readable(value, unit, expected):
    assert readable(value, unit) == expected


def test_no_exponent_below_a_billion():
    for exponent in range(-6, 9):
        for mantissa in (1.0, 1.2345, 9.999):
            assert "e" not in readable(mantissa * 10 ** exponent), (mantissa, exponent)


def test_recorded_figures_use_it():
    assert reference._format(1240.4, "GB/s") == "1,240 GB/s"
    assert reference._format(3, "GPUs") == "3 GPUs"


def test_numpy_scalars_are_written_the_same_way():
    import numpy as np

    assert readable(np.float32(1.9073486328125e-06)) == "0.00000191"
    assert readable(np.int64(12_345)) == "12,345"
    assert readable(np.float64(1240.4), "GB/s") == "1,240 GB/s"
