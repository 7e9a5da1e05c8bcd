"""Kernels start without racing other processes for TCP ports (gpucourse/_kernelstart.py).

The failure this prevents: "Kernel died before replying to kernel_info" for every cell
of one notebook when two test workers start kernels at the same moment. jupyter_client
chooses a kernel's ports by binding port 0 and closing the socket; another process can
take one before the kernel binds it, and the kernel exits (jupyter/jupyter_client#487).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import nbformat
import pytest

pytest.importorskip("nbval")
from jupyter_client.provisioning.factory import KernelProvisionerFactory  # noqa: E402
from nbval.kernel import RunningKernel  # noqa: E402 - the path nbval starts kernels by

from gpucourse import _kernelstart  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
KERNELS_AT_ONCE = 8


def _start(cwd) -> RunningKernel:
    return RunningKernel("python3", cwd=str(cwd), startup_timeout=120)


@pytest.fixture
def stock_provisioner():
    """jupyter_client's own LocalProvisioner for one test, then the course's again."""
    factory = KernelProvisionerFactory.instance()
    factory.default_provisioner_name = "local-provisioner"
    yield
    _kernelstart.install()


def test_conftest_makes_every_kernel_of_the_suite_race_free():
    assert KernelProvisionerFactory.instance().default_provisioner_name == _kernelstart.NAME


def test_nbvals_kernel_talks_over_ipc_in_a_folder_removed_at_shutdown(tmp_path):
    kernel = _start(tmp_path)
    try:
        folder = kernel.km.provisioner.ipc_folder
        assert kernel.km.transport == "ipc" and Path(kernel.km.ip).parent == folder
        assert sorted(p.name for p in folder.iterdir()) == [f"kernel-{n}" for n in range(1, 6)]
        kernel.restart()                               # nbval restarts a kernel that hung
        kernel.kc.wait_for_ready(timeout=120)
        assert kernel.km.provisioner.ipc_folder == folder and folder.is_dir()
    finally:
        kernel.stop()
    assert not folder.exists()


def _steal_each_chosen_port(monkeypatch):
    """Another process binds every port jupyter_client chooses, before the kernel can."""
    from jupyter_client.connect import LocalPortCache

    choose, thieves = LocalPortCache.find_available_port, []

    def chosen_then_taken(self, ip):
        port = choose(self, ip)
        thief = socket.socket()
        thief.bind((ip, port))
        thief.listen()
        thieves.append(thief)
        return port

    monkeypatch.setattr(LocalPortCache, "find_available_port", chosen_then_taken)
    return thieves


def test_the_race_a_port_taken_between_choice_and_bind_kills_a_stock_kernel(
        tmp_path, monkeypatch, stock_provisioner):
    """The cause, shown: jupyter_client's own start loses the kernel to a taken port."""
    thieves = _steal_each_chosen_port(monkeypatch)
    try:
        with pytest.raises(RuntimeError, match="Kernel died before replying to kernel_info"):
            _start(tmp_path)
        assert thieves, "the stock start chose no TCP port: is the race gone upstream?"
    finally:
        for thief in thieves:
            thief.close()


def test_a_race_free_kernel_chooses_no_port_so_none_can_be_taken(tmp_path, monkeypatch):
    thieves = _steal_each_chosen_port(monkeypatch)
    kernel = _start(tmp_path)
    try:
        assert kernel.kc.execute_interactive("x = 6 * 7", timeout=60)["content"]["status"] == "ok"
        assert thieves == []
    finally:
        kernel.stop()


def _start_at_once(barrier, tcp_only: bool, results) -> None:
    """In a fresh process: start a kernel the way nbval does, all at the same moment."""
    from gpucourse import _kernelstart

    _kernelstart.install()
    if tcp_only:
        _kernelstart.ipc_possible = lambda folder: False
    barrier.wait()
    try:
        kernel = RunningKernel("python3", cwd=".", startup_timeout=240)
        results.put(kernel.km.transport)
        kernel.stop()
    except Exception as exc:  # noqa: BLE001 - reported to the test, which names it
        results.put(f"{type(exc).__name__}: {exc}")


