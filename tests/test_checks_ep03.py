"""Episode 3's checks, both ways: right answers pass, stubs are "not done", wrong answers teach."""

from __future__ import annotations

import time
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch import nn

from gpucourse.checks import ep03
from gpucourse.exercises import ____
from gpucourse.timing import Timing, benchmark

RNG = np.random.default_rng(0)
X_TRAIN = RNG.normal(5.0, 2.0, size=(300, 15)).astype(np.float32)
X_TEST = RNG.normal(9.0, 3.0, size=(100, 15)).astype(np.float32)


def outcome(exercise, *answers):
    return exercise.outcome(*answers)


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(15, 8), nn.ReLU(), nn.Linear(8, 1))


# --- q1 ----------------------------------------------------------------------------

def test_q1_right_and_stub():
    assert outcome(ep03.q1, X_TRAIN.mean(0), X_TRAIN.std(0), X_TRAIN, X_TEST)[0] == "correct"
    assert outcome(ep03.q1, X_TRAIN.mean(0), X_TRAIN.std(0, ddof=1), X_TRAIN, X_TEST)[0] == "correct"
    assert outcome(ep03.q1, torch.from_numpy(X_TRAIN).mean(0), X_TRAIN.std(0), X_TRAIN, X_TEST)[0] == "correct"
    assert outcome(ep03.q1, ____, ____, X_TRAIN, X_TEST)[0] == "not-done"


@pytest.mark.parametrize("mean, expected", [
    (X_TRAIN.mean(), "expected (15,)"),
    (X_TRAIN.mean(axis=1), "wrong axis"),
    (X_TRAIN.mean(0)[None, :], "shape (1, 15)"),
])
def test_q1_wrong_shapes_name_the_expected_shape(mean, expected):
    result, message = outcome(ep03.q1, mean, X_TRAIN.std(0), X_TRAIN, X_TEST)
    assert result == "wrong" and expected in message and "(15,)" in message


def test_q1_leakage_and_wrong_values():
    both = np.concatenate([X_TRAIN, X_TEST])
    result, message = outcome(ep03.q1, both.mean(0), both.std(0), X_TRAIN, X_TEST)
    assert result == "wrong" and "test" in message and "leak" in message
    result, message = outcome(ep03.q1, X_TRAIN.mean(0), X_TRAIN.var(0), X_TRAIN, X_TEST)
    assert result == "wrong" and "variance" in message
    result, message = outcome(ep03.q1, "mean", X_TRAIN.std(0), X_TRAIN, X_TEST)
    assert result == "wrong"


# --- q2 ----------------------------------------------------------------------------

def test_q2_right_on_this_machine_and_stub():
    device = ep03.selected_device()
    model = mlp().to(device)
    xb = torch.from_numpy(X_TRAIN[:32]).to(device)
    result, message = outcome(ep03.q2, device, model, xb)
    assert result == "correct" and str(device) in message
    assert outcome(ep03.q2, ____, ____, ____)[0] == "not-done"
    assert outcome(ep03.q2, device, ____, xb)[0] == "not-done"


def test_q2_explains_a_tensor_left_behind(monkeypatch):
    # Pretend this machine chose a GPU, to test the messages a learner on a GPU would see, on a
    # machine without one. Every case here is rejected before the model runs, so no CUDA tensor
    # is needed. (Not the "meta" device: with TensorFlow loaded, a meta-device matmul crashes the
    # process in torch 2.13.0+cu130.)
    monkeypatch.setattr(ep03, "selected_device", lambda: torch.device("cuda", 0))
    model = mlp()
    xb = torch.from_numpy(X_TRAIN[:32])
    result, message = outcome(ep03.q2, torch.device("cuda", 0), model, xb)
    assert result == "wrong" and "parameters are on cpu; the selected device is cuda:0" in message
    result, message = outcome(ep03.q2, torch.device("cpu"), model, xb)
    assert result == "wrong" and "this machine's choice is cuda:0" in message
    result, message = outcome(ep03.q2, "cuda", model, xb)
    assert result == "wrong" and "parameters are on cpu" in message

    class ModelOnGPU(torch.nn.Module):  # parameters that report cuda:0, with no GPU present
        def parameters(self, recurse=True):
            yield SimpleNamespace(device=torch.device("cuda", 0), shape=(64, X_TRAIN.shape[1]), ndim=2)

    result, message = outcome(ep03.q2, torch.device("cuda", 0), ModelOnGPU(), xb)
    assert result == "wrong" and "your tensor is on cpu; the selected device is cuda:0" in message
    assert "xb.to(device)" in message


def test_q2_wrong_shape_and_types():
    device = ep03.selected_device()
    model = mlp().to(device)
    result, message = outcome(ep03.q2, device, model, torch.zeros(32, 14, device=device))
    assert result == "wrong" and "expected (batch_size, 15)" in message
    result, message = outcome(ep03.q2, device, model, X_TRAIN[:32])
    assert result == "wrong" and "torch.Tensor" in message
    result, message = outcome(ep03.q2, 0, model, torch.zeros(2, 15))
    assert result == "wrong" and "torch.device" in message


# --- q3 ----------------------------------------------------------------------------

