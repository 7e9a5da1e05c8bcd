"""``tools/gpu_check.py --envelope t4``: a T4's limits on a big GPU, under the fake CUDA runtime.

A fake H100 is made to look like a T4 where software can (``gpucourse/fakes/envelope.py``); its record
is labelled "T4 envelope on NVIDIA H100 80GB HBM3", never shown as a T4 nor used as the H100's
reference, and the feasibility model's T4 rows are held against each notebook.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import nbformat
import pytest

from conftest import ROOT
from gpucourse import feasibility, reference
from gpucourse.fakes import envelope
from gpucourse.fakes.fakecuda import fake_gpu

sys.path.insert(0, str(ROOT / "tools"))
import gpu_check  # noqa: E402

T4 = feasibility.gpu_models()["T4"]


def test_the_limits_come_from_the_feasibility_models_t4():
    limits = envelope.t4_limits()
    assert limits["memory_bytes"] == T4["total_memory"] == 15_828_320_256
    assert limits["compute_capability"] == (7, 5)
    assert limits["sdpa_off"] == ["cudnn", "flash"]          # sm_75 has efficient and math only
    assert limits["bf16_hardware"] is False


def test_a_fake_h100_in_the_envelope_looks_like_a_t4_where_software_can():
    with fake_gpu("H100") as gpu:
        import torch
        from torch.nn.attention import SDPBackend, sdpa_kernel

        done = envelope.apply(torch)
        try:
            assert torch.cuda.get_device_capability(0) == (7, 5)
            props = torch.cuda.get_device_properties(0)
            assert props.name == "NVIDIA H100 80GB HBM3"              # never called a T4
            assert props.total_memory == T4["total_memory"]
            assert torch.cuda.mem_get_info(0)[1] == T4["total_memory"]
            assert torch.cuda.is_bf16_supported() is False
            assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32
            assert not torch.backends.cuda.flash_sdp_enabled()
            assert torch.backends.cuda.mem_efficient_sdp_enabled()
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                assert not torch.backends.cuda.flash_sdp_enabled()   # a T4 has no Flash kernel
            gpu.allocate(12 * 2**30)                                  # fits a T4
            with pytest.raises(torch.OutOfMemoryError):
                gpu.allocate(4 * 2**30)                               # 16 GiB: not on a T4
            assert done["bf16"] == "emulated" and done["tf32"] == "off"
        finally:
            envelope.remove(torch)
        assert torch.cuda.get_device_capability(0) == (9, 0) and torch.backends.cuda.flash_sdp_enabled()


def _notebook(path: Path, *sources: str) -> Path:
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources]), path)
    return path


def test_an_envelope_run_under_the_fake_h100_is_labelled_and_never_a_t4(tmp_path, monkeypatch):
    probe = _notebook(tmp_path / "probe.ipynb", "\n".join([
        "import torch",
        "from gpucourse import reference",
        "cc = torch.cuda.get_device_capability(0)",
        "reference.path_taken('ep99.capability', f'{cc[0]}.{cc[1]}')",
        "reference.path_taken('ep99.bf16', str(torch.cuda.is_bf16_supported()))",
        "reference.key_figure('ep99.total_gib', torch.cuda.get_device_properties(0).total_memory / 2**30,",
        "                     unit='GiB', device=torch.cuda.get_device_name(0))",
    ]))
    out = tmp_path / "refs"
    monkeypatch.setenv("GPUCOURSE_REFERENCE_DIR", str(out))
    with fake_gpu("H100"):
        status = gpu_check.main(["--only", str(probe), "--out", str(out), "--envelope", "t4"])
    assert status == 0
    path = out / "nvidia-h100-80gb-hbm3-t4-envelope.json"
    record = reference.validate(json.loads(path.read_text()))
    assert record["envelope"] == "t4" and record["label"] == "T4 envelope on NVIDIA H100 80GB HBM3"
    log = record["runs"][0]["notebooks"][0]
    assert log["path"]["ep99.capability"] == {"value": "7.5"}
    assert log["path"]["ep99.bf16"] == {"value": "False"}
    assert log["path"]["envelope"] == {"value": "t4"}
    assert record["figures"]["ep99.total_gib"]["value"] == pytest.approx(T4["total_memory"] / 2**30)
    # never the H100's reference, never a T4's: only the T4 reveal reads it, labelled
    assert reference.gpu_reference("ep99.total_gib") is None
    assert reference.band("ep99.total_gib", "NVIDIA H100 80GB HBM3") is None
    assert reference.envelope_figure("ep99.total_gib")[0]["label"].startswith("T4 envelope on")


def test_the_feasibility_rows_are_held_against_an_envelope_run():
    episode = ROOT / "episodes" / "10-language-model.ipynb"
    rows = feasibility.episode_rows(episode, T4, "2.11.0")
    assert rows and all(r.nbytes < feasibility.FIT_FRACTION * T4["total_memory"] for r in rows)
    ok = gpu_check.hold_feasibility({"notebook": "episodes/10-language-model.ipynb", "outcome": "ok",
                                     "seconds": 1.0}, episode, "2.11.0")
    assert ok["outcome"] == "ok" and ok["feasibility_t4"]["fit"] == len(rows)
    stopped = gpu_check.hold_feasibility(
        {"notebook": "episodes/10-language-model.ipynb", "outcome": "failed", "seconds": 1.0,
         "reason": "OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB"}, episode, "2.11.0")
    assert stopped["outcome"] == "failed" and stopped["feasibility_t4"]["contradicted"]
    assert stopped["reason"].startswith(f"out of memory in the T4 envelope, where the feasibility model "
                                        f"says all {len(rows)} rows fit")


def test_the_t4_reveal_prefers_a_t4_then_the_envelope_then_the_prediction(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("GPUCOURSE_REFERENCE_DIR", str(tmp_path))

    def record(name, gpu, envelope_=None, value=1.0):
        body = {"schema": 2, "date": "2026-12-01", "device": name, "mode": "full",
                "hardware": {"gpu_name": gpu}, "software": {}, "notebooks": [], "runs": [],
                "figures": {"ep12.fused_gbps": {"value": value, "unit": "GB/s", "device": gpu,
                                                "notebook": "episodes/12-gpu-kernels.ipynb", "run": "r",
                                                "commit": "c", "blob": "b", "date": "2026-12-01",
                                                "path": {}}}}
        if envelope_:
            body["envelope"] = envelope_
        (tmp_path / f"{name}.json").write_text(json.dumps(body))

    reference.t4_reveal("ep12.fused_gbps", "GB/s", predicted=270.0, basis="90 % of 300 GB/s")
    shown = capsys.readouterr().out
    assert "Predicted for a T4 (the course's feasibility model, not a measurement): 270 GB/s" in shown
    record("h100", "NVIDIA H100 80GB HBM3", value=2160.0)
    reference.t4_reveal("ep12.fused_gbps", "GB/s", predicted=270.0)
    shown = capsys.readouterr().out
    assert "Predicted for a T4" in shown and "Recorded on NVIDIA H100 80GB HBM3" in shown
    assert "320 GB/s of memory bandwidth against 3,350 GB/s (10× less)" in shown
    record("h100-t4-envelope", "NVIDIA H100 80GB HBM3", "t4", value=2000.0)
    reference.t4_reveal("ep12.fused_gbps", "GB/s", predicted=270.0)
    shown = capsys.readouterr().out
    assert "T4 envelope on NVIDIA H100 80GB HBM3: 2,000 GB/s" in shown and "not a T4" in shown
    assert "Predicted" not in shown and "Recorded on NVIDIA H100 80GB HBM3, 2026-12-01: 2,160 GB/s" in shown
    record("t4", "Tesla T4", value=250.0)
    reference.t4_reveal("ep12.fused_gbps", "GB/s")
    shown = capsys.readouterr().out
    assert "On a T4: 250 GB/s, measured on Tesla T4" in shown and "envelope" not in shown
