"""Checks for episode 6, "Running out of GPU memory, and fitting more".

``q1`` an out-of-memory-safe search for the largest batch · ``q2`` gradient accumulation that gives
the full batch's gradients · ``q3`` choose how to fit a step in memory from measured costs.

Every check calls the learner's function on cases of its own, several of them, so that a constant
or an answer right for one case only cannot pass, and recomputes or measures the right result:

* ``q1`` hands the learner's search a simulated GPU (``SimulatedGPU``) whose memory limit the check
  chooses. A step that does not fit raises ``torch.OutOfMemoryError`` and, like a real failed
  step, leaves its "tensors" referenced from the exception's traceback; the simulated GPU notices a
  retry made while they are still alive (inside the ``except`` block, or with the exception kept),
  and a retry after a failure with no ``gc.collect()`` and ``torch.cuda.empty_cache()`` in between;
* ``q2`` runs the learner's accumulation and a full-batch step side by side, compares the gradients
  the optimizer receives, watches the batch sizes the model sees, and measures the peak memory
  with ``gpucourse.memory.TensorMeter``;
* ``q3`` gives sets of measured options, some of which do not fit, and knows the typical wrong rules
  (seconds per step, the largest batch, GB against GiB) by the answers they give.
"""


from __future__ import annotations

import contextlib
import copy
import functools
import gc
import math
import numbers
import sys
import weakref
from unittest import mock

from ..exercises import error_message
from ..exercises import (Exercise, NotDone, Wrong, answer_deadline, as_number, changes, describe,
                         is_blank, mentions_blank, require_function, snapshot, solution_link, tensors_close, uses_blank)

NOTEBOOK = "06-out-of-memory.ipynb"
GIB, MIB = 2**30, 2**20


# --- helpers ---------------------------------------------------------------------------

def _constant(values, expected) -> bool:
    """True when the learner gave one answer for every case, though the right answers differ."""
    return len(values) > 1 and len({repr(v) for v in values}) == 1 and len({repr(e) for e in expected}) > 1


def _whole_number(name: str, value) -> int:
    """``value`` as an int; ``Wrong`` for text, booleans, NaN and numbers with a fraction."""
    got = as_number(name, value)
    if not float(got).is_integer():
        raise Wrong(f"{name} is {got:g}; it should be a whole number.")
    return int(got)


def _fmt(nbytes: float) -> str:
    from ..memory import format_bytes

    return f"{format_bytes(nbytes)} ({nbytes:,.0f} bytes)"


# --- q1: an out-of-memory-safe search for the largest batch ----------------------------------

class _TooManyTrials(BaseException):
    """Stops a search that will not end (BaseException: an `except Exception` cannot swallow it)."""


class _Held:
    """What a failed step leaves behind: its tensors, alive while the exception's traceback is."""

    __slots__ = ("nbytes", "__weakref__")

    def __init__(self, nbytes):
        self.nbytes = nbytes


