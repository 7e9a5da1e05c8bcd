"""Episode 2's checks fail on wrong answers, with messages that say what is wrong.

For each exercise: the solution passes, the untouched stub is "not done", and a set of
plausible wrong answers (the mistake the exercise is about, wrong types and units, hard-coded
constants, answers right on one case only) is rejected with a message that names the mistake.
"""

from __future__ import annotations

import pytest
import torch

from gpucourse.checks import ep02
from gpucourse.exercises import ____

from checking import assert_wrong, outcome




# --------------------------------------------------------------- q1: pick_device
def right_pick(need_gib):
    for i in range(torch.cuda.device_count()):
        if torch.cuda.get_device_properties(i).total_memory / 2**30 >= need_gib:
            return torch.device(f"cuda:{i}")
    return torch.device("cpu")


def pick_by(size=lambda b: b / 2**30, fits=lambda have, need: have >= need, order="first", make=torch.device):
    def pick(need_gib):
        fitting = [i for i in range(torch.cuda.device_count())
                   if fits(size(torch.cuda.get_device_properties(i).total_memory), need_gib)]
        if not fitting:
            return make("cpu")
        if order == "biggest":
            i = max(fitting, key=lambda i: torch.cuda.get_device_properties(i).total_memory)
        else:
            i = fitting[-1] if order == "last" else fitting[0]
        return make(f"cuda:{i}")
    return pick


def with_mem_get_info(need_gib):
    for i in range(torch.cuda.device_count()):
        _free, total = torch.cuda.mem_get_info(i)
        if total / 1024**3 >= need_gib:
            return torch.device("cuda", i)
    return torch.device("cpu")


def with_free_memory(need_gib):
    for i in range(torch.cuda.device_count()):
        free, _total = torch.cuda.mem_get_info(i)
        if free / 2**30 >= need_gib:
            return torch.device("cuda", i)
    return torch.device("cpu")


def test_q1_right_answers():
    result, message = outcome(ep02.q1, right_pick)
    assert result == "correct", message
    assert outcome(ep02.q1, with_mem_get_info)[0] == "correct"


def test_q1_simulation_is_undone():
    before = (torch.cuda.is_available(), torch.cuda.device_count())
    outcome(ep02.q1, right_pick)
    assert (torch.cuda.is_available(), torch.cuda.device_count()) == before


Q1_WRONG = [
    pytest.param(lambda need: torch.device("cuda:0" if torch.cuda.is_available() else "cpu"),
                 "has only 14.7 GiB", id="ignores-memory"),
    pytest.param(pick_by(size=lambda b: b / 1e9), ["25.4 GB but only 23.6 GiB", "2**30"], id="gb-not-gib"),
    pytest.param(pick_by(size=lambda b: b), "in bytes", id="bytes-vs-gib"),
    pytest.param(pick_by(fits=lambda have, need: have > need), "use >=", id="strictly-greater"),
    pytest.param(pick_by(order="biggest"), "not the biggest", id="biggest"),
    # total memory, which the prompt asks for, and free memory differ on the busy L4
    pytest.param(with_free_memory, ["free memory", "total_memory", "12.0 GiB are free"], id="free-not-total"),
    pytest.param(pick_by(order="last"), "not the last", id="last-that-fits"),
    pytest.param(lambda need: torch.device("cuda:0"), "this machine has no GPU", id="always-cuda0"),
    pytest.param(lambda need: torch.device("cpu"), "device_count()", id="always-cpu"),
    pytest.param(lambda need: torch.device("cuda:1"), "There is no cuda:1", id="hard-coded-cuda1"),
    pytest.param(lambda need: torch.device("mps"), "no Apple GPU", id="mps"),
    pytest.param(pick_by(make=str), "the string 'cpu'", id="string"),
    pytest.param(lambda need: 0, "return a torch.device", id="int-index"),
    pytest.param(lambda need: [torch.device("cpu")], "list", id="list"),
    pytest.param(lambda need: True, "bool", id="bool"),
    pytest.param(lambda need: torch.device("cuda" if torch.cuda.device_count() else "cpu"),
                 "without an index", id="cuda-without-index"),
    pytest.param(lambda need: torch.device(f"cuda:{min(range(torch.cuda.device_count()))}"),
                 "raised ValueError", id="crashes-without-gpu"),
    pytest.param(lambda need: torch.device("meta"), "cuda:<i>, or the CPU", id="meta"),
    pytest.param("pick_device", "function itself", id="name-in-quotes"),
]


