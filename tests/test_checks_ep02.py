"""Episode 2's checks fail on wrong answers, with messages that say what is wrong."""
import torch

from gpucourse.checks import ep02


def _msg(ex, *answers):
    outcome, message = ex.outcome(*answers)
    return outcome, message


def test_q1_always_cuda_is_wrong():
    outcome, message = _msg(ep02.q1, lambda index=0: torch.device(f"cuda:{index}"))
    assert outcome == "wrong" and "0 GPU(s)" in message and "expected cpu" in message


def test_q1_ignores_device_count():
    pick = lambda index=0: torch.device(f"cuda:{index}" if torch.cuda.is_available() else "cpu")
    outcome, message = _msg(ep02.q1, pick)
    assert outcome == "wrong" and "does not exist" in message


def test_q1_string_and_bare_cuda():
    outcome, message = _msg(ep02.q1, lambda index=0: "cpu")
    assert outcome == "wrong" and "torch.device('cpu')" in message
    bare = lambda index=0: torch.device("cuda" if torch.cuda.is_available() else "cpu")
    assert "without an index" in _msg(ep02.q1, bare)[1]


def test_q2_forgets_one_tensor():
    def partial(batch, device):
        if isinstance(batch, tuple):
            return (batch[0].to(device), batch[1])
        return batch.to(device) if isinstance(batch, torch.Tensor) else batch
    outcome, message = _msg(ep02.q2, partial)
    assert outcome == "wrong" and "element 1 of the tuple is on cpu; the target device is meta" in message


def test_q2_turns_tuple_into_list():
    def as_list(batch, device):
        if isinstance(batch, torch.Tensor):
            return batch.to(device)
        return [b.to(device) for b in batch]
    assert "keep the container" in _msg(ep02.q2, as_list)[1]


def test_q3_least_used_is_not_most_free():
    def least_used(text):
        rows = [line.split(",") for line in text.strip().splitlines()]
        return int(min(rows, key=lambda r: int(r[2]))[0])
    outcome, message = _msg(ep02.q3, least_used)
    assert outcome == "wrong" and "least memory *used*" in message


def test_q3_string_index():
    assert "int(...)" in _msg(ep02.q3, lambda text: "1")[1]


def test_q4():
    assert _msg(ep02.q4, 2, 2)[0] == "correct"
    assert "renumbered" in _msg(ep02.q4, 2, 0)[1]
    assert "two GPUs" in _msg(ep02.q4, 4, 2)[1]
    assert "int" in _msg(ep02.q4, "2", 2)[1]
