"""`make gpu-check` on a GPU node with only Python and torch: the bundle, chunks, merging, records.

The end-to-end test builds a bare node here: a virtual environment with no packages, whose
PYTHONPATH holds only links to torch (with what pip installs beside it) and numpy, as on a
GPU image without Jupyter. The wheels come from `tools/gpu_bundle.py` (PyPI once, then the
copy under `_build/`).
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import signal
import subprocess
import sys
import time
import venv
import zipfile
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import gpu_bundle  # noqa: E402
import gpu_check  # noqa: E402
import gpu_plan  # noqa: E402
from gpucourse import reference  # noqa: E402

HERE = "%d.%d" % sys.version_info[:2]


def notebook(path: Path, *sources: str) -> Path:
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources]), path)
    return path


def figure_cell(name: str, expression: str) -> str:
    """A cell that reports key figure ``name`` with the value of code ``expression``."""
    return f"from gpucourse import reference\nreference.key_figure({name!r}, {expression}, unit='units')"


# --------------------------------------------------------------------------- the wheel list

def test_the_wheel_list_is_pinned_and_agrees_with_requirements():
    pins = {p["name"]: p for p in gpu_bundle.read_requirements()}
    assert {"nbclient", "nbformat", "ipykernel", "jupyter-client", "pyzmq", "uproot", "awkward"} <= set(pins)
    assert not {"torch", "tensorflow", "xgboost", "debugpy", "jedi", "scipy", "triton"} & set(pins)
    assert pins["nbclient"]["group"] == "runner" and pins["uproot"]["group"] == "course"
    # Keras 3 runs episode 4 on PyTorch where a GPU node has neither TensorFlow nor Keras
    assert pins["keras"]["group"] == "keras" and pins["matplotlib"]["group"] == "plots"
    required = dict(re.findall(r"^([A-Za-z0-9_.-]+)==([^\s;#]+)", (ROOT / "requirements.txt").read_text(), re.M))
    for name, version in required.items():
        name = gpu_bundle.normalize(name)
        if name in pins and name != "torchao":
            assert pins[name]["version"] == version, f"{name}: requirements.txt pins {version}"
    # torchao is Colab's, on purpose (the pairing learners get with torch 2.11)
    colab = (ROOT / "colab" / "current" / "constraints.txt").read_text()
    assert f"torchao=={pins['torchao']['version']}" in colab.split()


def test_a_pin_that_is_not_exact_is_refused(tmp_path):
    bad = tmp_path / "list.txt"
    bad.write_text("# [runner]\nnbclient>=0.10\n")
    with pytest.raises(ValueError, match="line 2.*name==version"):
        gpu_bundle.read_requirements(bad)
    bad.write_text("nbclient==0.11.0\n")
    with pytest.raises(ValueError, match="group"):
        gpu_bundle.read_requirements(bad)


def test_markers_are_read_for_the_node_python_not_this_one():
    marker = 'python_version < "3.12"'
    assert gpu_bundle._marker_holds(marker, "3.11", "x86_64")
    assert not gpu_bundle._marker_holds(marker, "3.12", "x86_64")
    assert gpu_bundle._marker_holds('platform_machine == "aarch64"', "3.12", "aarch64")


def test_an_unknown_python_version_is_refused(tmp_path):
    with pytest.raises(gpu_bundle.BundleError, match="3.x"):
        gpu_bundle.build(tmp_path, python="3.x")


# --------------------------------------------------------------------------- unpacking

def fake_wheel(folder: Path, name: str, version: str, files: dict) -> dict:
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as whl:
        for inner, text in files.items():
            whl.writestr(inner, text)
        whl.writestr(f"{name}-{version}.dist-info/METADATA", f"Name: {name}\nVersion: {version}\n")
    return {"file": path.name, "name": name, "version": version, "bytes": path.stat().st_size}


def test_unpack_once_with_data_folders(tmp_path):
    wheels = [fake_wheel(tmp_path, "alpha", "1.0", {"alpha/__init__.py": "X = 1\n"}),
              fake_wheel(tmp_path, "beta", "2.0", {"beta-2.0.data/purelib/beta.py": "Y = 2\n"})]
    cache = tmp_path / "cache"
    first = gpu_bundle.unpack(tmp_path, wheels, cache)
    assert (first / "alpha" / "__init__.py").read_text() == "X = 1\n"
    assert (first / "beta.py").read_text() == "Y = 2\n"   # moved out of .data/purelib
    assert (first / "alpha-1.0.dist-info" / "METADATA").is_file()
    (first / "alpha" / "__init__.py").write_text("X = 'kept'\n")
    assert gpu_bundle.unpack(tmp_path, wheels, cache) == first
    assert "kept" in (first / "alpha" / "__init__.py").read_text()   # not unpacked again
    assert [p.name for p in cache.iterdir()] == [first.name]          # no half-made folder left


def test_the_runner_comes_whole_and_the_rest_only_where_missing():
    manifest = {"wheels": [{"name": "nbclient", "group": "runner"}, {"name": "ipython", "group": "runner"},
                           {"name": "packaging", "group": "common"}, {"name": "torchao", "group": "course"}]}
    installed = {"ipython", "packaging"}.__contains__
    names = lambda chosen: [w["name"] for w in chosen]  # noqa: E731
    assert names(gpu_bundle.choose(manifest, True, installed)) == ["nbclient", "ipython", "torchao"]
    assert names(gpu_bundle.choose(manifest, False, installed)) == ["torchao"]
    assert names(gpu_bundle.choose(manifest, False, lambda name: True)) == []


def test_without_a_bundle_the_message_says_what_to_do(tmp_path, capsys):
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    with pytest.raises(gpu_bundle.BundleError) as caught:
        gpu_bundle.use(lambda name: name != "nbclient", root=checkout)
    text = str(caught.value)
    assert "make gpu-bundle BUNDLE_PYTHON=" + HERE in text and "nbclient" in text and "copy" in text
    assert text.count(". ") == 0 and text.endswith(".")   # one sentence
    # With the runner present and no bundle, nothing is needed and nothing is said.
    assert gpu_bundle.use(lambda name: True, root=checkout) == []


def test_a_bundle_for_another_python_is_named_as_such(tmp_path):
    (tmp_path / "gpu-bundle").mkdir()
    manifest = {"python": "3.9", "arch": "x86_64", "wheels": [{"file": "x.whl", "name": "nbclient",
                                                               "version": "0", "group": "runner"}]}
    (tmp_path / "gpu-bundle" / "bundle.json").write_text(json.dumps(manifest))
    with pytest.raises(gpu_bundle.BundleError, match=f"made for Python 3.9, and this is Python {HERE}"):
        gpu_bundle.use(lambda name: name != "nbclient", root=tmp_path / "checkout")


# --------------------------------------------------------------------------- chunks

def all_notebooks() -> list[str]:
    return [gpu_check.relative(p) for p in gpu_check.notebooks(None)]


def test_chunks_hold_every_notebook_once_and_fit_nine_minutes():
    rels = all_notebooks()
    est = gpu_plan.estimates(rels, "full", reference.REFERENCE_DIR, validate=reference.validate,
                             data_files=getattr(reference, "DATA_FILES", ("bands.json",)))
    assert "cpu-amd-epyc.json" in est.source and "x2 for full size" in est.source
    n = gpu_plan.fewest_chunks(rels, est.seconds)
    assert sum(est.seconds.values()) > gpu_plan.CHUNK_SECONDS and n >= 2   # one slot is too short
    for count in (1, 2, n, 5):
        chunks = gpu_plan.split(rels, est.seconds, count)
        flat = [nb for chunk in chunks for nb in chunk]
        assert sorted(flat) == sorted(rels) and len(flat) == len(set(flat))
        for chunk in chunks:   # course order inside a chunk
            assert chunk == [nb for nb in rels if nb in chunk]
    chunks = gpu_plan.split(rels, est.seconds, n)
    assert all(gpu_plan.chunk_seconds(c, est.seconds) <= gpu_plan.CHUNK_SECONDS for c in chunks)
    assert gpu_plan.split(rels, est.seconds, n) == chunks    # the same plan for every chunk's run


def test_a_notebook_longer_than_a_chunk_gets_its_own_and_is_flagged():
    seconds = {"a": 700.0, "b": 200.0, "c": 200.0, "d": 100.0}
    n = gpu_plan.fewest_chunks(list(seconds), seconds)
    chunks = gpu_plan.split(list(seconds), seconds, n)
    assert n == 2 and ["a"] in chunks
    text = gpu_plan.describe(chunks, gpu_plan.Estimates(seconds, "test"))
    assert text.count("over 9 min") == 1


def test_estimates_skip_the_record_being_written_and_quick_records(tmp_path):
    def record(name, mode, date, seconds):
        body = {"schema": 1, "date": date, "device": name, "mode": mode, "hardware": {}, "software": {},
                "figures": {}, "notebooks": [{"notebook": "x.ipynb", "outcome": "ok", "seconds": seconds}]}
        (tmp_path / f"{name}.json").write_text(json.dumps(body))
        return tmp_path / f"{name}.json"

    record("old-gpu", "full", "2026-01-01", 30.0)
    target = record("this-gpu", "full", "2026-12-01", 999.0)
    record("smoke", "quick", "2026-12-02", 1.0)
    est = gpu_plan.estimates(["x.ipynb", "new.ipynb"], "full", tmp_path, exclude=target,
                             validate=reference.validate)
    assert est.seconds == {"x.ipynb": 30.0, "new.ipynb": gpu_plan.DEFAULT_SECONDS}
    assert "old-gpu.json" in est.source and "1 notebooks no record has" in est.source


@pytest.mark.parametrize("text", ["3", "0/2", "3/2", "a/b", "1/0"])
def test_a_wrong_chunk_is_named(text):
    with pytest.raises(ValueError, match=re.escape(text)):
        gpu_plan.parse_chunk(text)


def test_plan_prints_the_chunks_and_their_commands(capsys):
    assert gpu_check.main(["--plan", "--chunk", "1/3"]) == 0
    out = capsys.readouterr().out
    assert out.count("chunk ") >= 3 and "min" in out and "python3 tools/gpu_check.py --chunk 3/3" in out
    for nb in all_notebooks():
        assert out.count(nb) == 1


# --------------------------------------------------------------------------- outcomes and records

def test_a_missing_module_is_incomplete_only_when_it_is_not_installed(monkeypatch):
    monkeypatch.setattr(gpu_check, "has_module", lambda name: name not in {"torchao", "tensorflow"})
    outcome, reason, needs = gpu_check.classify("Traceback ...\nModuleNotFoundError: No module named 'torchao'")
    assert (outcome, needs) == ("incomplete", "torchao") and reason.startswith("needs torchao")
    assert gpu_check.classify("No module named 'tensorflow.python.eager'")[2] == "tensorflow"
    # installed, yet not importable: a real failure
    assert gpu_check.classify("ModuleNotFoundError: No module named 'uproot'")[0] == "failed"
    outcome, reason, _ = gpu_check.classify("\x1b[31mValueError\x1b[0m: width 0 is too small")
    assert outcome == "failed" and reason == "ValueError: width 0 is too small"


def test_a_helper_saying_triton_is_not_installed_is_incomplete(monkeypatch):
    """Episode 12's kernels.setup raises KernelSetupError("triton is not installed: ...") rather
    than an ImportError: on a node without triton that is a missing package, not a failure."""
    monkeypatch.setattr(gpu_check, "has_module", lambda name: name != "triton")
    text = ("KernelSetupError: triton is not installed: torch's CPU wheels do not bring it. "
            "Install the version torch's CUDA wheel pins")
    outcome, reason, needs = gpu_check.classify(text)
    assert (outcome, needs) == ("incomplete", "triton"), reason
    monkeypatch.setattr(gpu_check, "has_module", lambda name: True)
    assert gpu_check.classify(text)[0] == "failed"       # installed after all: something else


def entry(notebook, seconds=1.0):
    return {"notebook": notebook, "outcome": "ok", "seconds": seconds}


def figure(name, value, notebook):
    return {"name": name, "value": value, "unit": "u", "device": "GPU", "notebook": notebook}


def test_a_rerun_replaces_its_own_figures_and_the_episode_wins_over_its_solution(tmp_path):
    base = gpu_check.fresh_record({"gpu_name": "GPU", "cpu_model": "c", "cpu_cores": 1}, {}, "full")
    book = gpu_check.Record(base, ["episodes/01-a.ipynb", "solutions/01-a.ipynb"])
    book.add(entry("solutions/01-a.ipynb"), [figure("ep01.x", 2, "solutions/01-a.ipynb")])
    book.add(entry("episodes/01-a.ipynb"), [figure("ep01.x", 1, "episodes/01-a.ipynb"),
                                            figure("ep01.gone", 5, "episodes/01-a.ipynb")])
    book.add(entry("solutions/01-a.ipynb", 3.0), [figure("ep01.x", 9, "solutions/01-a.ipynb")])
    assert book.data["figures"]["ep01.x"]["value"] == 1
    book.add(entry("episodes/01-a.ipynb"), [figure("ep01.x", 4, "episodes/01-a.ipynb")])
    assert set(book.data["figures"]) == {"ep01.x"} and book.data["figures"]["ep01.x"]["value"] == 4
    assert [n["notebook"] for n in book.data["notebooks"]] == ["episodes/01-a.ipynb", "solutions/01-a.ipynb"]
    assert book.data["total_seconds"] == 4.0
    book.write(tmp_path / "r.json")
    reference.validate(json.loads((tmp_path / "r.json").read_text()))


def test_merge_refuses_a_record_of_another_configuration(tmp_path):
    hw = {"gpu_name": "NVIDIA H100 80GB HBM3", "cpu_model": "c", "cpu_cores": 1}
    old = gpu_check.fresh_record(hw, {"torch": "2.11.0", "python": "3.12.3"}, "full")
    target = tmp_path / "h100.json"
    target.write_text(json.dumps(old))
    same = gpu_check.merge_base(target, gpu_check.fresh_record(hw, dict(old["software"]), "full"))
    assert same["software"] == old["software"]
    with pytest.raises(ValueError, match="torch 2.11.0, this run has 2.12.0"):
        gpu_check.merge_base(target, gpu_check.fresh_record(hw, {"torch": "2.12.0", "python": "3.12.3"}, "full"))
    with pytest.raises(ValueError, match="mode full, this run has quick"):
        gpu_check.merge_base(target, gpu_check.fresh_record(hw, dict(old["software"]), "quick"))


def test_chunks_merge_into_one_record(tmp_path, monkeypatch):
    """Three chunk runs of one notebook each: each keeps the figures of the chunks before it."""
    monkeypatch.setattr(gpu_check, "OUT", tmp_path / "executed")
    paths = [notebook(tmp_path / f"nb{i}.ipynb", figure_cell(f"ep99.chunk{i}", str(i))) for i in range(3)]
    out = tmp_path / "refs"
    args = ["--only", *map(str, paths), "--out", str(out), "--timeout", "120"]
    assert gpu_check.main([*args, "--chunk", "2/3"]) == 0
    (path,) = out.glob("*.json")
    assert [n["notebook"] for n in json.loads(path.read_text())["notebooks"]] == ["nb1.ipynb"]
    assert gpu_check.main([*args, "--chunk", "1/3"]) == 0
    assert gpu_check.main([*args, "--chunk", "3/3"]) == 0
    record = reference.validate(json.loads(path.read_text()))
    assert {n: f["value"] for n, f in record["figures"].items()} == {"ep99.chunk0": 0, "ep99.chunk1": 1,
                                                                     "ep99.chunk2": 2}
    assert sorted(n["notebook"] for n in record["notebooks"]) == ["nb0.ipynb", "nb1.ipynb", "nb2.ipynb"]


def test_a_quick_record_is_never_written_among_the_references():
    with pytest.raises(SystemExit) as stopped:
        gpu_check.main(["--quick", "--out", str(reference.REFERENCE_DIR), "--only", "x.ipynb"])
    assert stopped.value.code == 2


def test_the_record_holds_each_finished_notebook_when_the_run_is_stopped(tmp_path):
    """SIGTERM (what `timeout` sends) in the third notebook: the first two are in the record."""
    import psutil

    paths = [notebook(tmp_path / "a.ipynb", figure_cell("ep99.a", "1")),
             notebook(tmp_path / "b.ipynb", figure_cell("ep99.b", "2")),
             notebook(tmp_path / "slow.ipynb", "import time\ntime.sleep(600)")]
    out = tmp_path / "refs"
    run = subprocess.Popen([sys.executable, str(ROOT / "tools" / "gpu_check.py"), "--only", *map(str, paths),
                            "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        record = {}
        while time.monotonic() < deadline and len(record.get("notebooks", [])) < 2:
            time.sleep(0.5)
            found = list(out.glob("*.json"))
            record = json.loads(found[0].read_text()) if found else {}
        assert len(record.get("notebooks", [])) == 2, run.stdout.read() if run.poll() is not None else ""
        time.sleep(2)   # into the slow notebook's kernel
        kernels = psutil.Process(run.pid).children(recursive=True)
        os.killpg(run.pid, signal.SIGTERM)
        output, _ = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
    assert run.returncode != 0 and "holds the 2 notebooks that finished" in output
    record = reference.validate(json.loads(next(out.glob("*.json")).read_text()))
    assert [n["notebook"] for n in record["notebooks"]] == ["a.ipynb", "b.ipynb"]
    assert {n: f["value"] for n, f in record["figures"].items()} == {"ep99.a": 1, "ep99.b": 2}
    assert not list(out.glob("*.part"))
    gone, alive = psutil.wait_procs(kernels, timeout=30)   # the kernel ends with its parent
    assert not alive, f"left running: {[p.cmdline() for p in alive]}"


def test_versions_and_the_driver_cuda_version_are_recorded():
    from gpucourse.fakes.fakecuda import fake_gpu

    header = "| NVIDIA-SMI 580.95.05   Driver Version: 580.95.05   CUDA Version: 13.0     |"
    assert gpu_check.driver_cuda_version(header) == "13.0" and gpu_check.driver_cuda_version("") is None
    with fake_gpu("H100", cuda_version="12.9"):
        hw = gpu_check.hardware()
    assert hw["gpu_name"].startswith("NVIDIA H100") and hw["driver_cuda"] == "12.9" and hw["driver"]
    sw = gpu_check.software([{"name": "torchao", "version": "0.10.0"}])
    assert {"transformers", "peft", "torchao", "triton", "accelerate", "cuda"} <= set(sw)
    assert sw["transformers"] == importlib.metadata.version("transformers")
    assert sw["from_bundle"] == ["torchao 0.10.0"]


# --------------------------------------------------------------------------- a bare GPU node, end to end

def _requirements(dist) -> list[str]:
    from packaging.requirements import Requirement

    names = []
    for text in dist.requires or []:
        req = Requirement(text)
        if req.marker is None or req.marker.evaluate({"extra": ""}):
            names.append(req.name)
    return names


def bare_site(folder: Path, roots=("torch", "numpy")) -> Path:
    """Links to ``roots`` and everything pip installs with them, and nothing else."""
    folder.mkdir()
    todo, seen = list(roots), set()
    while todo:
        name = gpu_bundle.normalize(todo.pop())
        if name in seen:
            continue
        seen.add(name)
        dist = importlib.metadata.distribution(name)
        todo += _requirements(dist)
        base = Path(dist.locate_file(""))
        tops = {f.parts[0] for f in dist.files or () if f.parts[0] not in ("..", "__pycache__")}
        for top in tops:
            if not (folder / top).exists() and (base / top).exists():
                (folder / top).symlink_to(base / top)
    return folder


@pytest.fixture(scope="module")
def bare_python():
    """A Python with no packages at all (a venv made without pip), built once."""
    home = ROOT / "_build" / "test-bare-node" / f"py{HERE}"
    python = home / "bin" / "python"
    if not python.exists():
        venv.EnvBuilder(with_pip=False, clear=True, symlinks=True).create(home)
    return python


@pytest.fixture(scope="module")
def bundle_here():
    """gpu-bundle for this Python, built by the tool (PyPI the first time, then reused)."""
    folder = ROOT / "_build" / "test-gpu-bundle" / f"py{HERE}"
    try:
        gpu_bundle.build(folder, python=HERE)
    except gpu_bundle.BundleError as exc:
        pytest.skip(f"PyPI is needed once to build the test bundle: {exc}")
    return folder


def test_a_bare_node_runs_the_check_with_the_bundle(tmp_path, bare_python, bundle_here):
    site = bare_site(tmp_path / "site")
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "LANG": "C.UTF-8", "PYTHONPATH": str(site),
           "PYTHONNOUSERSITE": "1", "GPUCOURSE_OFFLINE": "1"}
    probe = "import importlib.util as u; print([m for m in ('torch','numpy','nbformat','nbclient','ipykernel','zmq','torchao','uproot') if u.find_spec(m)])"
    seen = subprocess.run([str(bare_python), "-c", probe], env=env, capture_output=True, text=True, cwd=tmp_path)
    assert seen.stdout.strip() == "['torch', 'numpy']", seen.stderr   # the node is bare

    check = [str(bare_python), str(ROOT / "tools" / "gpu_check.py"), "--quick", "--workers", "2"]
    no_bundle = subprocess.run([*check, "--bundle", str(tmp_path / "none"), "--only", "x.ipynb"], env=env,
                               capture_output=True, text=True, timeout=120)
    assert no_bundle.returncode == 2 and "Traceback" not in no_bundle.stderr + no_bundle.stdout
    assert "make gpu-bundle" in no_bundle.stderr and len(no_bundle.stderr.strip().splitlines()) == 1

    nbs = [notebook(tmp_path / "figures.ipynb", "import os, torch, numpy",
                    figure_cell("ep99.quick_sum", "float(torch.ones(3).sum())"),
                    "assert os.environ['GPUCOURSE_QUICK'] == '1'"),
           notebook(tmp_path / "course.ipynb", "import uproot, awkward, requests, torchao",
                    figure_cell("ep99.torchao_minor", "int(torchao.__version__.split('.')[1])")),
           # what a GPU image lacks first: plots, tables, progress bars, and Keras on torch
           notebook(tmp_path / "plots.ipynb", "import matplotlib.pyplot as plt, pandas, tqdm, keras",
                    "from gpucourse import reference\n"
                    "reference.path_taken('ep99.keras_backend', keras.backend.backend())",
                    "plt.plot([1, 2]); pandas.DataFrame({'a': [1]})"),
           notebook(tmp_path / "needs_tf.ipynb", figure_cell("ep99.before_tf", "1"), "import tensorflow")]
    done = subprocess.run([*check, "--bundle", str(bundle_here), "--out", str(tmp_path / "out"),
                           "--only", *map(str, nbs)], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    (path,) = (tmp_path / "out").glob("*.json")
    record = reference.validate(json.loads(path.read_text()))
    assert path.name.endswith("-quick.json") and record["mode"] == "quick"
    outcomes = {n["notebook"]: (n["outcome"], n.get("needs")) for n in record["notebooks"]}
    assert outcomes == {"figures.ipynb": ("ok", None), "course.ipynb": ("ok", None),
                        "plots.ipynb": ("ok", None), "needs_tf.ipynb": ("incomplete", "tensorflow")}
    plots = next(n for r in record["runs"] for n in r["notebooks"] if n["notebook"] == "plots.ipynb")
    assert plots["path"]["ep99.keras_backend"] == {"value": "torch"}   # the check's default
    assert {n: f["value"] for n, f in record["figures"].items()} == {
        "ep99.quick_sum": 3.0, "ep99.torchao_minor": 10, "ep99.before_tf": 1}
    software = record["software"]
    assert {"nbclient 0.11.0", "ipykernel 7.4.0", "torchao 0.10.0"} <= set(software["from_bundle"])
    assert software["torch"] == importlib.metadata.version("torch") and software["torchao"] == "0.10.0"