def batch_outputs():
    model = mlp()
    xb = torch.from_numpy(X_TRAIN[:64])
    yb = torch.ones(64)
    logits = model(xb).squeeze(1)
    return torch.sigmoid(logits), nn.functional.binary_cross_entropy_with_logits(logits, yb)


def test_q3_right_and_stub():
    prob, loss = batch_outputs()
    right = (prob.device, loss.device, prob.detach().cpu().numpy(), loss.item())
    assert outcome(ep03.q3, prob, loss, *right)[0] == "correct"
    assert outcome(ep03.q3, prob, loss, "cpu", "cpu", prob.detach().numpy(), float(loss.detach()))[0] == "correct"
    assert outcome(ep03.q3, prob, loss, ____, ____, ____, ____)[0] == "not-done"


def test_q3_wrong_answers_explain():
    prob, loss = batch_outputs()
    dev, good_np, value = prob.device, prob.detach().numpy(), loss.item()
    result, message = outcome(ep03.q3, prob, loss, dev, dev, prob, value)
    assert result == "wrong" and "torch.Tensor" in message and ".detach().cpu().numpy()" in message
    result, message = outcome(ep03.q3, prob, loss, dev, dev, good_np[:, None], value)
    assert result == "wrong" and "shape (64, 1)" in message and "expected (64,)" in message
    result, message = outcome(ep03.q3, prob, loss, dev, dev, good_np, loss)
    assert result == "wrong" and "loss.item()" in message
    result, message = outcome(ep03.q3, prob, loss, torch.device("meta"), dev, good_np, value)
    assert result == "wrong" and "prob lives on cpu" in message
    result, message = outcome(ep03.q3, prob, loss, dev, dev, 1 - good_np, value)
    assert result == "wrong" and "different values" in message


# --- q4 ----------------------------------------------------------------------------

def slow_epoch():
    time.sleep(0.02)


def test_q4_right_and_stub():
    timing = benchmark(slow_epoch, "cpu", warmup=1, repeats=3)
    assert outcome(ep03.q4, timing, slow_epoch, "cpu")[0] == "correct"
    assert outcome(ep03.q4, ____, slow_epoch, "cpu")[0] == "not-done"


def test_q4_wrong_answers_explain():
    result, message = outcome(ep03.q4, 0.02, slow_epoch, "cpu")
    assert result == "wrong" and "Timing object" in message
    result, message = outcome(ep03.q4, benchmark(slow_epoch, "cpu", repeats=1), slow_epoch, "cpu")
    assert result == "wrong" and "repeats=3" in message
    launch_only = Timing((1e-6, 1e-6, 1e-6))  # what timing without waiting looks like
    result, message = outcome(ep03.q4, launch_only, slow_epoch, "cpu")
    assert result == "wrong" and "synchronising" in message
    result, message = outcome(ep03.q4, benchmark(slow_epoch, "cpu", repeats=3), "epoch", "cpu")
    assert result == "wrong" and "function" in message


# --- q5 ----------------------------------------------------------------------------

WIDTHS = [5, 50, 500, 2000]
CPU = [0.010, 0.012, 0.050, 0.400]
GPU = [0.030, 0.030, 0.031, 0.040]


def test_q5_right_and_stub():
    assert ep03.crossover_width(WIDTHS, CPU, GPU) == 500
    result, message = outcome(ep03.q5, 200, 500, WIDTHS, CPU, GPU)
    assert result == "correct" and "within a factor of 3" in message
    result, message = outcome(ep03.q5, 5, 500, WIDTHS, CPU, GPU)
    assert result == "correct" and "3× off" in message
    result, message = outcome(ep03.q5, 100, None, WIDTHS, CPU, None)
    assert result == "correct" and "no GPU" in message
    assert outcome(ep03.q5, ____, ____, WIDTHS, CPU, GPU)[0] == "not-done"
    assert outcome(ep03.q5, 100, ____, WIDTHS, CPU, None)[0] == "not-done"


def test_q5_wrong_answers_explain():
    result, message = outcome(ep03.q5, 100, 2000, WIDTHS, CPU, GPU)
    assert result == "wrong" and "500" in message
    result, message = outcome(ep03.q5, 100, 500, WIDTHS, CPU, None)
    assert result == "wrong" and "None" in message
    result, message = outcome(ep03.q5, "big", 500, WIDTHS, CPU, GPU)
    assert result == "wrong" and "positive whole number" in message
    result, message = outcome(ep03.q5, 100, 500, WIDTHS, CPU[:3], GPU)
    assert result == "wrong" and "one time per width" in message
    never = [0.5, 0.5, 0.5, 0.5]
    assert outcome(ep03.q5, 100, None, WIDTHS, CPU, never)[0] == "correct"
    result, message = outcome(ep03.q5, 100, 2000, WIDTHS, CPU, never)
    assert result == "wrong" and "should be None" in message


def test_every_exercise_has_hint_and_solution(capsys):
    for q in (ep03.q1, ep03.q2, ep03.q3, ep03.q4, ep03.q5):
        q.hint()
        q.solution()
    out = capsys.readouterr().out
    assert out.count("Hint (ep03.") == 5 and out.count("solutions/03-pytorch-classifier.ipynb") == 5
