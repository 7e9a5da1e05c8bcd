"""tools/gpu_coverage.py finds GPU-only code by reading it: each rule on a small source."""
import json
import sys
import textwrap
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import gpu_coverage  # noqa: E402


def _found(source: str) -> list[tuple[int, str, bool]]:
    return [(b.line, b.what, b.one_line) for b in gpu_coverage.gpu_branches_in_source(textwrap.dedent(source))]


def test_an_if_that_asks_about_cuda_and_the_else_of_one_that_asks_the_opposite():
    assert _found('''
        if device.type == "cuda":
            a = 1
        if not torch.cuda.is_available():
            b = 2
        else:
            c = 3
        if str(device).startswith("cuda"):
            d = 4
    ''') == [(3, 'if device.type == "cuda"', False), (7, "else of if not torch.cuda.is_available()", False),
             (9, 'if str(device).startswith("cuda")', False)]


def test_the_code_after_an_early_return_without_a_gpu():
    assert _found('''
        def f(device):
            if device.type != "cuda":
                return None
            return torch.cuda.mem_get_info(device)
    ''') == [(5, 'after if device.type != "cuda": return', False)]


def test_a_flag_set_from_a_cuda_test_guards_blocks_and_methods():
    """monitor.py's shape: self.gpu is set once in __init__, then tested in other methods."""
    assert _found('''
        class Monitor:
            def __init__(self, device):
                kind = getattr(device, "type", str(device))
                self.gpu = kind == "cuda" and shutil.which("nvidia-smi") is not None

            def start(self):
                if self.gpu:
                    self.proc = start_smi()

            def stop(self):
                if not self.gpu:
                    return
                self.proc.terminate()
    ''') == [(9, "if self.gpu", False), (14, "after if not self.gpu: return", False)]


def test_a_flag_that_means_no_gpu_makes_its_else_the_gpu_branch():
    assert _found('''
        cpu_only = not torch.cuda.is_available()
        if cpu_only:
            a = 1
        else:
            b = 2
    ''') == [(6, "else of if cpu_only", False)]


def test_a_flag_of_a_flag_and_a_name_only_when_on_a_gpu():
    assert _found('''
        gpu_name = torch.cuda.get_device_name(0) if on_gpu else None
        if gpu_name:
            show(gpu_name)
        later = gpu_name
        if later:
            again()
    ''') == [(2, "… if on_gpu", True), (4, "if gpu_name", False), (7, "if later", False)]


def test_a_call_that_passes_a_cuda_test_on_is_not_one_itself():
    """``missing = status(on_gpu)`` is truthy without a GPU: it must not become a GPU flag."""
    assert _found('''
        missing = llm.bitsandbytes_status(on_gpu)
        if missing:
            print(missing)
    ''') == []


@pytest.mark.parametrize("test, found", [
    ("on_gpu and big", True),               # and: one GPU-only part is enough
    ("on_gpu or is_linux", None),           # or: the body also runs on a Linux CPU
    ("not on_gpu or small", False),         # its else needs on_gpu
    ("not on_gpu and not tf_gpus", None),   # its else runs with TensorFlow's GPU too
])
def test_and_or_decide_which_side_is_gpu_only(test, found):
    import ast

    tests = gpu_coverage._Tests(test)
    assert tests.polarity(ast.parse(test, mode="eval").body) is found


def test_conditional_expressions_and_keyword_arguments_are_one_line_choices():
    assert _found('''
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        label = ("on the CPU" if device.type != "cuda"
                 else "on the GPU")
        scaler = torch.amp.GradScaler(device.type, enabled=device.type == "cuda")
        loader = DataLoader(data, pin_memory=on_gpu, batch_size=64)
    ''') == [(2, '… if torch.cuda.is_available()', True), (4, 'else of … if device.type != "cuda"', False),
             (5, 'enabled=device.type == "cuda"', True), (6, "pin_memory=on_gpu", True)]


def test_every_method_of_a_cuda_class_is_gpu_only():
    assert _found('''
        class CudaMeter:
            def total(self):
                """The device's memory."""
                return torch.cuda.get_device_properties(self.device).total_memory
    ''') == [(5, "CudaMeter.total", False)]


def _notebook(tmp_path, *cells) -> Path:
    path = tmp_path / "episodes" / "99-test.ipynb"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps({"cells": [
        {"cell_type": "code", "source": textwrap.dedent(c).lstrip("\n").splitlines(True), "metadata": {}}
        if not c.startswith("#") else {"cell_type": "markdown", "source": [c], "metadata": {}}
        for c in cells], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    return path


def test_notebook_cells_under_a_gpu_test_are_found_across_cells(tmp_path):
    path = _notebook(tmp_path, '''
        %matplotlib inline
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        on_device = device.type == "cuda"
    ''', "# A heading", '''
        if on_device:
            # the GPU's own view
            print(torch.cuda.memory_summary())
            torch.cuda.empty_cache()
    ''', '''
        x = 1
        if not on_device:
            print("CPU")
        else:
            print("GPU")
    ''', "print('everywhere')")
    assert gpu_coverage.notebook_gpu_cells(path) == [(2, 2, 3, ["if on_device"]),
                                                    (3, 1, 5, ["else of if not on_device"])]
    report = gpu_coverage.notebook_report(tmp_path)
    assert "episodes/99-test.ipynb cell 2: 2 of 3 lines GPU-only (the whole cell)" in report[0]
    assert "cell 3: 1 of 5 lines GPU-only  [" in report[1]
    assert report[-1].startswith("\n2 GPU-only blocks in 2 notebook cells (1 of them GPU-only as a whole)")


def test_guards_computed_by_course_helpers_are_found(tmp_path):
    """Episode 14's int4 and QLoRA cells and episode 12's Numba cells are guarded by what a
    helper answered (None where the GPU path runs; Numba "compiled"), not by a CUDA test: the
    scan once listed no GPU-only cell in episode 14 and missed episode 12's else."""
    path = _notebook(tmp_path, '''
        why_not = llm.why_no_int4(device)
        if why_not is None:
            model = quantize(model)
            why_not = check(model)
        if why_not:
            print(why_not)
    ''', '''
        missing = llm.bitsandbytes_status(device.type == "cuda")
        if missing is None:
            load_4bit()
    ''', '''
        if MODE_KERNELS.numba == "simulated":
            print("simulated")
        else:
            print("on the GPU")
    ''')
    assert gpu_coverage.notebook_gpu_cells(path) == [
        (0, 2, 6, ["if why_not is None"]),
        (1, 1, 3, ["if missing is None"]),
        (2, 1, 4, ['else of if MODE_KERNELS.numba == "simulated"'])]


def test_the_package_has_gpu_branches_of_every_kind():
    """The real source: monitor.py's flag, survive_train's keyword, memory.py's Cuda class."""
    found = {path.name: gpu_coverage.gpu_branches_in_source(path.read_text())
             for path in gpu_coverage.PACKAGE.rglob("*.py")}
    assert any(b.what == "if self.gpu" for b in found["monitor.py"])
    assert any(b.what == 'enabled=device.type == "cuda"' and b.one_line for b in found["survive_train.py"])
    assert any(b.what.startswith("CudaMeter.") for b in found["memory.py"])