class SimulatedGPU:
    """A pretend GPU for batch-size searches: ``try_step(batch)`` fits or raises ``torch.OutOfMemoryError``.

    A step needs ``fixed + per_sample * batch`` bytes of ``limit``. A step that does not fit raises
    the error with its (pretend) tensors referenced from the frame that raised it, as a real failed
    step's are: until the exception and its traceback are gone, they still take memory, so a retry
    made meanwhile sees less free memory — and the simulator notes it. ``other_error_at`` makes a
    batch of that size (or larger) raise an error that is not about memory.
    """

    MAX_CALLS = 400

    def __init__(self, limit, fixed, per_sample, other_error_at=None, cleanups=None):
        self.limit, self.fixed, self.per_sample = limit, fixed, per_sample
        self.other_error_at = other_error_at
        self.calls: list[int] = []
        self.failures = 0
        self.retried_while_held: list[int] = []
        self.retried_uncollected: list[int] = []
        self.cleanups = cleanups              # {"collect": n, "empty_cache": n}: calls counted by the check
        self._at_failure = None
        self._held = weakref.WeakSet()

    def largest(self) -> int:
        return max(0, (self.limit - self.fixed) // self.per_sample)

    def held(self) -> int:
        return sum(block.nbytes for block in list(self._held))

    def try_step(self, batch):
        import torch

        if isinstance(batch, bool) or not isinstance(batch, numbers.Integral):
            raise TypeError(f"try_step({batch!r}): a batch size must be a whole number (an int), "
                            f"got {type(batch).__name__}.")
        batch = int(batch)
        if batch < 1:
            raise ValueError(f"try_step({batch}): a batch size must be at least 1.")
        self.calls.append(batch)
        if len(self.calls) > self.MAX_CALLS:
            raise _TooManyTrials()
        held = self.held()
        if held:
            self.retried_while_held.append(batch)
        if self._at_failure is not None and any(self.cleanups[k] == n for k, n in self._at_failure.items()):
            self.retried_uncollected.append(batch)       # no gc.collect() or no empty_cache() since the failure
        self._at_failure = None
        if self.other_error_at is not None and batch >= self.other_error_at:
            raise RuntimeError("CUDA error: an illegal memory access was encountered (a bug, not a lack of memory)")
        needed = self.fixed + self.per_sample * batch
        if needed + held > self.limit:
            self.failures += 1
            if self.cleanups is not None:    # the clean-ups that count, as they stood at the failure
                self._at_failure = {k: self.cleanups[k] for k in ("collect", "empty_cache")}
            activations = _Held(min(needed, self.limit - held))   # kept alive by the traceback, as tensors are
            self._held.add(activations)
            raise torch.OutOfMemoryError(
                f"CUDA out of memory (simulated). Tried to allocate {_fmt(self.per_sample * batch)}. "
                f"GPU 0 has a total capacity of {_fmt(self.limit)}.")


_Q1_CASES = [
    # description, limit, fixed, per_sample, start
    ("a 16 GiB GPU, start=64", 16 * GIB, 1_500_000_000, 700_000, 64),
    ("a 4 GiB GPU, start=4096 (too big: halve first)", 4 * GIB, 200_000_000, 1_100_000, 4096),
    ("a 15 GiB GPU, start=1", 15 * GIB, 2_000_000_000, 1_000_003, 1),
    ("a GPU where only batch 1 fits, start=8", 2_000_000, 1_000_000, 700_000, 8),
    ("a GPU where not even batch 1 fits, start=32", 1_000_000, 1_200_000, 1000, 32),
    ("an 80 GiB GPU and a tiny model, start=512", 80 * GIB, 10_000_000, 28_000, 512),
]


def _power_of_two_step(value: int, start: int) -> bool:
    """True if ``value`` is ``start`` doubled or halved a whole number of times."""
    return value > 0 and any(value == start * 2**k or value == start // 2**k for k in range(64))


def _run_search(largest_batch, sim, start, what):
    try:
        with answer_deadline(what):
            result = largest_batch(sim.try_step, start)
    except _TooManyTrials:
        raise Wrong(f"{what} called try_step more than {sim.MAX_CALLS} times without finishing "
                    f"(first batches tried: {sim.calls[:6]}, last: {sim.calls[-3:]}). Each trial costs a training "
                    "step, each failure an out-of-memory error: do not step through sizes one by one. Double "
                    "(or halve) to bracket the answer, then bisect; stop when batch 1 fails, and when the last "
                    "size that fitted and the first that failed are neighbours.") from None
    except (NotDone, Wrong):
        raise
    except Exception as exc:
        import torch

        if mentions_blank(exc):
            raise NotDone("largest_batch still uses ____: replace it with your code.") from None
        if isinstance(exc, torch.OutOfMemoryError):
            raise Wrong(f"{what} let torch.OutOfMemoryError escape (batches tried: {sim.calls[:8]}): catch it "
                        "with try/except torch.OutOfMemoryError, and try a smaller batch.") from None
        if isinstance(exc, (TypeError, ValueError)) and "try_step(" in str(exc):
            raise Wrong(f"{what}: {exc} Halve and bisect with // so that every size is an int, and never "
                        "try a batch below 1.") from None
        raise Wrong(error_message(what, exc)) from None
    if is_blank(result):
        raise NotDone("largest_batch still returns ____: replace it with your code.")
    if result is None:
        raise Wrong(f"{what} returned None: did you forget `return`?")
    return result


def _check_largest_batch(largest_batch):
    import torch

    require_function(largest_batch, "largest_batch")
    # Both calls are counted, so that the simulated GPU can tell whether they ran between a failure and a retry.
    # Full collections are seen through gc.callbacks, however gc.collect was imported (objects alive before the
    # check are frozen, so each takes milliseconds); empty_cache is replaced, and the real one, bound before the
    # check began (`from torch.cuda import empty_cache`), is seen through the is_initialized() it asks first.
    # A clean-up counts only when the failed step's memory is already released: gc.collect() or empty_cache()
    # inside the except block, while the exception's traceback still holds the step's tensors, frees nothing
    # (the lesson's rule: clean up outside the except). Those are counted apart, to name the mistake.
    cleanups = {"collect": 0, "empty_cache": 0, "collect_held": 0, "empty_cache_held": 0, "sim": None}

    def count(name):
        sim = cleanups["sim"]
        cleanups[name + ("_held" if sim is not None and sim.held() else "")] += 1

    def empty_cache():
        count("empty_cache")

    def full_collection(phase, info):
        if phase == "start" and info.get("generation") == 2:
            count("collect")

    cuda_memory = sys.modules.get("torch.cuda.memory")
    real_empty_cache = getattr(cuda_memory, "empty_cache", None)
    real_is_initialized = getattr(cuda_memory, "is_initialized", None)

    def is_initialized():
        if real_empty_cache is not None and sys._getframe(1).f_code is getattr(real_empty_cache, "__code__", None):
            count("empty_cache")
        return real_is_initialized()

    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.object(torch.cuda, "empty_cache", empty_cache))
        if real_is_initialized is not None:
            stack.enter_context(mock.patch.object(cuda_memory, "is_initialized", is_initialized))
        gc.callbacks.append(full_collection)
        stack.callback(gc.callbacks.remove, full_collection)
        if not gc.get_freeze_count():     # a full collection then scans only what the search made: milliseconds
            gc.freeze()
            stack.callback(gc.unfreeze)
        return _search_cases(largest_batch, cleanups)


def _search_cases(largest_batch, cleanups=None):
    import torch

    runs = []
    for description, limit, fixed, per_sample, start in _Q1_CASES:
        sim = SimulatedGPU(limit, fixed, per_sample, cleanups=cleanups)
        if cleanups is not None:
            cleanups["sim"] = sim
        what = f"largest_batch(try_step, start={start}) on {description}"
        result = _run_search(largest_batch, sim, start, what)
        if sim.retried_while_held:
            raise Wrong(f"{what} tried batch {sim.retried_while_held[0]} while the memory of the step that had "
                        "just failed was still in use: the exception's traceback keeps the failed step's frames, "
                        "and their tensors, alive — inside the except block, and for as long as you keep the "
                        "exception in a variable. Only note the failure in the except block (failed = True); "
                        "retry after it, once gc.collect() and torch.cuda.empty_cache() have run.")
        if sim.retried_uncollected and cleanups is not None and \
                (cleanups["collect_held"] or cleanups["empty_cache_held"]):
            raise Wrong(f"{what} cleaned up inside the except block: there the exception's traceback still holds the "
                        "failed step's frames and tensors, so gc.collect() and torch.cuda.empty_cache() free nothing, "
                        f"and batch {sim.retried_uncollected[0]} was tried with that memory still in use on a GPU. "
                        "Only note the failure in the except block (failed = True); call gc.collect() and "
                        "torch.cuda.empty_cache() after it, outside the except.")
        if sim.retried_uncollected:
            missing = [call for name, call in (("collect", "gc.collect()"), ("empty_cache", "torch.cuda.empty_cache()"))
                       if cleanups is not None and cleanups[name] == 0]
            which = f" ({' and '.join(missing)} never ran)" if missing else ""
            raise Wrong(f"{what} tried batch {sim.retried_uncollected[0]} right after a failed step without "
                        f"cleaning up{which}: after a failed step, run gc.collect() and torch.cuda.empty_cache() "
                        "(outside the except block) before the next try. Objects in reference cycles are freed "
                        "only by gc.collect(), and on a GPU empty_cache() returns the failed step's cached "
                        "blocks, so that the next try starts from a clean state.")
        runs.append((what, sim, start, _whole_number(what, result)))
    if _constant([r[3] for r in runs], [r[1].largest() for r in runs]):
        raise Wrong(f"largest_batch returned {runs[0][3]} on every simulated GPU, whatever its memory: search by "
                    "calling try_step, do not return a number you found once.")
    for what, sim, start, value in runs:
        expected = sim.largest()
        if value != expected:
            calls = sim.calls
            if expected == 0:
                raise Wrong(f"{what} returned {value}, but not even batch 1 fits on this GPU: return 0.")
            if value > expected:
                raise Wrong(f"{what} returned {value}, but batch {value} does not fit (it raised "
                            f"torch.OutOfMemoryError); the largest that fits is {expected}. Return the last size "
                            "that fitted, not the first that failed.")
            if _power_of_two_step(value, start):
                raise Wrong(f"{what} returned {value}, a power-of-two step from start; the largest batch that fits "
                            f"is {expected}. After doubling (or halving) has found a size that fits and one that "
                            "fails, bisect between them until they are neighbours.")
            raise Wrong(f"{what} returned {value}; the largest batch that fits is {expected} "
                        f"(batches tried: {calls[:12]}{' …' if len(calls) > 12 else ''}).")
        bound = 2 * math.ceil(math.log2(max(expected, start, 2) / max(min(expected, start), 1) + 1)) \
            + 2 * math.ceil(math.log2(max(expected, 2))) + 4
        if len(sim.calls) > bound:
            raise Wrong(f"{what} found {value}, but it needed {len(sim.calls)} trials ({sim.failures} of them out of "
                        f"memory); a doubling-and-bisection search needs at most about {bound}. Every failed step "
                        "costs time on a real GPU: double (or halve) to bracket the answer, then bisect.")
    # A bug is not a lack of memory: it must reach the learner.
    sim = SimulatedGPU(16 * GIB, 1_000_000_000, 600_000, other_error_at=300)
    what = "largest_batch(try_step, start=64) when batches of 300 or more hit a bug (a RuntimeError that is not out of memory)"
    try:
        with answer_deadline(what):
            result = largest_batch(sim.try_step, 64)
    except torch.OutOfMemoryError:
        raise Wrong(f"{what} raised torch.OutOfMemoryError; the step never ran out of memory.") from None
    except RuntimeError as exc:
        if "illegal memory access" not in str(exc):
            raise Wrong(f"{what} raised RuntimeError: {exc}.") from None
    except _TooManyTrials:
        raise Wrong(f"{what} kept trying ({len(sim.calls)} calls): the error is a bug, not a lack of memory; "
                    "catch only torch.OutOfMemoryError.") from None
    except Exception as exc:
        if mentions_blank(exc):
            raise NotDone("largest_batch still uses ____: replace it with your code.") from None
        raise Wrong(error_message(what, exc)) from None
    else:
        raise Wrong(f"{what} returned {result!r}: it caught an error that is not out of memory and treated it as "
                    "one. Catch only torch.OutOfMemoryError (except RuntimeError or except Exception also catches "
                    "bugs, which you need to see).")
    return (f"right on {len(_Q1_CASES)} simulated GPUs (start too big, too small, nothing fits), with few trials, "
            "retries only after the failed step's memory was freed, and a bug left to surface.")


q1 = Exercise("ep06.q1", _check_largest_batch,
              hint=("What must happen between a failed try and the next one, and where in the code? And how do you "
                    "find a size that fits and one that fails without trying every size in between?",
                    "Split it in two. fits(try_step, batch) only notes a failure inside the except block, and "
                    "collects and empties the cache after it (episode 6, §1). The search first brackets the answer "
                    "between a size that fits and one that fails, doubling or halving from start, then bisects the "
                    "bracket until the two sizes are neighbours."),
              solution=solution_link(NOTEBOOK))


# --- q2: gradient accumulation ---------------------------------------------------------------

class _SpyOptimizer:
    """Wraps an optimizer; records the gradients it is asked to step with."""

    def __init__(self, optimizer, params):
        self._optimizer = optimizer
        self._params = params
        self.steps: list[list] = []
        self.zero_grads = 0

    @property
    def param_groups(self):
        return self._optimizer.param_groups

    @property
    def state(self):
        return self._optimizer.state

    def zero_grad(self, set_to_none: bool = True):
        self.zero_grads += 1
        self._optimizer.zero_grad(set_to_none=set_to_none)

    def step(self, closure=None):
        self.steps.append([None if p.grad is None else p.grad.detach().clone() for p in self._params])
        return self._optimizer.step(closure)


def _q2_cases():
    import torch
    from torch import nn

    def mlp(width, n_out):
        torch.manual_seed(41)
        return nn.Sequential(nn.Linear(15, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(), nn.Linear(width, n_out))

    def data(n, n_out, seed):
        g = torch.Generator().manual_seed(seed)
        X = torch.randn(n, 15, generator=g)
        y = (torch.rand(n, 1, generator=g) > 0.5).float() if n_out == 1 else torch.randint(0, n_out, (n,), generator=g)
        return X, y

    return [
        ("512 events in micro-batches of 64 (8 equal parts), BCEWithLogitsLoss", lambda: mlp(256, 1),
         nn.BCEWithLogitsLoss(), *data(512, 1, 1), 64),
        ("100 events in micro-batches of 32 (32 + 32 + 32 + 4), CrossEntropyLoss", lambda: mlp(32, 3),
         nn.CrossEntropyLoss(), *data(100, 3, 2), 32),
        ("40 events in micro-batches of 64 (one part only), BCEWithLogitsLoss", lambda: mlp(16, 1),
         nn.BCEWithLogitsLoss(), *data(40, 1, 3), 64),
    ]


def _reference_step(make_model, loss_fn, X, y, micro=None, *, scale="share", zero=True, keep_graphs=False,
                    model=None):
    """Gradients of one step computed correctly (micro=None: the full batch) or as a named mistake."""
    import torch

    model = make_model() if model is None else model
    model.zero_grad(set_to_none=True)
    if not zero:
        for p in model.parameters():
            p.grad = torch.full_like(p, 0.5)
    chunks = list(zip(X.split(micro), y.split(micro))) if micro else [(X, y)]
    total, kept = 0.0, []
    for xb, yb in chunks:
        weight = {"share": len(xb) / len(X), "count": 1 / len(chunks), "none": 1.0}[scale]
        loss = loss_fn(model(xb), yb) * weight
        if keep_graphs:
            kept.append(loss)
        else:
            loss.backward()
        total += loss.item()
    if keep_graphs:
        sum(kept).backward()
    return [p.grad.detach().clone() for p in model.parameters()], total


def _reference_peak(make_model, loss_fn, X, y, micro, keep_graphs):
    """Peak bytes of an accumulated step, the model built before measuring (as the learner's is)."""
    model = make_model()
    peak, _ = _peak_of(lambda: _reference_step(make_model, loss_fn, X.clone(), y.clone(), micro,
                                               keep_graphs=keep_graphs, model=model))
    return peak


def _close_grads(a, b) -> bool:
    import torch

    if a is None or b is None or len(a) != len(b):
        return False
    return all(x is not None and y is not None and tensors_close(x, y, rtol=1e-4, atol=1e-6) for x, y in zip(a, b))


def _peak_of(fn):
    from ..memory import TensorMeter

    meter = TensorMeter()
    with meter:
        start = meter.allocated()
        meter.reset_peak()
        result = fn()
        peak = meter.peak() - start
    return peak, result


def _q2_loss_mistake(value, make_model, loss_fn, X, y, micro) -> str:
    """Which way of adding up the micro-batch losses gives ``value``: each is recomputed, not guessed."""
    import torch

    model = make_model()                      # the weights before the step, as the learner's loss saw them
    with torch.no_grad():
        parts = [(loss_fn(model(xb), yb).item(), len(xb) / len(X)) for xb, yb in zip(X.split(micro), y.split(micro))]
    means, shares = [m for m, _ in parts], [s for _, s in parts]
    candidates = {
        "you averaged the micro-batch losses, each micro-batch counted once: the shorter last micro-batch "
        "weighs as much as a full one. Add up each micro-batch's loss weighted by len(xb) / len(X), the same "
        "weighted losses you call backward() on.": sum(means) / len(means),
        "you added up the micro-batch losses without their weights len(xb) / len(X): that is a sum over the "
        "micro-batches, not the batch's mean loss.": sum(means),
        "you returned only the last micro-batch's loss; add up every micro-batch's weighted loss "
        "(loss.detach()), not only the last one.": means[-1] * shares[-1],
        "you returned only the last micro-batch's loss (unweighted); add up every micro-batch's loss weighted "
        "by len(xb) / len(X), not only the last one.": means[-1],
        "you returned only the first micro-batch's loss; add up every micro-batch's weighted loss.": means[0] * shares[0],
    }
    for message, candidate in candidates.items():
        if math.isclose(value, candidate, rel_tol=1e-4, abs_tol=1e-6):
            return message
    return ("add up every micro-batch's loss weighted by len(xb) / len(X) (loss.detach(), or loss.item()) "
            "and return that sum as a float.")


def _check_accumulation(accumulated_step):
    import torch

    require_function(accumulated_step, "accumulated_step")
    for description, make_model, loss_fn, X, y, micro in _q2_cases():
        what = f"accumulated_step on {description}"
        full_grads, full_loss = _reference_step(make_model, loss_fn, X, y)
        model = make_model()
        params = list(model.parameters())
        for p in params:                                   # what a previous step left behind
            p.grad = torch.full_like(p, 0.5)
        spy = _SpyOptimizer(torch.optim.SGD(params, lr=0.1), params)
        rows: list[int] = []
        model.register_forward_pre_hook(lambda module, args, rows=rows: rows.append(len(args[0])))
        loss_before, X_in, y_in = snapshot(loss_fn), X.clone(), y.clone()
        run = functools.partial(accumulated_step, model, spy, loss_fn, X_in, y_in, micro)
        try:
            with answer_deadline(what):
                peak, result = _peak_of(run)
        except (NotDone, Wrong):
            raise
        except Exception as exc:
            if mentions_blank(exc):
                raise NotDone("accumulated_step still uses ____: replace it with your code.") from None
            raise Wrong(error_message(what, exc)) from None
        if is_blank(result):
            raise NotDone("accumulated_step still returns ____: replace it with your code.")
        changed = changes(loss_before, loss_fn)
        if changed:
            raise Wrong(f"{what} changed the loss function it was given ({changed}): every later use of loss_fn in "
                        "the notebook now computes something else. Scale each micro-batch's loss instead: "
                        "loss_fn(model(xb), yb) * len(xb) / len(X), and leave loss_fn as it is.")
        if not (X_in.shape == X.shape and torch.equal(X_in, X) and torch.equal(y_in, y)):
            raise Wrong(f"{what} changed X or y in place: split them (X.split(micro_batch)), do not modify them.")
        if not rows:
            if uses_blank(accumulated_step):
                raise NotDone("accumulated_step still uses ____: replace it with your code.")
            raise Wrong(f"{what}: the model was never called.")
        if max(rows) > micro:
            raise Wrong(f"{what}: the model saw {max(rows)} rows in one forward pass, more than micro_batch={micro}: "
                        "no memory is saved. Split X and y into micro-batches (X.split(micro_batch)) and run the "
                        "model on one at a time.")
        if sum(rows) != len(X):
            if sum(rows) < len(X):
                raise Wrong(f"{what}: the model saw {sum(rows)} of the {len(X)} rows (micro-batches of {rows}); "
                            "the last, shorter micro-batch is missing. X.split(micro_batch) keeps it.")
            raise Wrong(f"{what}: the model saw {sum(rows)} rows, but the batch has {len(X)}: every row once.")
        if len(rows) > math.ceil(len(X) / micro):
            shown = rows[:6] + (["…"] if len(rows) > 6 else [])
            raise Wrong(f"{what}: the model ran {len(rows)} times, on micro-batches of {shown} rows, but "
                        f"{math.ceil(len(X) / micro)} micro-batches of up to micro_batch={micro} rows cover the "
                        f"batch: more, smaller passes than needed, each slower on a GPU. X.chunk(n) cuts X into n "
                        "pieces; X.split(micro_batch) cuts it into pieces of micro_batch rows.")
        if not spy.steps:
            raise Wrong(f"{what} never called optimizer.step(): accumulate the gradients, then step once.")
        if len(spy.steps) > 1:
            raise Wrong(f"{what} called optimizer.step() {len(spy.steps)} times: that is {len(spy.steps)} small "
                        "steps, not one step on the whole batch. Step once, after the loop.")
        got = spy.steps[0]
        if all(g is None for g in got):
            raise Wrong(f"{what}: the parameters had no gradients at optimizer.step(): call loss.backward() "
                        "on every micro-batch's loss.")
        if all(g is not None and not bool(g.any()) for g in got):
            raise Wrong(f"{what}: every gradient was zero at optimizer.step(): each micro-batch's loss was multiplied "
                        "by 0. len(xb) // len(X) is 0 (integer division); its share is len(xb) / len(X).")
        if not _close_grads(got, full_grads):
            chunks = len(X.split(micro))
            diagnoses = [
                (dict(scale="none"), f"the gradients are the sum over the micro-batches, not the mean over the batch "
                 f"(about {chunks}× too large here): scale each micro-batch's loss by len(xb) / len(X)."),
                (dict(scale="count"), "with micro-batches of unequal size (the last one is shorter), dividing each "
                 "loss by the number of micro-batches weights the short one too much: scale by len(xb) / len(X)."),
                (dict(zero=False), "the gradients include what the previous step left in .grad: call "
                 "optimizer.zero_grad() once, BEFORE the loop (not inside it)."),
            ]
            for kwargs, message in diagnoses:
                alt, _ = _reference_step(make_model, loss_fn, X, y, micro, **kwargs)
                if _close_grads(got, alt):
                    raise Wrong(f"{what}: {message}")
            last_x, last_y = X.split(micro)[-1], y.split(micro)[-1]
            last_only, _ = _reference_step(make_model, loss_fn, last_x, last_y)
            share = len(last_x) / len(X)
            if _close_grads(got, last_only) or _close_grads(got, [g * share for g in last_only]):
                raise Wrong(f"{what}: only the last micro-batch's gradient reached optimizer.step(): zero_grad() "
                            "inside the loop throws the others away. Zero once, before the loop.")
            raise Wrong(f"{what}: the gradients at optimizer.step() differ from one step on the whole batch.")
        good_peak = _reference_peak(make_model, loss_fn, X, y, micro, keep_graphs=False)
        bad_peak = _reference_peak(make_model, loss_fn, X, y, micro, keep_graphs=True)
        if len(X.split(micro)) > 4 and peak > (good_peak + bad_peak) / 2:
            raise Wrong(f"{what}: the gradients are right, but every micro-batch's activations stayed in memory until "
                        f"the end (peak {_fmt(peak)}, against {_fmt(good_peak)} when each micro-batch is freed): you "
                        "kept the loss tensors (total += loss, or one backward() on their sum). Call backward() on "
                        "each micro-batch's loss inside the loop, and add up loss.detach() (no graph), turning the "
                        "sum into a float once, after the loop.")
        if result is None:
            raise Wrong(f"{what} returned None: did you forget `return total`?")
        if isinstance(result, torch.Tensor):
            raise Wrong(f"{what} returned {describe(result)}; return the batch's loss as a float: "
                        "float(total) (or total.item()) once, at the end.")
        value = as_number(f"the loss that {what} returned", result)
        if not math.isclose(value, full_loss, rel_tol=1e-4, abs_tol=1e-6):
            raise Wrong(f"{what} returned {value:.6g}, but the batch's mean loss is {full_loss:.6g}: "
                        + _q2_loss_mistake(value, make_model, loss_fn, X, y, micro))
    return ("the optimizer received the full batch's gradients (equal sizes, a shorter last micro-batch, one part "
            "only), the model never saw more than micro_batch rows, and only one micro-batch's activations were "
            "alive at a time.")


q2 = Exercise("ep06.q2", _check_accumulation,
              hint=("Which mean do you want: the mean of the micro-batch means, or the mean over all rows? How often "
                    "do you zero the gradients and step? And what, if you keep it, keeps a micro-batch's activations "
                    "alive?",
                    "Zero the gradients once, then for each micro-batch multiply its mean loss by its share of the "
                    "rows and call backward at once; step once after the loop. Add up the detached losses, and make "
                    "the sum a float only at the end."),
              solution=solution_link(NOTEBOOK))


# --- q3: choose how to fit a step in memory --------------------------------------------------

_CHOOSE_CASES = [
    ("15 GiB (about a T4): the plain step does not fit", 15 * GIB, {
        "batch 512": (17.2e9, 0.80, 512),
        "batch 512, checkpointing": (9.1e9, 1.05, 512),
        "batch 256 × 2, accumulation": (9.4e9, 0.92, 512),
        "batch 128": (5.1e9, 0.26, 128),
    }, "batch 256 × 2, accumulation"),
    ("8 GiB: checkpointing is the only way to keep 512 per step", 8 * GIB, {
        "batch 512": (17.2e9, 0.80, 512),
        "batch 512, checkpointing": (8 * GIB, 1.05, 512),
        "batch 256 × 2, accumulation": (9.4e9, 0.92, 512),
        "batch 64": (2.9e9, 0.30, 64),
    }, "batch 512, checkpointing"),
    ("40 GiB: everything fits", 40 * GIB, {
        "batch 512": (17.2e9, 0.80, 512),
        "batch 512, checkpointing": (9.1e9, 1.05, 512),
        "batch 256 × 2, accumulation": (9.4e9, 0.92, 512),
        "batch 512, autocast": (10.3e9, 0.55, 512),
    }, "batch 512, autocast"),
    ("2 GiB: nothing fits", 2 * GIB, {
        "batch 512": (17.2e9, 0.80, 512),
        "batch 512, checkpointing": (9.1e9, 1.05, 512),
    }, None),
    ("6 GiB: a smaller batch that is faster per step but slower per sample", 6 * GIB, {
        "batch 256, autocast": (5.9e9, 0.21, 256),
        "batch 64": (2.5e9, 0.09, 64),
        "batch 512, checkpointing, autocast": (6.5e9, 0.38, 512),
    }, "batch 256, autocast"),
    ("8 GiB: the smaller batch trains more samples per second than the larger one", 8 * GIB, {
        "batch 512, checkpointing": (7.9e9, 1.30, 512),
        "batch 128": (5.1e9, 0.20, 128),
    }, "batch 128"),
    # 4.2e9 bytes is 3.91 GiB: it fits in 4 GiB (4,294,967,296 bytes), though not in 4 GB
    ("4 GiB: an option of 4.2 GB fits, because 4 GiB is 4.29 GB", 4 * GIB, {
        "batch 256": (4.2e9, 0.50, 256),
        "batch 64": (1.5e9, 0.20, 64),
    }, "batch 256"),
]


def _q3_rule(options, budget, *, key, fits=lambda peak, budget: peak <= budget, best=max):
    chosen = {name: key(*value) for name, value in options.items() if fits(value[0], budget)}
    return best(chosen, key=chosen.get) if chosen else None


_Q3_DIAGNOSES = [   # the specific mistakes first: units before the comparison
    (lambda o, b: _q3_rule(o, b * 1e9 / GIB, key=lambda p, s, n: n / s),
     "you compared peaks in GB (÷ 10**9) with a budget in GiB (÷ 2**30), or the other way round: 4.2e9 bytes fit "
     "in 4 GiB = 4,294,967,296 bytes. Both are already in bytes: compare peak <= budget_bytes directly."),
    (lambda o, b: _q3_rule(o, b * GIB / 1e9, key=lambda p, s, n: n / s),
     "you compared peaks in GiB (÷ 2**30) with a budget in GB (÷ 10**9): both are already in bytes, compare "
     "peak <= budget_bytes directly."),
    (lambda o, b: _q3_rule(o, float("inf"), key=lambda p, s, n: n / s),
     "you chose the fastest option without checking that it fits: keep only options whose peak <= budget_bytes "
     "(budget_bytes is already in bytes: no factor 2**30)."),
    (lambda o, b: _q3_rule(o, b, key=lambda p, s, n: -p),
     "you chose the option that needs the least memory; among those that fit, choose the one that trains the "
     "most samples per second."),
    (lambda o, b: _q3_rule(o, b, key=lambda p, s, n: -s),
     "you compared seconds per step, but the options process different numbers of samples per step: compare "
     "samples per second, samples_per_step / seconds_per_step."),
    (lambda o, b: _q3_rule(o, b, key=lambda p, s, n: n / s, fits=lambda p, b: p < b),
     "an option whose peak equals the budget exactly still fits: use peak <= budget_bytes."),
    (lambda o, b: _q3_rule(o, b, key=lambda p, s, n: n),
     "you chose the largest batch per step that fits; choose the most samples per SECOND."),
    (lambda o, b: _q3_rule(o, b, key=lambda p, s, n: (n, -s)),
     "you kept the largest batch that fits and, among those, the fastest; a smaller batch can train more "
     "samples per second: compare samples_per_step / seconds_per_step over every option that fits."),
    (lambda o, b: _q3_rule(o, b, key=lambda p, s, n: p),
     "you chose the option that uses the most memory; choose the most samples per second among those that fit."),
    (lambda o, b: _q3_rule(o, b, key=lambda p, s, n: n / s, best=min),
     "you chose the slowest option that fits (min instead of max)."),
]


def _check_choose(choose):
    require_function(choose, "choose")
    answers = []
    for description, budget, options, expected in _CHOOSE_CASES:
        what = f"choose(options, {budget:,}) for {description}"
        given = copy.deepcopy(options)
        try:
            with answer_deadline(what):
                got = choose(given, budget)
        except (NotDone, Wrong):
            raise
        except ValueError as exc:
            if expected is None and ("empty" in str(exc) or "arg is an empty" in str(exc)):
                raise Wrong(f"{what} raised ValueError ({exc}): when no option fits, return None "
                            "(max() of nothing raises: check first, or use max(..., default=None)).") from None
            raise Wrong(error_message(what, exc)) from None
        except Exception as exc:
            if mentions_blank(exc):
                raise NotDone("choose still uses ____: replace it with your code.") from None
            raise Wrong(error_message(what, exc)) from None
        if is_blank(got):
            raise NotDone("choose still returns ____: replace it with your code.")
        changed = changes(snapshot(options), given)
        if changed:
            raise Wrong(f"{what} changed the options it was given ({changed}): the notebook's measurements are lost "
                        "for later cells. Read them, build your own dict or list if needed.")
        answers.append((description, budget, options, expected, got, what))
    for description, budget, options, expected, got, what in answers:
        if got is not None and not isinstance(got, str):
            names = ", ".join(repr(n) for n in options)
            raise Wrong(f"{what} returned {describe(got)}; return the NAME of the option (one of {names}), "
                        "or None if none fits.")
        if expected is None and got is not None:
            if got == "":
                raise Wrong(f"{what} returned an empty string; when no option fits, return None.")
        if got is not None and got not in options:
            raise Wrong(f"{what} returned {got!r}, which is not one of the options.")
    wrong = [a for a in answers if a[4] != a[3]]
    if not wrong:
        return (f"right on {len(answers)} sets of measurements: the most samples per second among the options "
                "that fit, None when none does.")
    for rule, message in _Q3_DIAGNOSES:
        if all(a[4] == rule(a[2], a[1]) for a in answers):
            raise Wrong(message)
    description, budget, options, expected, got, what = wrong[0]
    if all(a[4] is None for a in answers):
        raise Wrong(f"choose returned None for every set of measurements, but options fit: for {description}, "
                    f"{expected!r} needs {options[expected][0]:,.0f} bytes of {budget:,}. budget_bytes is "
                    "already in bytes, as the peaks are: compare them directly (no division by 2**30).")
    if got is None:
        raise Wrong(f"{what} returned None, but {expected!r} fits (peak {options[expected][0]:,.0f} <= "
                    f"{budget:,} bytes): return None only when no option fits.")
    if expected is None:
        raise Wrong(f"{what} returned {got!r}, but no option fits in the budget (every peak is above "
                    f"{budget:,} bytes): return None.")
    if options[got][0] > budget:
        raise Wrong(f"{what} returned {got!r}, whose peak {options[got][0]:,.0f} bytes is above the budget.")
    right = sum(1 for a in answers if a[4] == a[3])
    rate = lambda name: options[name][2] / options[name][1]   # noqa: E731
    raise Wrong(f"{what} returned {got!r} ({rate(got):,.0f} samples/s), but {expected!r} fits and trains "
                f"{rate(expected):,.0f} samples/s (right on {right} of {len(answers)} cases).")


q3 = Exercise("ep06.q3", _check_choose,
              hint=("Which options are allowed at all? Among those, what should you compare: time per step, or "
                    "something that does not depend on how many samples a step takes? And what comes back when "
                    "nothing is allowed?",
                    "Keep the options whose peak is at most the budget (both are in bytes). For each, divide the "
                    "samples per step by the seconds per step; the answer is the name with the highest rate, or None "
                    "when no option is left."),
              solution=solution_link(NOTEBOOK))

__all__ = ["q1", "q2", "q3", "SimulatedGPU"]
