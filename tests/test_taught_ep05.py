"""Episode 5's taught line, its sizes, and its cells on every device.

The meta-device parameter count is written in a cell of episode 5 (the lesson, and what its
later cells call); episode 10's ``llm.count_parameters`` does the same for a Llama model, and
the two must count alike. The device cells run under the fake CUDA runtime and with Apple's
and Intel's GPUs faked; the host-RAM cells measure this process as the notebook does.
"""

from __future__ import annotations

import ast
import inspect
import json
import re
import textwrap

import psutil
import pytest
import torch

from gpucourse import estimate, feasibility, llm, reference, settings
from gpucourse.fakes import fakecuda
from taught import ROOT, cell_function, cells_calling, code_cells, prediction, run_marked

EPISODE = "episodes/05-gpu-memory.ipynb"
MIB = 2**20


def run(markers, namespace: dict | None = None) -> tuple[dict, str]:
    return run_marked(EPISODE, markers, namespace)


IMPORTS, DEVICE, SWITCH = "import psutil", "course_device.pick_device()", "gpu_name = "


def lesson_function(name: str):
    """The cell's ``def name``, compiled alone with the names a notebook has imported."""
    tree = ast.Module(body=[cell_function(EPISODE, name)], type_ignores=[])
    namespace = {"torch": torch, "math": __import__("math"), "nn": torch.nn}
    exec(compile(tree, EPISODE, "exec"), namespace)
    return namespace[name]


# --------------------------------------------------------------------------- the meta-device count

def test_the_count_is_written_in_a_cell_on_the_meta_device():
    function = cell_function(EPISODE, "count_parameters")
    devices = [ast.unparse(item.context_expr) for node in ast.walk(function)
               if isinstance(node, ast.With) for item in node.items]
    assert devices == [ast.unparse(ast.parse('torch.device("meta")'))], devices
    assert ast.unparse(function.body[-1]) == ast.unparse(
        ast.parse("return sum(p.numel() for p in model.parameters())").body[0])


@pytest.mark.parametrize("make", [lambda: estimate.make_mlp(15, 48, depth=3),
                                  lambda: estimate.make_cnn(8)], ids=["MLP", "CNN"])
def test_the_count_is_what_a_built_model_holds(make):
    count_parameters = lesson_function("count_parameters")
    assert count_parameters(make) == sum(p.numel() for p in make().parameters())


def test_the_count_allocates_nothing_for_a_model_larger_than_the_machine():
    """120 GB of float32 parameters: built anywhere but on the meta device, this fails."""
    count_parameters = lesson_function("count_parameters")
    process = psutil.Process()
    before = process.memory_info().rss
    n = count_parameters(lambda: estimate.make_mlp(15, 100_000, depth=4))
    assert n == estimate.mlp_parameters(100_000, 4) > psutil.virtual_memory().total / 4
    assert process.memory_info().rss - before < 64 * MIB


def test_the_cell_and_episode_10s_helper_count_alike():
    """llm.count_parameters is the same two lines for a Llama model: same lines, same count."""
    count_parameters = lesson_function("count_parameters")
    config = llm.llama_config("SmolLM2-135M", num_hidden_layers=2)
    from transformers import LlamaForCausalLM

    assert count_parameters(lambda: LlamaForCausalLM(config)) == llm.count_parameters(config)
    helper = ast.parse(textwrap.dedent(inspect.getsource(llm.count_parameters))).body[0]
    lesson = cell_function(EPISODE, "count_parameters")

    def taught_lines(function):
        """The ``with torch.device(...)`` items and the return statement, as source."""
        withs = [ast.unparse(item) for node in ast.walk(function) if isinstance(node, ast.With)
                 for item in node.items if ast.unparse(item.context_expr).startswith("torch.")]
        returns = [ast.unparse(n) for n in ast.walk(function) if isinstance(n, ast.Return)]
        return withs, returns

    assert taught_lines(lesson) == taught_lines(helper), (
        "episode 5's count_parameters and llm.count_parameters no longer share their lines")


def test_later_cells_count_with_the_cell():
    calls = cells_calling(EPISODE, "count_parameters")
    assert len(calls) >= 3, "§1, §3 and §4 count with the cell's function"
    assert any("mlp_parameters(5000, 40) == count_parameters" in source for source in calls), (
        "§3 checks its closed form against the meta-device count at the question's size")


# --------------------------------------------------------------------------- sizes off the first screen

def test_the_sizes_come_from_the_episodes_file():
    table = json.loads((settings.SIZES_DIR / "ep05.json").read_text(encoding="utf-8"))
    assert set(table) == set(settings.MODES)
    assert all(set(row) == set(table["full"]) for row in table.values())
    for key in ("mlp_width", "cnn_width", "wide"):
        assert table["quick"][key] <= table["reduced"][key] <= table["full"][key], key
    source = "\n".join(code_cells(EPISODE))
    assert not re.search(r"\}\s*\[MODE\]", source), "a {...}[MODE] table is back in the notebook"
    assert feasibility.full_sizes(ROOT / EPISODE)["SIZES"] == table["full"]


# --------------------------------------------------------------------------- every device