@pytest.mark.parametrize("fn, words", Q1_WRONG)
def test_q1_wrong_answers_name_the_mistake(fn, words):
    assert_wrong(ep02.q1, (fn,), words)


def test_q1_stub_is_not_done():
    assert outcome(ep02.q1, ____)[0] == "not-done"
    assert outcome(ep02.q1, lambda need: ____)[0] == "not-done"
    assert outcome(ep02.q1, lambda need: None)[0] == "not-done"


# --------------------------------------------------------------- q2: to_device
def right_to_device(batch, device):
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, (tuple, list)):
        return type(batch)(right_to_device(item, device) for item in batch)
    if isinstance(batch, dict):
        return {key: right_to_device(value, device) for key, value in batch.items()}
    return batch


def only_tensors(batch, device):
    return batch.to(device) if isinstance(batch, torch.Tensor) else batch


def tuple_to_list(batch, device):
    if isinstance(batch, torch.Tensor):
        return batch.to(device)
    if isinstance(batch, dict):
        return {k: tuple_to_list(v, device) for k, v in batch.items()}
    if isinstance(batch, (tuple, list)):
        return [tuple_to_list(b, device) for b in batch]
    return batch


def not_recursive(batch, device):
    if isinstance(batch, torch.Tensor):
        return batch.to(device)
    if isinstance(batch, (tuple, list)):
        return type(batch)(b.to(device) if isinstance(b, torch.Tensor) else b for b in batch)
    if isinstance(batch, dict):
        return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
    return batch