@pytest.mark.parametrize("tcp_only, count", [(False, KERNELS_AT_ONCE), (True, 4)],
                         ids=["ipc", "tcp-under-lock"])
def test_many_kernels_started_at_once_all_answer_kernel_info(tcp_only, count):
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(count), ctx.Queue()
    workers = [ctx.Process(target=_start_at_once, args=(barrier, tcp_only, results))
               for _ in range(count)]
    for worker in workers:
        worker.start()
    answers = [results.get(timeout=600) for _ in workers]
    for worker in workers:
        worker.join(timeout=60)
    assert answers == [("tcp" if tcp_only else "ipc")] * count, answers


def test_without_ipc_the_ports_are_chosen_under_the_machine_wide_lock(tmp_path, monkeypatch):
    """While another process holds the lock, a kernel start waits; then it goes on."""
    from filelock import FileLock

    monkeypatch.setattr(_kernelstart, "ipc_possible", lambda folder: False)
    monkeypatch.setattr(_kernelstart, "LOCK_PATH", tmp_path / "start.lock")
    started = []
    with FileLock(str(tmp_path / "start.lock")):
        thread = threading.Thread(target=lambda: started.append(_start(tmp_path)))
        thread.start()
        time.sleep(3)
        assert not started and thread.is_alive(), "the kernel started without the lock"
    thread.join(timeout=240)
    kernel = started[0]
    try:
        assert kernel.km.transport == "tcp"
        ports = [getattr(kernel.km, name) for name in ("shell_port", "iopub_port", "stdin_port",
                                                       "hb_port", "control_port")]
        low = _kernelstart.ephemeral_range()[0]
        assert len(set(ports)) == 5 and all(20000 <= port < low for port in ports), (
            f"ports {ports}: an outgoing connection elsewhere may be given one from {low} up")
        FileLock(str(tmp_path / "start.lock")).acquire(timeout=0)   # released once it listens
    finally:
        kernel.stop()


def test_nbclient_kernels_are_race_free_too(tmp_path):
    """nbclient is how tools/gpu_check.py, myst-nb and jupyter-cache (the book) run notebooks."""
    from nbclient import NotebookClient

    code = ("import json, ipykernel.connect\n"
            "print(json.loads(ipykernel.connect.get_connection_info())['transport'])")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)])
    NotebookClient(nb, timeout=120, kernel_name="python3").execute()
    assert nb.cells[0].outputs[0]["text"].strip() == "ipc"


def test_the_module_is_a_sphinx_extension_that_installs_the_provisioner(stock_provisioner):
    assert _kernelstart.setup(app=None)["parallel_read_safe"] is True
    assert KernelProvisionerFactory.instance().default_provisioner_name == _kernelstart.NAME


def test_a_socket_path_too_long_for_ipc_falls_back_to_tcp(tmp_path):
    assert _kernelstart.ipc_possible(Path("/tmp/jk-abc")) is (sys.platform != "win32")
    assert not _kernelstart.ipc_possible(tmp_path / ("x" * 120))


def test_as_a_sphinx_extension_it_makes_myst_nbs_kernels_race_free(tmp_path):
    """The book's path: Sphinx -> myst-nb -> jupyter-cache -> nbclient, in the build's process."""
    pytest.importorskip("myst_nb")
    source = tmp_path / "src"
    source.mkdir()
    (source / "conf.py").write_text(
        'extensions = ["myst_nb", "gpucourse._kernelstart"]\nnb_execution_mode = "cache"\n'
        f'nb_execution_cache_path = {str(tmp_path / "cache")!r}\n'
        "nb_execution_raise_on_error = True\n")
    code = ("import json, ipykernel.connect\n"
            "print('transport:', json.loads(ipykernel.connect.get_connection_info())['transport'])")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# Page"),
                                         nbformat.v4.new_code_cell(code)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nbformat.write(nb, source / "index.ipynb")
    env = {**os.environ,
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "sphinx", "-q", "-b", "html", str(source),
                           str(tmp_path / "out")], capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "transport: ipc" in (tmp_path / "out" / "index.html").read_text()