@pytest.mark.parametrize("kind", ["mps", "xpu"])
def test_apple_and_intel_gpus_are_chosen_then_measured_on_the_cpu(kind):
    with fakecuda.fake_backend(kind):
        namespace, out = run([IMPORTS, DEVICE])
        chosen = namespace["device"]
        assert chosen.type == kind and not namespace["on_gpu"]
        assert namespace["course_device"].describe_choice(chosen) in out
        assert namespace["SIZES"].describe() in out
        namespace, out = run([SWITCH], namespace)
    assert out.startswith(f"{kind}: the memory measurements below run on the CPU")
    assert len(out.splitlines()) == 1
    assert namespace["device"] == torch.device("cpu") and namespace["gpu_name"] is None


def test_a_cuda_gpu_is_measured_where_it_is():
    with fakecuda.fake_gpu("T4", nvidia_smi=False, children=False):
        namespace, out = run([IMPORTS, DEVICE, SWITCH])
        assert namespace["device"] == torch.device("cuda:0") and namespace["on_gpu"]
        assert namespace["gpu_name"] == "Tesla T4" and "Tesla T4" in out
        namespace, out = run(["ram = psutil.virtual_memory()"], namespace)
        total = torch.cuda.get_device_properties(0).total_memory
    host, gpu = out.splitlines()
    assert host.startswith("host RAM: ") and gpu.startswith("GPU memory: ")
    assert namespace["format_bytes"](total) in gpu


def test_without_a_gpu_the_host_cell_says_so():
    namespace, out = run([IMPORTS, DEVICE, SWITCH, "ram = psutil.virtual_memory()"])
    lines = out.splitlines()
    assert lines[-1] == "No CUDA GPU: every tensor below lives in host RAM"
    assert lines[-2].startswith("host RAM: ")


# --------------------------------------------------------------------------- the allocator's steps

ALLOCATOR = ["def allocator_mib", "steps = {}", 'reference.key_figure("ep05.allocator_steps"']


def test_without_a_gpu_the_allocator_cell_shows_the_recorded_steps():
    recorded = reference.gpu_reference("ep05.allocator_steps")
    if recorded is None:
        pytest.skip("no GPU record of ep05.allocator_steps")
    record, table = recorded
    namespace, out = run([IMPORTS, DEVICE, SWITCH] + ALLOCATOR)
    lines = out.splitlines()
    assert f"What {record['hardware']['gpu_name']} showed" in out and record["date"] in out
    rows = lines[-len(table["steps"]):]
    for row, step, allocated, reserved in zip(rows, table["steps"], table["allocated_mib"],
                                              table["reserved_mib"]):
        assert row.startswith(step) and f"{allocated:8.1f} MiB" in row and f"{reserved:8.1f}" in row


def test_without_any_record_the_allocator_cell_says_so_once(monkeypatch):
    monkeypatch.setattr(reference, "records", lambda: [])
    monkeypatch.setattr(reference, "_episodes_told", set())
    namespace, out = run([IMPORTS, DEVICE, SWITCH] + ALLOCATOR)
    assert out.splitlines()[-1] == f"  No GPU has run this episode's figures yet; see {reference.STATUS_PAGE}."


# --------------------------------------------------------------------------- host RAM (§4)

_HOST_RAM_CHILD = """
import json, sys
import psutil, torch
from torch import nn
from gpucourse import estimate
process = psutil.Process()
exec(sys.argv[1])                      # the cells' count_parameters and host_ram_growth
make = lambda: estimate.make_mlp(15, 4096, depth=3)
n, counted = host_ram_growth(lambda: count_parameters(make))
model, built = host_ram_growth(make)
print(json.dumps([n, sum(p.numel() for p in model.parameters()), counted, built]))
"""


def test_a_model_built_on_the_cpu_takes_its_bytes_of_host_ram():
    """§4's claim, as the notebook measures it, in a fresh process: there nothing freed by
    earlier work is left for the allocator to reuse, so the growth is the model's own."""
    import subprocess
    import sys

    functions = "\n\n".join(ast.unparse(cell_function(EPISODE, name))
                             for name in ("count_parameters", "host_ram_growth"))
    done = subprocess.run([sys.executable, "-c", _HOST_RAM_CHILD, functions],
                          capture_output=True, text=True, timeout=300, check=True)
    n, params, counted, built = json.loads(done.stdout.strip().splitlines()[-1])
    assert n == params
    assert counted < 16 * MIB
    assert 0.9 * 4 * n <= built <= 4 * n + 32 * MIB


# --------------------------------------------------------------------------- predict, then reveal

def test_the_answer_quotes_the_recorded_adam_step():
    between, answer = prediction(EPISODE)
    assert any("ep05.adam_step_peak_bytes_per_param" in source for source in between)
    recorded = reference.gpu_reference("ep05.adam_step_peak_bytes_per_param")
    assert recorded, "the H100 record has the figure the answer quotes"
    record, value = recorded
    assert f"{value:.1f} bytes per parameter" in answer          # as the cell prints it (.1f)
    assert f"recorded on an {record['hardware']['gpu_name']} (course record, {record['date']})" \
        in " ".join(answer.split())
