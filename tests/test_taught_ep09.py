"""Episode 9 as a lesson: the scripts' key lines shown as code (kept equal to the scripts),
none printed as output; the sizes off the first screen; this kernel's device chosen as
episode 2 teaches while the workers choose their own; and a predict-then-reveal on what
two processes gain, answered from what the notebook measures."""

from __future__ import annotations

import json
import re

import pytest
import torch

from gpucourse import device as course_device, settings
from gpucourse.distributed import slurm
from gpucourse.distributed.ddp_train import make_model
from gpucourse.distributed.key_lines import listing
from gpucourse.fakes.fakecuda import fake_backend, fake_gpu
from taught import ROOT, code_cell, code_cells, markdown_cells, prediction, run_marked

EPISODE = "episodes/09-more-than-one-gpu.ipynb"
RECORD = ROOT / "gpucourse" / "references" / "nvidia-h100-80gb-hbm3.json"


def _run(markers, namespace) -> list[str]:
    """Execute the cells holding ``markers`` in ``namespace``; the lines they printed."""
    return run_marked(EPISODE, markers, namespace)[1].splitlines()


def _fences(language: str) -> list[str]:
    """The bodies of the episode's markdown fences in ``language``."""
    pattern = re.compile(rf"^```{language}\n(.*?)^```", re.M | re.S)
    return [body for text in markdown_cells(EPISODE) for body in pattern.findall(text)]


# --------------------------------------------------------------------------- the key lines, as code

@pytest.mark.parametrize("script", ["ddp_train", "uneven", "tf_multiworker"])
def test_each_scripts_key_lines_are_listed_once_exactly_as_the_script_has_them(script):
    shown = [body for body in _fences("python") if body.rstrip("\n") == listing(script)]
    assert len(shown) == 1, (
        f"{EPISODE} should list {script}.py's marked blocks once, as the script has them: "
        "bring the listing in step with the script (or the script with the listing)")


def test_the_listings_are_short_enough_to_read_without_scrolling_sideways():
    for body in _fences("python"):
        assert all(len(line) <= 88 for line in body.splitlines()), body[:80]


def test_the_slurm_script_is_folded_and_equal_to_the_one_slurm_write_writes():
    (folded,) = [text for text in markdown_cells(EPISODE)
                 if "slurm.SBATCH" in text and "<details>" in text]
    assert _fences("bash").count(slurm.SBATCH) == 1
    assert folded.rstrip().endswith("</details>")


def test_no_cell_prints_source_code():
    for source in code_cells(EPISODE):
        assert "key_lines(" not in source and "SBATCH" not in source, source[:80]


def test_every_launch_keeps_its_whole_output_in_a_log_and_prints_a_few_lines():
    launches = [s for s in code_cells(EPISODE) if re.search(r"\blaunch(_many)?\(", s)]
    assert len(launches) == 6
    for source in launches:
        assert re.search(r"log=RUNS / \"\w+\.log\"", source), source[:80]


# --------------------------------------------------------------------------- the sampler, run here

def test_the_sampler_cell_deals_every_sample_once_and_reshuffles_each_epoch():
    namespace = {"DistributedSampler": torch.utils.data.DistributedSampler}
    lines = _run(["DistributedSampler(samples"], namespace)
    assert len(lines) == 2
    epochs = [[json.loads(part) for part in re.findall(r"\[[\d, ]+\]", line)] for line in lines]
    for rank0, rank1 in epochs:
        assert sorted(rank0 + rank1) == list(range(12)) and len(rank0) == len(rank1) == 6
    assert epochs[0] != epochs[1], "set_epoch should give the second epoch a new order"


def test_the_rank_0_checkpoint_loads_into_a_plain_model_on_the_chosen_device():
    checkpoint = {"model": make_model().state_dict()}
    namespace = {"make_model": make_model, "checkpoint": checkpoint, "device": torch.device("cpu")}
    lines = _run(["model.load_state_dict("], namespace)
    assert lines == ["loaded 6 tensors into a plain model on cpu"]
    assert all(torch.equal(namespace["model"].state_dict()[k], v)
               for k, v in checkpoint["model"].items())


