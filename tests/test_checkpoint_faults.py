"""Episode 11's checkpoints under faults: a full disk, and files that are not whole checkpoints.

Each ends in a message that names the file, its size and the likely cause, keeps the
previous checkpoint, leaves no half-written file, and never advises
``weights_only=False`` (PyTorch's own message does: loading that way runs the file's code).
"""

from __future__ import annotations

import errno
import pickle
import shutil
import subprocess
import traceback
import zipfile
from pathlib import Path

import pytest
import torch

from gpucourse import checkpoint, checkpoint_faults
from gpucourse.checkpoint_faults import CheckpointDiskFull, UnreadableCheckpoint, size_text

SMALL = {"model": {"w": torch.arange(1000.0)}, "step": 1}
BIG = {"model": {"w": torch.arange(400_000.0)}, "step": 2}     # 1.6 MB: more than the disk


def _rendered(excinfo) -> str:
    """The error as a learner sees it: the whole traceback, chained errors included."""
    return "".join(traceback.format_exception(excinfo.value))


def _no_unsafe_advice(text: str) -> None:
    flat = text.lower().replace("`", "").replace(" ", "")
    assert "weights_only=false" not in flat and "weights_onlysettofalse" not in flat, text


def _assert_previous_intact(folder: Path, path: Path, step: int) -> None:
    assert sorted(p.name for p in folder.iterdir() if p.name != "lost+found") == [path.name]
    assert checkpoint.load(path)["step"] == step


# --------------------------------------------------------------------------- a full disk

@pytest.fixture
def one_megabyte_disk(tmp_path):
    """A real 1 MiB file system (tmpfs); mounting one needs root."""
    target = tmp_path / "small-disk"
    target.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(target)],
                             capture_output=True).returncode == 0
    if not mounted:
        pytest.skip("this machine does not allow mounting a small tmpfs (needs root); "
                    "the simulated full disk below covers the same messages")
    yield target
    if subprocess.run(["umount", str(target)], capture_output=True).returncode != 0:
        subprocess.run(["umount", "-l", str(target)], capture_output=True)   # never leave it


