"""The feasibility model: what runs on each GPU, and does every full-size row fit."""

from __future__ import annotations

import pytest

from gpucourse import feasibility


@pytest.mark.parametrize("capability, torch_version, expected", [
    ((7, 5), "2.11.0+cu128", []),                  # T4: math fallback (G4-1)
    ((8, 0), "2.11.0+cu128", ["flash", "cudnn"]),
    ((12, 0), "2.11.0+cu128", ["flash", "cudnn"]),  # the G4's Blackwell is inside sm80..sm121
    ((7, 5), "2.13.0+cpu", []),
    ((7, 5), "2.14.0", ["efficient"]),              # pytorch/pytorch#191085
    ((12, 2), "2.11.0", []),
])
def test_gqa_fused_backends(capability, torch_version, expected):
    assert feasibility.gqa_fused_backends(capability, torch_version) == expected


@pytest.mark.parametrize("bad", ["", "cpu", "2"])
def test_gqa_fused_backends_rejects_unreadable_versions(bad):
    with pytest.raises(ValueError, match="torch version"):
        feasibility.gqa_fused_backends((8, 0), bad)


def test_gqa_fused_backends_rejects_torch_without_enable_gqa():
    with pytest.raises(ValueError, match="2.5"):
        feasibility.gqa_fused_backends((8, 0), "2.4.1")