# --------------------------------------------------------------------------- sizes and device

def test_the_sizes_come_from_the_episodes_file_and_every_name_the_cells_use_is_in_it():
    sources = code_cells(EPISODE)
    assert not any("}[MODE]" in source for source in sources), "no three-mode table in a cell"
    assert 'SIZES = settings.sizes("ep09", gpu_available=course_device.cuda_usable())' in code_cell(
        EPISODE, "settings.sizes(")
    table = json.loads((settings.SIZES_DIR / "ep09.json").read_text(encoding="utf-8"))
    assert set(table) == set(settings.MODES)
    assert all(set(row) == set(table["full"]) for row in table.values())
    used = set(re.findall(r"SIZES\[[\"'](\w+)[\"']\]", "\n".join(sources)))
    assert used == set(table["full"]), used


def _first_cells(backend):
    """Run the episode's imports, sizes, device and process-count cells under ``backend``."""
    namespace: dict = {}
    with backend:
        lines = _run(["from gpucourse import device as course_device", "settings.sizes(",
                      "course_device.pick_device()", "NPROC = "], namespace)
    return lines, namespace


@pytest.mark.parametrize("kind, expected", [("mps", torch.device("mps")),
                                            ("xpu", torch.device("xpu", 0))])
def test_apple_and_intel_gpus_are_the_kernels_device_and_the_workers_run_on_cpus(kind, expected):
    lines, namespace = _first_cells(fake_backend(kind))
    assert namespace["device"] == expected
    assert lines[0] == namespace["SIZES"].describe()
    assert lines[1] == course_device.describe_choice(expected)
    assert namespace["NPROC"] == 2 and namespace["RUN_ENV"] == {"CUDA_VISIBLE_DEVICES": ""}
    assert lines[2] == "2 processes, on the CPU (each needs a GPU of its own); global batch 256"


@pytest.mark.parametrize("count, nproc, batch", [(1, 2, 256), (2, 2, 256), (3, 3, 252),
                                                 (8, 8, 256)])
def test_one_process_per_gpu_with_two_or_more_and_a_batch_every_count_divides(count, nproc, batch):
    lines, namespace = _first_cells(fake_gpu("T4", count=count, nvidia_smi=False, children=False))
    assert namespace["device"] == torch.device("cuda:0")
    assert (namespace["NPROC"], namespace["GLOBAL_BATCH"]) == (nproc, batch)
    assert all(batch % n == 0 for n in (1, 2, nproc))
    assert (namespace["RUN_ENV"] is None) == (count >= 2)


def test_cuda_only_calls_are_asked_for_a_cuda_gpu():
    for source in code_cells(EPISODE):
        assert 'torch.device("cuda" if' not in source
        cuda_calls = set(re.findall(r"torch\.cuda\.(\w+)", source)) - {"is_available"}
        if cuda_calls:
            assert ("course_device.cuda_usable()" in source or "n_gpus >= 2" in source), source[:80]


# --------------------------------------------------------------------------- predict, then reveal

def test_one_prediction_before_the_runs_it_asks_about_and_an_answer_after_them():
    between, _ = prediction(EPISODE)
    assert any('"--nproc-per-node={NPROC}"' in t for t in between), "the DDP run is measured between"
    assert any('"--nproc-per-node=1"' in t for t in between), "so is the one-process run"
    assert any("samples per second" in t for t in between), "and the comparison printed"


def test_the_answer_names_the_record_which_has_no_figure_for_this_question():
    """The record was made on one GPU: if a multi-GPU figure appears, the answer must quote it."""
    record = json.loads(RECORD.read_text(encoding="utf-8"))
    assert not [name for name in record["figures"] if name.startswith("ep09.")], (
        "the GPU record now has an episode 9 figure: quote it in the answer")
    assert record["hardware"]["gpu_count"] == 1
    _, answer = prediction(EPISODE)
    name = f"recorded on an {record['hardware']['gpu_name']} (course record, {record['date']})"
    assert name in answer and "one GPU" in answer
