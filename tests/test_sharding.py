"""Episode 13's sharding scripts, run for real on CPU processes (Gloo), and its memory plan.

The scripts are the episode's own: its ``%%writefile`` cells, written into a folder as the
notebook writes them (``write_scripts``). One 2-process FSDP2 run, started the way the episode
starts it but on a machine that looks like one T4 (the fake CUDA runtime, which child processes
see too), checks: the processes stayed on the CPU; every rank's bytes of parameters, gradients
and Adam state are its torch.chunk share (the whole model over the ranks, padding allocated);
ZeRO-3 and ZeRO-2 train the single-process weights to float32 rounding; ZeRO-3 all-gathers twice
as often as ZeRO-2; no process outlives the launch. The episode's fake-process-group cell agrees
with the memory plan's closed form, and a failing one gives the closed form with a message that
names the internal APIs.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
import torch

from gpucourse.distributed import launch, torchrun
from gpucourse.distributed import memory_plan, sharded
from gpucourse.fakes.fakecuda import fake_gpu
from gpucourse.llm import CONFIGS
from taught import cells, run_marked

EPISODE = "episodes/13-sharding.ipynb"
WRITEFILE = re.compile(r"^%%writefile \{WORK\}/(?P<name>\w+\.py)\n")


def scripts() -> dict[str, str]:
    """The files the episode's ``%%writefile {WORK}/name.py`` cells write: name -> text."""
    found = {}
    for cell in cells(EPISODE):
        source = "".join(cell["source"])
        match = WRITEFILE.match(source) if cell["cell_type"] == "code" else None
        if match:
            assert match["name"] not in found, f"{match['name']} is written by two cells"
            found[match["name"]] = source[match.end():] + "\n"
    return found


def write_scripts(folder: Path) -> Path:
    """Write the episode's scripts into ``folder``, as its cells do; return the folder."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in scripts().items():
        (folder / name).write_text(text)
    return folder


def child_device(wanted: str) -> str:
    code = ("from gpucourse.distributed.sharded import pick_device; "
            f"print(*pick_device(0, 2, {wanted!r}))")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env=dict(os.environ, LOCAL_RANK="0")).stdout.split()


def test_one_gpu_keeps_two_processes_on_the_cpu_and_two_gpus_use_nccl():
    with fake_gpu("T4", 1):
        assert torch.cuda.is_available()
        assert sharded.pick_device(0, 2) == ("cpu", "gloo")
        assert child_device("auto") == ["cpu", "gloo"]           # the child sees the same T4
        with pytest.raises(RuntimeError, match="one GPU per process"):
            sharded.pick_device(0, 2, "cuda")
    with fake_gpu("T4", 2):
        assert child_device("auto") == ["cuda", "nccl"]
        assert child_device("cpu") == ["cpu", "gloo"]            # told to stay on the CPU


def _held(shape, world, rank):
    pieces = torch.empty(shape).chunk(world)
    return pieces[rank].numel() if rank < len(pieces) else 0


@pytest.fixture(scope="module")
def fsdp_run(tmp_path_factory):
    """Started as the episode starts it on Colab's one T4: CPU processes, with ENV, saving a checkpoint.
    Under the fake CUDA runtime a rank that opens the GPU fails: before worker_env, dcp.save's
    FileSystemWriter asked for a CUDA stream in every CPU rank (torch.cuda.is_available() was True)."""
    out = tmp_path_factory.mktemp("fsdp")
    work = write_scripts(out / "work")
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with fake_gpu("T4", 1):                   # a machine with one GPU: the run must stay on the CPU
        run = launch(torchrun("--standalone", "--nproc-per-node=2", work / "fsdp_train.py",
                              "--out", out, "--strategies", "zero3,zero2,ddp", "--steps", 3,
                              "--device", "cpu", "--save-at", 2, "--checkpoint", out / "ckpt"),
                     timeout=240, show=False, env=sharded.worker_env("cpu"))
    left = {p.pid for p in psutil.Process().children(recursive=True)} - before
    assert run.ok, run.output[-3000:]
    assert (out / "ckpt" / ".metadata").is_file()
    return [json.loads((out / f"result-rank{r}.json").read_text()) for r in range(2)], left


def test_cpu_ranks_see_no_gpu():
    assert sharded.worker_env("cpu") == {"CUDA_VISIBLE_DEVICES": ""}
    assert sharded.worker_env("auto") == {} == sharded.worker_env("cuda")
    with fake_gpu("T4", 1):
        code = "import torch; print(torch.cuda.is_available())"
        env = dict(os.environ, **sharded.worker_env("cpu"))
        seen = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert seen.stdout.split() == ["False"]


def test_zero2_holds_the_whole_model_from_forward_to_backward_and_zero3_one_block(fsdp_run):
    """The paper's ZeRO-2 keeps the 16-bit weights whole; FSDP's SHARD_GRAD_OP holds them whole at the
    start of backward, though sharded after it. The peak counts what the rank allocates: the gathered
    parameters *and* the padded shards, which stay allocated beside them (FSDPParam.to_unsharded), so
    zero2's peak is the whole model plus its shards, more than the whole model on every rank with a
    non-empty shard (counting model.parameters() alone gave exactly the whole model). zero3's is its
    shards plus one whole block and the whole root (the input and output layers). A gathered tensor
    is allocated as the all-gather's output, N padded shards: the one-row head takes two rows."""
    ranks, _ = fsdp_run
    full, shapes = ranks[0]["full_params_bytes"], ranks[0]["param_shapes"]
    last = str(max(int(k.split(".")[0]) for k in shapes))

    def whole(units):                  # float32 bytes of `units`, gathered: 2 padded shards each
        return 4 * sum(2 * torch.empty(s).chunk(2)[0].numel() for k, s in shapes.items()
                       if k.split(".")[0] in units)

    everything = {k.split(".")[0] for k in shapes}
    for r in ranks:
        z2, z3 = r["strategies"]["zero2"]["bytes"], r["strategies"]["zero3"]["bytes"]
        assert z2["params"] > 0 and z2["params_peak"] > full + z2["params"]
        assert z2["params_peak"] == whole(everything) + z2["params_allocated"]
        assert z3["params_peak"] == z3["params_allocated"] + whole({"1"}) + whole({"0", last})
        assert r["strategies"]["ddp"]["bytes"]["params_peak"] == full