def test_a_save_on_a_real_full_disk_names_the_sizes_and_keeps_the_previous_checkpoint(
        one_megabyte_disk):
    path = one_megabyte_disk / "checkpoint.pt"
    checkpoint.save(SMALL, path)
    with pytest.raises(CheckpointDiskFull) as excinfo:
        checkpoint.save(BIG, path)
    message = str(excinfo.value)
    need = checkpoint_faults.serialized_size(BIG)
    assert "the disk is full" in message and size_text(need) in message
    # all the space but the previous file's blocks: the removed temporary's space is free again
    usage, blocks = shutil.disk_usage(one_megabyte_disk), -(-path.stat().st_size // 4096)
    assert f"{one_megabyte_disk} has {size_text(usage.total - 4096 * blocks)} left" in message
    assert f"{path} ({size_text(path.stat().st_size)}" in message and "is intact" in message
    assert "unexpected pos" not in _rendered(excinfo)       # PyTorch's words, not shown
    assert excinfo.value.errno == errno.ENOSPC and isinstance(excinfo.value, OSError)
    _assert_previous_intact(one_megabyte_disk, path, step=1)


def test_a_first_save_on_a_real_full_disk_leaves_nothing(one_megabyte_disk):
    path = one_megabyte_disk / "checkpoint.pt"
    with pytest.raises(CheckpointDiskFull, match="There was no earlier checkpoint"):
        checkpoint.save(BIG, path)
    assert [p for p in one_megabyte_disk.iterdir() if p.name != "lost+found"] == []


def _writes_half_then(error: BaseException):
    """torch.save that writes half of the file, then fails as a full disk makes it fail."""
    real_save = torch.save

    def save(obj, f):
        if not isinstance(f, (str, Path)):        # counting the bytes a save would need
            return real_save(obj, f)
        real_save(obj, f)
        data = Path(f).read_bytes()
        Path(f).write_bytes(data[: len(data) // 2])
        raise error

    return save


@pytest.mark.parametrize("error", [
    OSError(errno.ENOSPC, "No space left on device"),
    OSError(errno.EDQUOT, "Disk quota exceeded"),
    RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534"),
], ids=["ENOSPC", "EDQUOT", "pytorch-writer"])
def test_a_save_on_a_simulated_full_disk_says_so(tmp_path, monkeypatch, error):
    path = tmp_path / "checkpoint.pt"
    checkpoint.save(SMALL, path)
    monkeypatch.setattr(checkpoint.torch, "save", _writes_half_then(error))
    free = 12_345
    monkeypatch.setattr(checkpoint_faults.shutil, "disk_usage",
                        lambda folder: type("Usage", (), {"free": free})())
    with pytest.raises(CheckpointDiskFull) as excinfo:
        checkpoint.save(BIG, path)
    monkeypatch.undo()
    message = str(excinfo.value)
    assert "the disk is full" in message
    assert size_text(checkpoint_faults.serialized_size(BIG)) in message
    assert f"{tmp_path} has {size_text(free)} left" in message
    assert "is intact" in message and str(path) in message
    assert ("quota" in message) == (getattr(error, "errno", None) == errno.EDQUOT)
    _assert_previous_intact(tmp_path, path, step=1)


@pytest.mark.parametrize("error", [
    OSError(errno.EACCES, "Permission denied"),
    RuntimeError("PytorchStreamWriter failed writing file data/0: file write failed"),
], ids=["permission", "writer-error-with-room-left"])
def test_a_save_that_fails_for_another_reason_is_not_called_a_full_disk(tmp_path, monkeypatch,
                                                                        error):
    path = tmp_path / "checkpoint.pt"
    checkpoint.save(SMALL, path)
    monkeypatch.setattr(checkpoint.torch, "save", _writes_half_then(error))
    with pytest.raises(type(error)) as excinfo:
        checkpoint.save(BIG, path)
    monkeypatch.undo()
    assert excinfo.value is error
    _assert_previous_intact(tmp_path, path, step=1)


# --------------------------------------------------------------------------- files that are not whole checkpoints

class Foreign:
    """A class a checkpoint never holds."""


def _whole(folder: Path) -> bytes:
    checkpoint.save(checkpoint.capture(*_parts(), epoch=0, step=3), folder / "whole.pt")
    return (folder / "whole.pt").read_bytes()


def _parts():
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.Adam(model.parameters())
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1)
    return model, optimizer, scaler, scheduler


def _zip_of_text(path):
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("notes.txt", "not a model")


def _write_truncated(path, whole, fraction):
    path.write_bytes(whole[: int(len(whole) * fraction)])


MAKERS = {
    "empty": (lambda p, whole: p.write_bytes(b""), "is empty"),
    "header-only": (lambda p, whole: p.write_bytes(whole[:64]), "ends early"),
    "half": (lambda p, whole: _write_truncated(p, whole, 0.5), "ends early"),
    "all-but-the-last-byte": (lambda p, whole: p.write_bytes(whole[:-1]), "ends early"),
    "text": (lambda p, whole: p.write_text("<html>404 Not Found</html>"), "not a checkpoint"),
    "pickle": (lambda p, whole: p.write_bytes(pickle.dumps({"model": 1})), "Python pickle"),
    "empty-zip": (lambda p, whole: zipfile.ZipFile(p, "w").close(), "not a PyTorch file"),
    "foreign-zip": (lambda p, whole: _zip_of_text(p), "(it holds notes.txt;"),
    "foreign-object": (lambda p, whole: torch.save({"model": Foreign()}, p),
                       "holds Python objects (test_checkpoint_faults.Foreign)"),
    "state-dict": (lambda p, whole: torch.save(torch.nn.Linear(2, 2).state_dict(), p),
                   "none of the parts checkpoint.capture stores"),
    "tensor": (lambda p, whole: torch.save(torch.zeros(3), p), "holds a Tensor"),
}


@pytest.mark.parametrize("kind", MAKERS)
def test_loading_a_file_that_is_not_a_whole_checkpoint_names_it_its_size_and_why(tmp_path, kind):
    make, cause = MAKERS[kind]
    path = tmp_path / "checkpoint.pt"
    make(path, _whole(tmp_path))
    with pytest.raises(UnreadableCheckpoint) as excinfo:
        checkpoint.load(path)
    message = str(excinfo.value)
    assert str(path) in message and f"{path.stat().st_size:,} bytes" in message
    assert cause in message, message
    _no_unsafe_advice(_rendered(excinfo))


def test_the_truncated_file_is_blamed_on_a_writer_stopped_mid_save(tmp_path):
    path = tmp_path / "checkpoint.pt"
    _write_truncated(path, _whole(tmp_path), 0.5)
    with pytest.raises(UnreadableCheckpoint, match="cut short while it was being written"):
        checkpoint.load(path)


@pytest.mark.parametrize("where", ["missing", "folder"])
def test_loading_what_is_not_a_file_says_there_is_no_checkpoint_file(tmp_path, where):
    path = tmp_path / "checkpoint.pt"
    if where == "folder":
        path.mkdir()
    with pytest.raises(FileNotFoundError, match=f"no checkpoint file at {path}") as excinfo:
        checkpoint.load(path)
    _no_unsafe_advice(_rendered(excinfo))


def test_a_whole_checkpoint_and_a_part_saved_alone_still_load(tmp_path):
    _whole(tmp_path)
    assert checkpoint.load(tmp_path / "whole.pt")["step"] == 3
    checkpoint.save({"rng": checkpoint.rng_state()}, tmp_path / "rng.pt")
    assert set(checkpoint.load(tmp_path / "rng.pt")) == {"rng"}