def one_level_in_dict(batch, device):
    if isinstance(batch, torch.Tensor):
        return batch.to(device)
    if isinstance(batch, (tuple, list)):
        return type(batch)(one_level_in_dict(b, device) for b in batch)
    if isinstance(batch, dict):
        return {k: [t.to(device) if isinstance(t, torch.Tensor) else t for t in v] if isinstance(v, list) else
                (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in batch.items()}
    return batch


def everything_to(batch, device):
    if isinstance(batch, (tuple, list)):
        return type(batch)(everything_to(b, device) for b in batch)
    if isinstance(batch, dict):
        return {k: everything_to(v, device) for k, v in batch.items()}
    return batch.to(device)


def numbers_to_tensors(batch, device):
    if isinstance(batch, (int, float)):
        return torch.tensor(batch, device=device)
    if isinstance(batch, (tuple, list)):
        return type(batch)(numbers_to_tensors(item, device) for item in batch)
    if isinstance(batch, dict):
        return {key: numbers_to_tensors(value, device) for key, value in batch.items()}
    return batch.to(device) if isinstance(batch, torch.Tensor) else batch


def dict_values_only(batch, device):
    if isinstance(batch, dict):
        return [right_to_device(v, device) for v in batch.values()]
    return right_to_device(batch, device)


def with_cuda(batch, device):
    if isinstance(batch, torch.Tensor):
        return batch.cuda() if torch.cuda.is_available() else batch.to("cuda")
    return right_to_device(batch, device)


def as_float(batch, device):
    if isinstance(batch, torch.Tensor):
        return batch.to(device, torch.float32)
    if isinstance(batch, (tuple, list)):
        return type(batch)(as_float(item, device) for item in batch)
    return batch


def any_sequence(batch, device):
    from collections.abc import Sequence
    if isinstance(batch, torch.Tensor):
        return batch.to(device)
    if isinstance(batch, Sequence):
        return type(batch)([any_sequence(b, device) for b in batch])
    if isinstance(batch, dict):
        return {k: any_sequence(v, device) for k, v in batch.items()}
    return batch


def test_q2_right_answer():
    result, message = outcome(ep02.q2, right_to_device)
    assert result == "correct", message


Q2_WRONG = [
    pytest.param(lambda batch, device: batch, "is on cpu; the target device is meta", id="no-op"),
    pytest.param(only_tensors, "element 0 of the tuple is on cpu", id="only-top-level-tensor"),
    pytest.param(tuple_to_list, "keep the container", id="tuple-becomes-list"),
    pytest.param(dict_values_only, "same keys", id="dict-becomes-list"),
    pytest.param(not_recursive, ["batch['labels'][0] is on cpu", "recursion"], id="not-recursive"),
    pytest.param(one_level_in_dict, ["batch['extra']['mask'][0] is on cpu", "recursion"], id="one-level-only"),
    pytest.param(everything_to, "Leave things that are not tensors", id="calls-to-on-strings"),
    pytest.param(numbers_to_tensors, "leave anything that is not a tensor", id="numbers-become-tensors"),
    pytest.param(with_cuda, "Did you call .cuda()", id="cuda-instead-of-device"),
    pytest.param(lambda batch, device: right_to_device(batch, torch.device("cpu")),
                 "with the device you were given", id="hard-coded-cpu"),
    pytest.param(as_float, "must not change shapes or dtypes", id="changes-dtype"),
    pytest.param(any_sequence, "A string is a sequence", id="string-recursion"),
    pytest.param(lambda batch, device: str(batch), "expected a tensor", id="string"),
    pytest.param(lambda batch, device: True, "expected a tensor", id="bool"),
    pytest.param(lambda batch: batch, "raised TypeError", id="wrong-signature"),
    pytest.param("to_device", "function itself", id="name-in-quotes"),
]


@pytest.mark.parametrize("fn, words", Q2_WRONG)
def test_q2_wrong_answers_name_the_mistake(fn, words):
    assert_wrong(ep02.q2, (fn,), words)


def test_q2_stub_is_not_done():
    assert outcome(ep02.q2, ____)[0] == "not-done"
    assert outcome(ep02.q2, lambda batch, device: ____)[0] == "not-done"
    assert outcome(ep02.q2, lambda batch, device: None)[0] == "not-done"


# --------------------------------------------------------------- q3: freest_gpu
def parse(text):
    return [[part.strip() for part in line.split(",")] for line in text.strip().splitlines()]


def right_freest(text):
    return int(max(parse(text), key=lambda r: int(r[3]) - int(r[2]))[0])


def test_q3_right_answer():
    result, message = outcome(ep02.q3, right_freest)
    assert result == "correct", message


def test_q3_servers_tell_the_mistakes_apart():
    """Each server's right answer differs from some mistake's, and not all answers are equal."""
    answers = [right_freest(text) for _, text in ep02.Q3_SERVERS]
    assert len(set(answers)) >= 3
    rows = ep02._rows(ep02.MIXED_SERVER)
    least_used = min(rows, key=lambda r: r["used"])["index"]
    least_fraction = min(rows, key=lambda r: r["used"] / r["total"])["index"]
    assert len({least_used, least_fraction, right_freest(ep02.MIXED_SERVER)}) == 3


Q3_WRONG = [
    pytest.param(lambda text: int(min(parse(text), key=lambda r: int(r[2]) / int(r[3]))[0]),
                 ["smallest *fraction*", "total − used"], id="least-fraction-used"),
    pytest.param(lambda text: int(min(parse(text), key=lambda r: int(r[2]))[0]),
                 ["least memory *used*", "total − used"], id="least-used"),
    pytest.param(lambda text: int(max(parse(text), key=lambda r: int(r[2]))[0]), "busiest", id="most-used"),
    pytest.param(lambda text: int(min(parse(text), key=lambda r: int(r[3]) - int(r[2]))[0]), "busiest",
                 id="least-free"),
    pytest.param(lambda text: int(max(parse(text), key=lambda r: int(r[3]))[0]), "memory.total only",
                 id="biggest-total"),
    pytest.param(lambda text: max(range(len(parse(text))), key=lambda i: int(parse(text)[i][3]) - int(parse(text)[i][2])),
                 "not its position", id="line-number"),
    pytest.param(lambda text: int(max(text.strip().splitlines(),
                                      key=lambda l: int(l.split(",")[3]) - int(l.split(",")[2]))[0]),
                 "first character", id="first-character"),
    pytest.param(lambda text: 1, ["returned 1 for each", "do not type it in"], id="hard-coded-1"),
    pytest.param(lambda text: max(parse(text), key=lambda r: int(r[3]) - int(r[2]))[0], "int(...)",
                 id="string-index"),
    pytest.param(lambda text: float(right_freest(text)), "as an int", id="float"),
    pytest.param(lambda text: max(parse(text), key=lambda r: int(r[3]) - int(r[2])), "not the line", id="row"),
    pytest.param(lambda text: max(int(r[3]) - int(r[2]) for r in parse(text)), "amount of memory in MiB",
                 id="free-memory-not-index"),
    pytest.param(lambda text: True, "bool", id="bool"),
    pytest.param(lambda text: int(max(text.split("\n"), key=lambda l: int(l.split(",")[3]) - int(l.split(",")[2]))[0]),
                 "raised IndexError", id="trailing-newline-crash"),
    pytest.param("freest_gpu", "function itself", id="name-in-quotes"),
]


@pytest.mark.parametrize("fn, words", Q3_WRONG)
def test_q3_wrong_answers_name_the_mistake(fn, words):
    assert_wrong(ep02.q3, (fn,), words)


def test_q3_message_shows_the_server():
    message = assert_wrong(ep02.q3, (lambda text: int(min(parse(text), key=lambda r: int(r[2]))[0]),),
                           "Tesla T4, 1000, 15360")
    assert "expected 0" in message


def test_q3_stub_is_not_done():
    assert outcome(ep02.q3, ____)[0] == "not-done"
    assert outcome(ep02.q3, lambda text: ____)[0] == "not-done"
    assert outcome(ep02.q3, lambda text: None)[0] == "not-done"


# --------------------------------------------------------------- q4: physical_gpu
def right_physical(visible, index, gpus_in_machine):
    listed = list(range(gpus_in_machine)) if visible is None else [int(v) for v in visible.split(",") if v.strip()]
    seen = []
    for gpu in listed:
        if not 0 <= gpu < gpus_in_machine:
            break
        seen.append(gpu)
    return seen[index] if index < len(seen) else None


def listed_or_all(visible, gpus):
    return list(range(gpus)) if visible is None else [int(v) for v in visible.split(",") if v.strip()]


def skips_invalid(visible, index, gpus):
    seen = [g for g in listed_or_all(visible, gpus) if 0 <= g < gpus]
    return seen[index] if index < len(seen) else None


def no_bounds(visible, index, gpus):
    seen = right_seen(visible, gpus)
    return seen[index]


def right_seen(visible, gpus):
    seen = []
    for g in listed_or_all(visible, gpus):
        if not 0 <= g < gpus:
            break
        seen.append(g)
    return seen


def sorted_list(visible, index, gpus):
    seen = sorted(right_seen(visible, gpus))
    return seen[index] if index < len(seen) else None


def empty_means_all(visible, index, gpus):
    return right_physical(None if visible == "" else visible, index, gpus)


def minus_one_if_missing(visible, index, gpus):
    found = right_physical(visible, index, gpus)
    return -1 if found is None else found


def unset_means_none(visible, index, gpus):
    return None if visible is None else right_physical(visible, index, gpus)


def off_by_one(visible, index, gpus):
    seen = right_seen(visible, gpus)
    return seen[index - 1] if 0 < index <= len(seen) else (seen[0] if index == 0 and seen else None)


def as_string(visible, index, gpus):
    found = right_physical(visible, index, gpus)
    return None if found is None else str(found)


def no_machine_check(visible, index, gpus):
    """Stops at -1 but not at numbers too big for the machine."""
    if visible is None:
        seen = list(range(gpus))
    else:
        seen = []
        for g in (int(v) for v in visible.split(",") if v.strip()):
            if g < 0:
                break
            seen.append(g)
    return seen[index] if index < len(seen) else None


def test_q4_right_answer():
    result, message = outcome(ep02.q4, right_physical)
    assert result == "correct", message


Q4_WRONG = [
    pytest.param(lambda visible, index, gpus: index, "only when CUDA_VISIBLE_DEVICES is not set", id="cuda-k-is-gpu-k"),
    pytest.param(sorted_list, "not sorted", id="sorted"),
    pytest.param(off_by_one, "Off by one", id="off-by-one"),
    pytest.param(skips_invalid, "stops reading the list at the first entry", id="skips-invalid"),
    pytest.param(no_machine_check, "not a GPU of this 4-GPU machine", id="ignores-machine-size"),
    pytest.param(no_bounds, ["raised IndexError", "there is no cuda:2, so return None"], id="no-bounds-check"),
    pytest.param(empty_means_all, "empty CUDA_VISIBLE_DEVICES hides every GPU", id="empty-means-all"),
    pytest.param(unset_means_none, "sees every GPU", id="unset-means-none"),
    pytest.param(minus_one_if_missing, "return None, not -1", id="minus-one"),
    pytest.param(lambda visible, index, gpus: 2, ["returned 2 in all", "do not type it in"], id="hard-coded-2"),
    pytest.param(lambda visible, index, gpus: int(visible.split(",")[index]), "raised AttributeError",
                 id="crashes-when-unset"),
    pytest.param(as_string, "int(...)", id="string"),
    pytest.param(lambda visible, index, gpus: float(right_physical(visible, index, gpus) or 0), "as an int", id="float"),
    pytest.param(lambda visible, index, gpus: right_seen(visible, gpus), "list", id="list"),
    pytest.param(lambda visible, index, gpus: index == 0, "bool", id="bool"),
    pytest.param(lambda visible, index: index, "raised TypeError", id="wrong-signature"),
    pytest.param("physical_gpu", "function itself", id="name-in-quotes"),
]


@pytest.mark.parametrize("fn, words", Q4_WRONG)
def test_q4_wrong_answers_name_the_mistake(fn, words):
    assert_wrong(ep02.q4, (fn,), words)


def test_q4_stub_is_not_done():
    assert outcome(ep02.q4, ____)[0] == "not-done"
    assert outcome(ep02.q4, lambda visible, index, gpus: ____)[0] == "not-done"
    result, message = outcome(ep02.q4, lambda visible, index, gpus: None)
    assert result == "not-done" and "forget `return`" in message


# --------------------------------------------------------------- all
def test_every_exercise_has_hint_and_solution(capsys):
    for q in (ep02.q1, ep02.q2, ep02.q3, ep02.q4):
        q.hint()
        q.solution()
    out = capsys.readouterr().out
    assert out.count("Hint 1 (ep02.") == 4
    assert out.count("solutions/02-finding-your-gpu.ipynb") == 4


def test_every_hint_has_two_steps_question_first(capsys):
    for q in (ep02.q1, ep02.q2, ep02.q3, ep02.q4):
        assert len(q.hints) == 2, q.name
        assert "?" in q.hints[0], f"{q.name}: the first step should ask the guiding question"
        q.hint(2)
    assert capsys.readouterr().out.count("Hint 2 (ep02.") == 4


@pytest.mark.parametrize("q", [ep02.q1, ep02.q2, ep02.q3, ep02.q4], ids=lambda q: q.name)
def test_hints_do_not_give_the_code(q):
    code = ["torch.", "2**30", ".to(", "isinstance", ".split(", "int(", "range(", "return", "def ", " in enumerate"]
    text = " ".join(q.hints)
    assert not [c for c in code if c in text], (q.name, [c for c in code if c in text])