def test_held_param_bytes_counts_a_storage_once():
    """Two parameters on one storage (tied weights) count once; a plain model's is its parameters' bytes."""
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 4, bias=False))
    assert sharded.held_param_bytes(model) == 4 * (4 * 3 + 3 + 3 * 4)
    model[1].weight = torch.nn.Parameter(model[0].weight.detach().t())     # a view: the same storage
    assert sharded.held_param_bytes(model) == 4 * (4 * 3 + 3)
    assert sharded.fsdp_shards(model) == []


def test_each_rank_holds_its_chunk_and_the_ranks_hold_the_model(fsdp_run):
    ranks, _ = fsdp_run
    shapes = ranks[0]["param_shapes"].values()
    assert {r["device"] for r in ranks} == {"cpu"} and {r["backend"] for r in ranks} == {"gloo"}
    for strategy in ("zero3", "zero2"):
        held = [r["strategies"][strategy]["bytes"] for r in ranks]
        for rank, b in enumerate(held):
            rule = 4 * sum(_held(s, 2, rank) for s in shapes)
            assert b["params"] == b["grads"] == rule
            assert b["optimizer"] == 2 * rule                    # Adam's two moments
            padded = 4 * sum(torch.empty(s).chunk(2)[0].numel() for s in shapes)
            assert b["params_allocated"] == padded
        assert sum(b["params"] for b in held) == ranks[0]["full_params_bytes"]
        assert held[1]["params"] < ranks[0]["full_params_bytes"] / 2 < held[0]["params"]   # the one-row head
    ddp = ranks[1]["strategies"]["ddp"]["bytes"]
    assert ddp["params"] == ddp["grads"] == ranks[0]["full_params_bytes"]


def test_sharded_training_matches_one_process(fsdp_run):
    ranks, _ = fsdp_run
    for strategy, result in ranks[0]["strategies"].items():
        assert result["max_weight_difference"] < 1e-5, strategy
        assert max(abs(a - b) for a, b in zip(result["losses"], result["reference_losses"])) < 1e-5


def test_zero3_gathers_twice_what_zero2_gathers(fsdp_run):
    comm = fsdp_run[0][0]["strategies"]
    z3, z2 = comm["zero3"]["comm"], comm["zero2"]["comm"]
    assert z3["all-gather"]["calls"] == 2 * z2["all-gather"]["calls"]
    assert z3["all-gather"]["bytes"] == 2 * z2["all-gather"]["bytes"]
    assert z3["reduce-scatter"] == z2["reduce-scatter"]
    assert set(comm["ddp"]["comm"]) == {"all-reduce"}
    full = fsdp_run[0][0]["full_params_bytes"]
    assert comm["ddp"]["comm"]["all-reduce"]["bytes"] == full       # every gradient, once a step


def episode_shard():
    """The episode's cells that shard on a fake process group, run here: its function."""
    namespace = {"torch": torch, "memory_plan": memory_plan}
    namespace, _ = run_marked(EPISODE, ["fake_pg import FakeStore", "def shard_on_fake_group"],
                              namespace)
    return namespace["shard_on_fake_group"]


def test_the_episodes_fake_process_group_plan_equals_the_closed_form():
    shard = episode_shard()
    for name in ("Llama-2-7B", "Llama-3.1-70B"):
        fake = memory_plan.plan(name, 64, shard)
        closed = memory_plan.closed_form(CONFIGS[name], 64, 0)
        assert fake["how"] == "fake process group"
        assert fake["gathered_size"] == 2        # read from the policy FSDP holds: bfloat16, as in section 1
        for key in ("held", "parameters", "state_bytes", "root_bytes", "layer_bytes", "gathered_bytes"):
            assert fake[key] == closed[key], (name, key)
    assert fake["parameters"] == 70_553_706_496
    assert math.isclose(closed["held"], closed["parameters"] / 64, rel_tol=0.01)


def test_plan_falls_back_with_a_message_when_the_internal_api_moves():
    def moved(*args, **kwargs):
        raise ImportError("No module named 'torch.testing._internal.distributed.fake_pg'")

    row = memory_plan.plan("Llama-2-7B", 64, moved)
    assert row["how"] == "closed form" and "internal APIs" in row["note"] and "fake_pg" in row["note"]
    assert row["held"] == memory_plan.closed_form(CONFIGS["Llama-2-7B"], 64)["held"]
    assert "note" not in memory_plan.plan("Llama-2-7B", 64, episode_shard())


def test_a_fake_shard_leaves_no_process_group_behind():
    """The episode shards in the notebook's own process: the fake group must be gone after each
    plan, or the next plan (and any later run) fails with "already initialized"."""
    import torch.distributed as dist

    shard = episode_shard()
    for world in (64, 128):
        assert memory_plan.plan("Llama-2-7B", world, shard)["how"] == "fake process group"
        assert not dist.is_initialized()


def test_the_70b_plan_goes_below_a_t4_and_the_episode_says_where_from_the_computation():
    """The episode said the 70B line "stays above a T4"; by its own closed form it crosses below."""
    from gpucourse import feasibility

    t4 = feasibility.gpu_models()["T4"]["total_memory"]
    c = CONFIGS["Llama-3.1-70B"]
    fewest = memory_plan.smallest_world(c, t4)
    assert fewest is not None and 64 < fewest <= 1024
    assert memory_plan.closed_form(c, fewest)["per_gpu_bytes"] <= t4 < memory_plan.closed_form(c, fewest // 2)[
        "per_gpu_bytes"]
    text = json.loads(open("episodes/13-sharding.ipynb").read())
    markdown = " ".join("".join(cell["source"]) for cell in text["cells"] if cell["cell_type"] == "markdown")
    assert "stays above a T4" not in markdown
    code = " ".join("".join(cell["source"]) for cell in text["cells"] if cell["cell_type"] == "code")
    assert "smallest_world(" in code


def test_the_memory_plan_counts_the_root_whole_and_a_prefetched_layer():
    c = CONFIGS["Llama-3.1-70B"]
    row = memory_plan.closed_form(c, 64)
    h, v = c["hidden_size"], c["vocab_size"]
    assert row["root_bytes"] == 4 * (2 * v * h + h)
    layer = (row["parameters"] - (2 * v * h + h)) // c["num_hidden_layers"]
    assert row["layer_bytes"] == 6 * layer
    assert memory_plan.activation_bytes(c, 4096) == 80 * 4096 * 8192 * 2 + 2 * 4096 * v * 4


def test_fsdp_param_groups_reads_torch_2_13_and_the_torch_2_11_colab_has():
    """torch 2.13 keeps a list (`_fsdp_param_groups`); 2.10 and 2.11 (Kaggle, Colab) one group
    or None (`_fsdp_param_group`): episode 13's peak failed on Colab with the list alone."""
    from types import SimpleNamespace

    from gpucourse.distributed.sharded import fsdp_param_groups

    assert fsdp_param_groups(SimpleNamespace(_fsdp_param_groups=["a", "b"])) == ["a", "b"]
    assert fsdp_param_groups(SimpleNamespace(_fsdp_param_group="a")) == ["a"]
    assert fsdp_param_groups(SimpleNamespace(_fsdp_param_group=None)) == []
