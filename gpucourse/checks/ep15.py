"""Checks for episode 15, "Serving a model to many users".

``q1`` decode steps under continuous (iteration-level) batching.
``q2`` a paged KV cache with prefix sharing: reference counts, cached pages reused least recently
freed first, eviction that never takes a page a table holds.
``q3`` prompt tokens served from the prefix cache for a stream of requests.
``q4`` p99 TTFT, p99 TPOT and goodput from a trace, with ``vllm bench serve``'s definitions.
``q5`` how many users a cache holds, and the arrival rate that keeps them all busy (Little's law).

Every numeric answer is recomputed on cases of the check's own whose answers differ, and a wrong
one is named by recomputing what each known mistake gives (``checks.diagnosis`` through episode
10's ``_judge``). q2 drives the learner's class through a script of admissions and frees and
checks the cache's invariants after every step, so that the message names the step and the
invariant that broke.
"""

from __future__ import annotations

import copy
import heapq
import math
from collections import OrderedDict

from ..exercises import (SMALL_CASE_DEADLINE_S, Exercise, NotDone, Wrong, answer_deadline, as_number, call_answer,
                         describe, mentions_blank, require_function, solution_link)
from .diagnosis import best_fit
from .ep10 import _judge

NOTEBOOK = "15-serving.ipynb"

#: Seconds one call of the learner's code may take (not the course's 60 s default): every case is a
#: few requests or pages.
DEADLINE_S = SMALL_CASE_DEADLINE_S


# --- q1: decode steps under continuous batching ---------------------------------------------------

def _continuous(lengths, batch, *, order=None, gap=0, extra=0):
    """Steps until every request is done: each of ``batch`` slots takes the next waiting request
    the step after its last one ends (``gap`` idle steps between them; ``extra`` steps each)."""
    lengths = list(lengths) if order is None else sorted(lengths, reverse=(order == "longest"))
    if not lengths:
        return 0
    slots = [0] * min(batch, len(lengths))
    started = 0
    for length in lengths:
        free_at = heapq.heappop(slots)
        begin = free_at + (gap if started >= batch else 0)
        heapq.heappush(slots, begin + length + extra)
        started += 1
    return max(slots)


def _static(lengths, batch):
    return sum(max(lengths[i:i + batch]) for i in range(0, len(lengths), batch))


def _slot_ends(lengths, batch, *, first_static=False):
    """The step at which each slot frees, in the order the slots were last given a request, and the
    end of the request given last (the right count is the latest of the slots)."""
    start = max(lengths[:batch]) if first_static else 0
    slots = [start] * min(batch, len(lengths))
    last = 0
    for length in lengths[batch:] if first_static else lengths:
        last = heapq.heappop(slots) + length
        heapq.heappush(slots, last)
    return slots, last


def _one_join_per_step(lengths, batch):
    """Steps when at most one waiting request joins per step (after the first step's full batch)."""
    waiting, running, steps = list(lengths), [], 0
    while waiting or running:
        joined = 0
        while waiting and len(running) < batch and (steps == 0 or joined == 0):
            running.append(waiting.pop(0))
            joined += 1
        steps += 1
        running = [r - 1 for r in running if r > 1]
    return steps


Q1_CASES = [([12, 3, 7, 30, 5, 9, 4, 20], 4), ([5, 1, 1, 1, 6, 2], 2), ([8, 8, 8], 5),
            ([2, 9, 4, 4, 3, 7, 1], 3), ([10], 1), ([1, 2, 3, 4, 5, 6, 7, 8, 9], 3),
            ([6, 6, 6, 6], 2)]


def _q1_mistakes(case) -> dict:
    lengths, batch = case
    total = sum(lengths)
    return {
        "that is static batching: each group of `batch` requests runs until its longest ends. In continuous "
        "batching a slot takes the next waiting request as soon as its own request ends.": _static(lengths, batch),
        "you sorted the requests longest first; they are served in the order they arrive.":
            _continuous(lengths, batch, order="longest"),
        "you sorted the requests shortest first; they are served in the order they arrive.":
            _continuous(lengths, batch, order="shortest"),
        "that is the ideal total / batch, as if tokens could move between slots; a request's tokens all come "
        "from one slot, one per step, so the count is found by following the slots.": total / batch,
        "that is ⌈total / batch⌉, a lower bound; follow the slots: a request's tokens all come from one slot, "
        "one per step.": math.ceil(total / batch),
        "that is the longest request alone; the slots are shared, so later requests wait for a free slot.":
            max(lengths),
        "that is one request at a time (the sum of the lengths); `batch` requests run at once.": total,
        "a waiting request joins the step after a slot frees, not one step later: there is no idle step "
        "between two requests in a slot.": _continuous(lengths, batch, gap=1),
        "you counted one extra step per request (a prefill); here each request needs exactly its length in "
        "steps.": _continuous(lengths, batch, extra=1),
        "your count is one step short: the last request ends at the end of its last step.":
            _continuous(lengths, batch) - 1,
        "you gave the requests to the slots in turn (request i to slot i mod batch); a waiting request takes "
        "whichever slot frees first.": max(sum(lengths[i::batch]) for i in range(min(batch, len(lengths)))),
        "you started a waiting request in the step its slot's last request ended; that step's token went to "
        "the old request, so the new one starts the step after.": _continuous(lengths, batch, gap=-1),
        "you let at most one waiting request join per step; every slot freed at the end of a step takes a "
        "waiting request at the next.": _one_join_per_step(lengths, batch),
        "you waited for the whole first group to end before refilling any slot; a slot takes the next "
        "request as soon as its own request ends, from the first group on.":
            max(_slot_ends(lengths, batch, first_static=True)[0]),
        "you returned the end of the request that started last; an earlier, longer one can still be "
        "running: the count is the step at which the last slot frees (the latest).": _slot_ends(lengths, batch)[1],
        "you returned the step at which the first slot frees (the earliest); the count is when the last "
        "slot frees (the latest).": min(_slot_ends(lengths, batch)[0]),
        "you averaged the slots' end steps (total tokens / slots); the count is when the last slot frees "
        "(the latest).": round(total / min(batch, len(lengths))),
    }


def _check_continuous(continuous_steps):
    require_function(continuous_steps, "continuous_steps")
    results = []
    for lengths, batch in Q1_CASES:
        what = f"continuous_steps({lengths}, {batch})"
        got = as_number(what, call_answer(continuous_steps, list(lengths), batch, what=what,
                                          seconds=DEADLINE_S))
        results.append(((lengths, batch), got, _continuous(lengths, batch)))
    _judge(results, _q1_mistakes, lambda c: f"continuous_steps({c[0]}, {c[1]})", "steps", whole=True)
    lengths, batch = Q1_CASES[0]
    return (f"right on {len(results)} cases. For the episode's eight requests, 4 at a time: "
            f"{_continuous(lengths, batch)} steps against static batching's {_static(lengths, batch)}, "
            f"with {sum(lengths)} tokens to make.")


q1 = Exercise("ep15.q1", _check_continuous,
              hint=("When a request ends at the end of step t, when does the next waiting one start, and in "
                    "which slot?",
                    "Keep, for each of the `batch` slots, the step at which it becomes free (all 0 at the "
                    "start). Take the requests in order; give each the slot that frees first, and move that "
                    "slot's free step on by the request's length. The answer is the latest free step."),
              solution=solution_link(NOTEBOOK))


# --- q2: a paged KV cache with prefix sharing ------------------------------------------------------

def page_hash(parent, tokens):
    """The hash of a full page: its tokens and the hash of the page before it (None for the first)."""
    return hash((parent, tuple(tokens)))


class _Reference:
    """The right cache, to compare with after every step."""

    def __init__(self, num_pages, page_size):
        from collections import deque
        self.page_size = page_size
        self.unused = deque(range(num_pages))
        self.cached = OrderedDict()
        self.by_hash = {}
        self.refs = [0] * num_pages
        self.tables = {}

    def plan(self, prompt):
        """(hashes of the full pages, pages found, pages still needed, pages that can be had)."""
        size = self.page_size
        hashes, parent = [], None
        for i in range(len(prompt) // size):
            parent = page_hash(parent, prompt[i * size:(i + 1) * size])
            hashes.append(parent)
        found = []
        for h in hashes:
            if h not in self.by_hash:
                break
            found.append(self.by_hash[h])
        need = -(-len(prompt) // size) - len(found)
        available = len(self.unused) + sum(1 for p in self.cached if p not in found)
        return hashes, found, need, available

    def admit(self, seq, prompt):
        size = self.page_size
        full = len(prompt) // size
        hashes, found, need, available = self.plan(prompt)
        if need > available:
            raise MemoryError(f"{seq} needs {need} pages, {available} can be had")
        table = []
        for page in found:
            self.cached.pop(page, None)
            self.refs[page] += 1
            table.append(page)
        for i in range(len(found), len(found) + need):
            if self.unused:
                page = self.unused.popleft()
            else:
                page, old = self.cached.popitem(last=False)
                del self.by_hash[old]
            self.refs[page] += 1
            table.append(page)
            if i < full:
                self.by_hash[hashes[i]] = page
        self.tables[seq] = table
        return len(found) * size

    def free(self, seq):
        table = self.tables.pop(seq)
        page_of = {p: h for h, p in self.by_hash.items()}
        for page in reversed(table):
            self.refs[page] -= 1
            if self.refs[page] == 0:
                if page in page_of:
                    self.cached[page] = page_of[page]
                else:
                    self.unused.append(page)


def _prompts():
    """Prompts over 4-token pages: a system prompt of 10 tokens shared by three users, another one."""
    system = list(range(100, 110))
    return {"a": system + [1, 2, 3], "b": system + [4, 5, 6, 7, 8], "c": system + [9],
            "d": list(range(200, 224)), "e": system[:8] + [7, 7, 7, 7, 7],
            "g": system + [1, 2, 3],                                   # a again
            "h": list(range(200, 208)) + [9] * 12,     # finds 2 cached pages, needs 3 more
            "k": list(range(100, 104)) + list(range(204, 208)) + [5],  # d's tokens, other parent
            "m": list(range(400, 404))}                # one page while the oldest hashes are held


# The script: (operation, sequence, what it tests). 10 pages of 4 tokens.
Q2_SCRIPT = [("admit", "a", "a first prompt: nothing cached yet"),
             ("admit", "b", "a second prompt sharing the first two pages of the system prompt"),
             ("free", "a", "freeing a: its full pages stay cached, a page b holds stays in use"),
             ("admit", "c", "a third prompt sharing the system prompt while a's pages are cached"),
             ("free", "b", "freeing b"),
             ("free", "c", "freeing c"),
             ("admit", "d", "an unrelated prompt that takes the last unused pages"),
             ("admit", "e", "a prompt sharing two cached pages, whose other pages must be evicted from cached"),
             ("admit", "f", "a prompt larger than every page that is not in use"),
             ("free", "d", "freeing d"),
             ("admit", "m", "a one-page prompt while the pages hashed first are held by e"),
             ("admit", "g", "a's prompt again, after its third page was evicted and reused"),
             ("admit", "h", "a prompt that finds two cached pages but needs more than the rest of cached"),
             ("admit", "k", "a prompt whose second page has d's tokens after a different first page"),
             ("free", "d", "freeing d twice")]


def _state(cache, num_pages) -> tuple[dict, list, list, list, dict]:
    """The attributes the prompt names, read without trusting their types."""
    missing = [name for name in ("tables", "refs", "unused", "cached", "by_hash") if not hasattr(cache, name)]
    if missing:
        raise Wrong(f"your cache has no attribute {', '.join(missing)}: keep the names of the stub "
                    "(tables, refs, unused, cached, by_hash); the check reads them.")
    try:
        tables = {seq: list(pages) for seq, pages in dict(cache.tables).items()}
        refs, unused = list(cache.refs), list(cache.unused)
        cached, by_hash = list(cache.cached), dict(cache.by_hash)
    except (TypeError, ValueError) as exc:
        raise Wrong(f"reading your cache's attributes raised {type(exc).__name__}: {exc}; tables is a dict "
                    "of lists, refs a list, unused a deque or list, cached an OrderedDict, by_hash a dict.") \
            from None
    if len(refs) != num_pages:
        raise Wrong(f"refs has {len(refs)} entries for {num_pages} pages: one count per page.")
    return tables, refs, unused, cached, by_hash


def _invariants(cache, num_pages, step) -> None:
    tables, refs, unused, cached, by_hash = _state(cache, num_pages)
    odd = [k for k in cached if not (isinstance(k, int) and 0 <= k < num_pages)]
    if odd:
        hint = (" (it is one of by_hash's keys: a hash)" if odd[0] in by_hash else "")
        raise Wrong(f"after {step}, cached holds {odd[0]!r}{hint}, not a page number: cached is keyed by "
                    "page (cached[page] = its hash), in the order the pages were freed, so that the least "
                    "recently freed page is the first to evict.")
    held = [p for pages in tables.values() for p in pages]
    for name, pages in (("unused", unused), ("cached", cached)):
        if len(set(pages)) != len(pages):
            double = next(p for p in pages if pages.count(p) > 1)
            raise Wrong(f"after {step}, page {double} is in {name} twice: a page was given back twice "
                        "(a double free); give a page back only when its count falls to 0.")
    for page in range(num_pages):
        holders = held.count(page)
        if refs[page] != holders:
            raise Wrong(f"after {step}, refs[{page}] is {refs[page]} but {holders} table(s) hold page {page}: "
                        "every table that takes a page (new or shared) adds 1, every free takes 1 away.")
    for name, pages in (("unused", unused), ("cached", cached)):
        taken = [p for p in pages if p in held]
        if taken:
            raise Wrong(f"after {step}, page {taken[0]} is in {name} while a table holds it: a page a "
                        "sequence uses is neither free nor cached until its count falls to 0.")
    both = set(unused) & set(cached)
    if both:
        raise Wrong(f"after {step}, page {min(both)} is in both unused and cached.")
    accounted = len(set(held)) + len(unused) + len(cached)
    if accounted != num_pages:
        lost = sorted(set(range(num_pages)) - set(held) - set(unused) - set(cached))
        raise Wrong(f"after {step}, used + unused + cached = {accounted} pages of {num_pages}"
                    + (f": page {lost[0]} is in none of them (a page was lost, not given back)." if lost
                       else "."))
    pages = list(by_hash.values())
    twice = [p for p in pages if pages.count(p) > 1]
    if twice:
        raise Wrong(f"after {step}, by_hash has {pages.count(twice[0])} hashes for page {twice[0]}: a page "
                    "evicted from cached keeps its old hash in by_hash, so a later prompt that begins like "
                    "the page's old contents would be given its new ones; when you evict a page, forget its "
                    "hash (del by_hash[old]).")
    stale = [p for p in by_hash.values() if p in unused]
    if stale:
        raise Wrong(f"after {step}, page {stale[0]} is unused but by_hash still points to it: when a cached "
                    "page is evicted (or a page without a full prompt page is freed), forget its hash.")


def _compare(cache, ref, num_pages, step) -> None:
    tables, refs, unused, cached, by_hash = _state(cache, num_pages)
    for seq, expected in ref.tables.items():
        got = tables.get(seq)
        if got is None:
            raise Wrong(f"after {step}, your cache has no table for {seq!r}.")
        if len(got) != len(expected):
            raise Wrong(f"after {step}, {seq!r} holds {len(got)} pages; its prompt needs {len(expected)} "
                        f"pages of {ref.page_size} tokens (a partial last page counts as a page).")
        if got != expected:
            shared = [p for p in expected if any(p in t for s, t in ref.tables.items() if s != seq)
                      or p in ref.cached]
            if shared and not any(p in got for p in shared):
                raise Wrong(f"after {step}, {seq!r} got new pages {got} where pages {expected} could be "
                            "shared: look each full page's hash up in by_hash, in order, and take the page "
                            "it names while they match.")
            raise Wrong(f"after {step}, {seq!r} holds pages {got}; expected {expected}: new pages come "
                        "from unused first (from its front), then from cached, least recently freed first.")
    extra = set(tables) - set(ref.tables)
    if extra:
        raise Wrong(f"after {step}, your cache still has a table for {sorted(extra)[0]!r}: free removes it.")
    if cached != list(ref.cached):
        if sorted(cached) == sorted(ref.cached):
            raise Wrong(f"after {step}, cached holds the right pages in the wrong order ({cached}; expected "
                        f"{list(ref.cached)}): free puts a sequence's pages at the end, from its last page "
                        "to its first, so that a prefix's tail is evicted before its head.")
        raise Wrong(f"after {step}, cached is {cached}; expected {list(ref.cached)}: a page whose count falls "
                    "to 0 goes to cached if it is a full prompt page (it has a hash), else to unused.")
    if sorted(unused) != sorted(ref.unused):
        raise Wrong(f"after {step}, unused is {sorted(unused)}; expected {sorted(ref.unused)}.")
    if unused != list(ref.unused):
        raise Wrong(f"after {step}, unused holds the right pages in the wrong order ({unused}; expected "
                    f"{list(ref.unused)}): new pages come from its front, and free puts a page without a hash "
                    "at its end.")
    hashed, expected = sorted(by_hash.values()), sorted(ref.by_hash.values())
    if hashed != expected:
        owner = {p: (s, i) for s, t in ref.tables.items() for i, p in enumerate(t)}
        missing = [p for p in expected if p not in hashed]
        if missing:
            raise Wrong(f"after {step}, page {missing[0]} is a full page of a prompt, but by_hash has no hash "
                        "for it: record the hash of each new full page in by_hash, so that a later prompt "
                        "can find it.")
        extra = [p for p in hashed if p not in expected][0]
        if extra in owner:
            seq, i = owner[extra]
            raise Wrong(f"after {step}, by_hash has a hash for page {extra}, the partial last page of {seq!r} "
                        "(tokens still to come would change it): hash only full pages, len(prompt) // "
                        "page_size of them.")
        raise Wrong(f"after {step}, by_hash has a hash for page {extra}, which holds no full prompt page.")


def _make(cls, num_pages, page_size):
    what = f"{getattr(cls, '__name__', 'your class')}({num_pages}, {page_size})"
    return call_answer(cls, num_pages, page_size, what=what, seconds=DEADLINE_S)


def _overcounted(ref, seq, plan) -> str:
    """Why an admission that must be refused was not: the found pages counted as evictable too."""
    _, found, need, available = plan
    own = [p for p in found if p in ref.cached]
    if own and need <= available + len(own):
        return (f"{seq!r} needs {need} new pages and only {available} can be had: you counted the pages it "
                f"found in cached ({', '.join(map(str, own))}) as pages to evict too, but it takes those "
                "itself; count unused plus the cached pages it does not find.")
    return ""


def _refused(ref, seq, plan, step, probe=None):
    """A message for a MemoryError raised where the reference admits the prompt. ``probe``: a copy of
    the learner's cache from before the call, asked for fewer pages than can be had but more than are
    unused, when refusing at equality and refusing to evict would both explain the refusal."""
    _, found, need, available = plan
    head = f"at {step}, admit raised MemoryError, but {seq!r} needs {need} new pages and {available} can be had"
    at_limit, unused_only = need == available, need > len(ref.unused)
    if at_limit and unused_only:                 # both would refuse here: ask the copy for one page less
        at_limit = unused_only = False
        if probe is not None and len(ref.unused) < need - 1:
            try:
                with answer_deadline("admit(...)", DEADLINE_S):
                    probe.admit("probe", list(range(10**6, 10**6 + (need - 1) * ref.page_size)))
                at_limit = True
            except MemoryError:
                unused_only = True
            except Exception:
                pass
    if at_limit:
        return (f"{head} ({len(ref.unused)} unused, {available - len(ref.unused)} cached it does not share): "
                "refuse only when it needs more than can be had (>, not >=).")
    if unused_only:
        return (f"{head}: only {len(ref.unused)} are unused, but the cached pages it does not share can be "
                "evicted (least recently freed first); count them as available too.")
    return f"{head}."


def _unchained(cache_hashes, prompt, size) -> int:
    """Prompt tokens found when each page is hashed by its own tokens (no parent)."""
    found = 0
    for i in range(len(prompt) // size):
        if page_hash(None, prompt[i * size:(i + 1) * size]) not in cache_hashes:
            break
        found += size
    return found


def _run_step(cache, ref, op, seq, prompts, step):
    if op == "admit":
        prompt = prompts[seq]
        plan = ref.plan(list(prompt))
        probe = None
        if plan[2] == plan[3] > len(ref.unused):
            try:
                probe = copy.deepcopy(cache)
            except Exception:
                probe = None
        held_before = {p: s for s, t in _state(cache, len(ref.refs))[0].items() for p in t}
        try:
            expected = ref.admit(seq, list(prompt))
        except MemoryError:
            before = _state(cache, len(ref.refs))
            try:
                with answer_deadline(f"admit({seq!r}, ...)", DEADLINE_S):
                    cache.admit(seq, list(prompt))
            except MemoryError:
                if _state(cache, len(ref.refs)) != before:
                    raise Wrong(f"after {step}, admit raised MemoryError but changed the cache first: count "
                                "the pages it needs before taking any, so a refused request leaves no trace.")
                return
            except (NotDone, Wrong):
                raise
            except Exception as exc:
                if mentions_blank(exc):
                    raise NotDone("admit still uses ____: replace it with your code.") from None
                why = _overcounted(ref, seq, plan)
                raise Wrong(f"at {step}, admit should raise MemoryError (too few pages even after evicting "
                            f"every cached one); it raised {type(exc).__name__}: {exc}"
                            + (f". {why}" if why else ".")) from None
            why = _overcounted(ref, seq, plan)
            raise Wrong(f"at {step}, admit succeeded, but the prompt needs more pages than unused and cached "
                        "hold together: raise MemoryError (pages a table holds are never evicted)"
                        + (f". {why}" if why else "."))
        got = call_answer(cache.admit, seq, list(prompt), what=f"admit({seq!r}, {prompt})",
                          explain=lambda exc: _refused(ref, seq, plan, step, probe) if isinstance(exc, MemoryError)
                          else None, seconds=DEADLINE_S)
        got = as_number(f"admit({seq!r}, ...)", got)
        table = _state(cache, len(ref.refs))[0].get(seq, [])
        new = table[len(plan[1]):] if got == expected else []     # pages it took besides those it found
        for page in new:
            if page in held_before or table.count(page) > 1:
                holder = f"{held_before[page]!r} holds" if page in held_before else f"{seq!r} had just taken"
                raise Wrong(f"at {step}, admit gave {seq!r} page {page} as a new page, but {holder} it: a page "
                            "a table holds is never evicted; evict only from cached (pages no table holds), "
                            "least recently freed first.")
        if got != expected:
            if expected and got == expected // ref.page_size:
                raise Wrong(f"at {step}, admit returned {got:g}, the pages found; return the prompt tokens "
                            f"found, pages × page_size = {expected}.")
            by_hash = _state(cache, len(ref.refs))[4]
            if got == _unchained(by_hash, prompt, ref.page_size) != expected:
                raise Wrong(f"at {step}, admit returned {got:g}; {expected} prompt tokens were in the cache: "
                            "you hashed each page by its own tokens (page_hash(None, tokens)), so a page with "
                            "the same tokens after a different first page matched; chain them: "
                            "page_hash(the previous page's hash, tokens).")
            raise Wrong(f"at {step}, admit returned {got:g}; {expected} prompt tokens were in the cache "
                        "already (full pages whose hash chain matches, in order).")
    else:
        table = list(ref.tables.get(seq, []))
        hashed = set(ref.by_hash.values())
        try:
            ref.free(seq)
        except KeyError:
            try:
                with answer_deadline(f"free({seq!r})", DEADLINE_S):
                    cache.free(seq)
            except KeyError:
                return
            except Exception as exc:
                if mentions_blank(exc):
                    raise NotDone("free still uses ____: replace it with your code.") from None
                raise Wrong(f"at {step}, free should raise KeyError (that sequence holds nothing); "
                            f"it raised {type(exc).__name__}: {exc}.") from None
            raise Wrong(f"at {step}, free did nothing and raised nothing: freeing a sequence that holds no "
                        "pages must raise KeyError, or a bug that frees twice goes unseen (a double free).")

        def explain(exc):
            key = exc.args[0] if isinstance(exc, KeyError) and exc.args else None
            if isinstance(key, int) and key in table and key not in hashed:
                return (f"at {step}, free({seq!r}) raised KeyError: {key}; page {key} is {seq!r}'s partial last "
                        "page, which has no hash: a page without a hash goes to the end of unused, not to "
                        "cached.")
            return None
        call_answer(cache.free, seq, what=f"free({seq!r})", none_ok=True, explain=explain, seconds=DEADLINE_S)
        if seq in _state(cache, len(ref.refs))[0]:
            raise Wrong(f"after {step}, your cache still has a table for {seq!r}: free removes it (pop it from "
                        "tables), or a second free of the same sequence would free its pages again.")


def _check_cache(cls):
    require_function(cls, "PrefixPagedCache")
    num_pages, page_size = 10, 4
    cache = _make(cls, num_pages, page_size)
    ref = _Reference(num_pages, page_size)
    prompts = dict(_prompts(), f=list(range(300, 300 + 4 * 11)))
    _invariants(cache, num_pages, "creating the cache")
    for number, (op, seq, what) in enumerate(Q2_SCRIPT, 1):
        step = f"step {number} ({op} {seq!r}: {what})"
        _run_step(cache, ref, op, seq, prompts, step)
        _invariants(cache, num_pages, step)
        _compare(cache, ref, num_pages, step)
    return (f"right through {len(Q2_SCRIPT)} steps: shared pages counted, cached pages reused and evicted "
            "least recently freed first, a request too big refused without a trace, a double free caught. "
            "That is the core of vLLM's block manager; transformers' BlockManager (5.15) shares pages the same "
            "way but evicts the most recently freed cached page first.")


q2 = Exercise("ep15.q2", _check_cache,
              hint=("Which pages of a new prompt can come from the cache, and in which state can a page be: "
                    "held by tables, cached (no table, contents kept), or unused?",
                    "In admit, hash the prompt's full pages in a chain and take pages from by_hash while they "
                    "match (adding 1 to their count, out of cached); count the rest it needs and raise "
                    "MemoryError before changing anything if unused plus cached cannot give them; then take "
                    "them from unused, else evict the first of cached (forget its hash). In free, walk the "
                    "table from its end: count - 1, and at 0 the page goes to cached if it has a hash, else "
                    "to unused."),
              solution=solution_link(NOTEBOOK))


# --- q3: prompt tokens served from the prefix cache -----------------------------------------------

def _hits(prompts, page_size, *, chain=True, stop=True, pages="full", tokenwise=False, first=False,
          against_first=False, against_previous=False, add_first=False, cap_last=False):
    """Prompt tokens found in the cache; the keywords are the mistakes: ``pages`` "partial" (a partial
    last page, counted by its tokens), "partial as full", "one more" (range(len // size + 1)), "one less"."""
    seen, total, previous = set(), 0, set()
    for n, prompt in enumerate(prompts):
        if tokenwise:
            total += max([_common(prompt, other) for other in prompts[:n]], default=0)
            continue
        count = {"full": len(prompt) // page_size, "one more": len(prompt) // page_size + 1,
                 "one less": len(prompt) // page_size - 1}.get(pages, -(-len(prompt) // page_size))
        keys, parent = [], None
        for i in range(max(count, 0)):
            tokens = tuple(prompt[i * page_size:(i + 1) * page_size])
            parent = hash((parent, tokens)) if chain else tokens
            keys.append((parent, page_size if pages != "partial" else len(tokens)))
        if add_first:
            seen.update(k for k, _ in keys)
        lookup = previous if against_previous else seen
        found, pages_found = 0, 0
        for key, size in keys:
            if key in lookup:
                found, pages_found = found + size, pages_found + 1
            elif stop:
                break
        if cap_last:
            found = min(pages_found, (len(prompt) - 1) // page_size) * page_size
        if n > 0 or first:
            total += found
        if not against_first or n == 0:
            seen.update(k for k, _ in keys)
        previous = {k for k, _ in keys}
    return total


def _common(a, b) -> int:
    """The length of the longest common prefix of two token lists."""
    k = 0
    while k < min(len(a), len(b)) and a[k] == b[k]:
        k += 1
    return k


def _q3_cases():
    system = list(range(1000, 1013))                 # 13 tokens: 3 full pages of 4, 1 over
    aligned = list(range(2000, 2016))                # 16 tokens: exactly 4 pages
    return [
        ([system + [1, 2], system + [3, 4, 5], system + [6], system + [7, 8, 9, 10]], 4),
        ([aligned + [1], aligned + [2, 3], aligned], 4),
        ([[5, 6, 7, 8, 1, 2, 3, 4], [9, 9, 9, 9, 1, 2, 3, 4], [5, 6, 7, 8, 1, 2, 3, 4, 0]], 4),
        ([system + [1], list(range(3000, 3010)), system + [2], list(range(3000, 3010)) + [5]], 4),
        ([list(range(50)), list(range(50)) + [1], list(range(40)) + [7] * 9], 16),
        ([[1, 2, 3], [1, 2, 3], [1, 2, 3, 4]], 4),
        ([[5, 6, 7, 8, 1, 1, 1, 1], [9, 9, 9, 9, 2, 2, 2, 2], [5, 6, 7, 8, 2, 2, 2, 2]], 4),
        ([list(range(8)), list(range(8)), list(range(8)) + [9]], 4),   # ends on a page boundary
    ]


def _q3_mistakes(case) -> dict:
    prompts, size = case
    common = min((_common(prompts[0], p) for p in prompts[1:]), default=0)
    return {
        "you counted pages by their tokens alone; a page's hash also covers the page before it (the chain), "
        "so the same tokens after a different beginning are not a hit: attention at those positions saw "
        "other tokens.": _hits(prompts, size, chain=False),
        "you counted partial pages too; only full pages are cached and shared (a partial page is still being "
        "written).": _hits(prompts, size, pages="partial"),
        "you counted a matching partial last page as a whole page; only full pages are cached and shared (a "
        "partial page is still being written).": _hits(prompts, size, pages="partial as full"),
        "you hashed one page more than the prompt's full pages (len // page_size + 1): a partial page, or an "
        "empty one when the prompt ends on a page boundary, was counted as a hit; only full pages count.":
            _hits(prompts, size, pages="one more"),
        "you left each prompt's last full page out (len // page_size - 1 pages); every full page is cached and "
        "can be a hit.": _hits(prompts, size, pages="one less"),
        "you counted the longest common prefix in tokens; the cache shares whole pages, so round each match "
        "down to full pages.": _hits(prompts, size, tokenwise=True),
        "only the first prompt's pages were ever in your cache (each prompt compared with the first, or a "
        "later prompt's new pages never added); every earlier prompt's full pages are in the cache.":
            _hits(prompts, size, against_first=True),
        "you compared each prompt only with the one just before it; every earlier prompt's pages are in the "
        "cache.": _hits(prompts, size, against_previous=True),
        "you added the prompt's own pages to the cache before looking them up, so every full page was found; "
        "look them up first, then add them.": _hits(prompts, size, add_first=True, first=True),
        "that is a fraction of the prompt tokens (a hit rate); return the number of prompt tokens found.":
            _hits(prompts, size) / sum(len(p) for p in prompts),
        "you counted pages, not tokens: each page found gives page_size tokens.":
            _hits(prompts, size) // size,
        "you counted a page once for every earlier prompt that shares it; the cache holds it once, so a page "
        "found is page_size tokens however many prompts had it.":
            sum(_common(p, q) // size * size for n, p in enumerate(prompts) for q in prompts[:n]),
        "you applied the episode's (n − 1)·⌊P/S⌋·S with P the prefix every prompt shares; here prompts share "
        "different prefixes with different earlier prompts: count each prompt's pages found in the cache.":
            (len(prompts) - 1) * (common // size) * size,
        "you kept the last prompt token out of the hits, as vLLM does (it recomputes it to get logits); the "
        "exercise counts every full page found, as transformers' counter does.": _hits(prompts, size, cap_last=True),
        "you counted every page whose hash is in the cache, also after a page that missed; and you hashed "
        "pages by their tokens alone: a page's hash covers the page before it, so after a miss nothing can "
        "match.": _hits(prompts, size, chain=False, stop=False),
    }


def _unhashable(exc):
    if isinstance(exc, TypeError) and "unhashable" in str(exc):
        return (f"prefix_hits raised TypeError: {exc}: a list cannot be a key of a set or dict, nor be "
                "hashed; hash a page with page_hash(parent, tokens), which makes a tuple of its tokens.")
    return None


def _check_hits(prefix_hits):
    require_function(prefix_hits, "prefix_hits")
    results = []
    for prompts, size in _q3_cases():
        what = f"prefix_hits(<{len(prompts)} prompts>, {size})"
        copies = [list(p) for p in prompts]
        got = as_number(what, call_answer(prefix_hits, copies, size, what=what, explain=_unhashable,
                                                      seconds=DEADLINE_S))
        if copies != [list(p) for p in prompts]:
            raise Wrong(f"{what} changed the prompts it was given; read them, do not modify them.")
        results.append(((prompts, size), got, _hits(prompts, size)))
    _judge(results, _q3_mistakes, lambda c: f"prefix_hits(<{len(c[0])} prompts>, {c[1]})", "tokens",
           whole=True)
    return (f"right on {len(results)} cases. n requests sharing a P-token prefix reuse (n - 1)·⌊P/S⌋·S tokens: "
            "what transformers' cache counted in the episode, and what vLLM counts on its /metrics.")


q3 = Exercise("ep15.q3", _check_hits,
              hint=("Which pages of a prompt can the cache have seen before, and what makes two pages the same "
                    "for the cache?",
                    "Keep a set of the hashes seen. For each prompt in order, walk its full pages, hashing each "
                    "with the hash of the page before it; while the hash is in the set, add page_size to the "
                    "hits; after the first miss, stop counting. Then add all the prompt's page hashes to the "
                    "set."),
              solution=solution_link(NOTEBOOK))


# --- q4: p99 TTFT, p99 TPOT and goodput from a trace ----------------------------------------------

def _percentile(values, q, method="linear"):
    import numpy as np
    return float(np.percentile(values, q, method=method)) if values else math.nan


def _report(records, slo_ttft, slo_tpot, duration, *, tpot_one=0.0, strict=(), with_failed=False,
            failed_latency=False, tpot_rule="spread", method="linear", quantile=99, stat="percentile",
            ttft_rule="first", one_in_pct=False, itl=False, either=False, scale=1.0, rate="duration"):
    """(p99 TTFT, p99 TPOT, goodput); the keywords are the mistakes. ``strict``: the SLOs ("ttft",
    "tpot") compared with < instead of ≤; ``failed_latency``: failed requests in the percentiles only."""
    ttfts, tpots, good, done = [], [], 0, 0
    for r in records:
        if not r["ok"] and not (with_failed or failed_latency):
            continue
        times = r["times"]
        if not times:
            continue
        ttft = (times[0] if ttft_rule == "first" else times[-1]) - r["sent"]
        n = len(times)
        if tpot_rule == "spread":
            tpot = (times[-1] - times[0]) / (n - 1) if n > 1 else tpot_one
        elif tpot_rule == "per token":
            tpot = (times[-1] - r["sent"]) / n
        else:
            tpot = (times[-1] - times[0]) / n
        ttfts.append(ttft)
        if itl:
            tpots.extend(b - a for a, b in zip(times, times[1:]))
        elif n > 1 or one_in_pct or tpot_rule == "per token":
            tpots.append(tpot)
        if not r["ok"] and not with_failed:
            continue
        done += 1
        meets = (ttft < slo_ttft if "ttft" in strict else ttft <= slo_ttft,
                 tpot < slo_tpot if "tpot" in strict else tpot <= slo_tpot)
        good += any(meets) if either else all(meets)
    if stat == "mean":
        import numpy as np
        summary = [float(np.mean(v)) if v else math.nan for v in (ttfts, tpots)]
    else:
        summary = [_percentile(v, quantile, method) for v in (ttfts, tpots)]
    per = {"duration": duration, "throughput": duration, "completed": done, "all": len(records), "count": 1,
           "span": max((r["times"][-1] for r in records if r["times"]), default=0.0)
           - min(r["sent"] for r in records)}[rate]
    count = done if rate == "throughput" else good
    return (summary[0] * scale, summary[1] * scale, count / per if per else math.nan)


def _trace(seed, n, *, failed=(), single=(), at_limit=(), tpot_limit=()):
    import random
    rng = random.Random(seed)
    records, t = [], 0.0
    for i in range(n):
        t += rng.expovariate(4.0)
        first = t + rng.uniform(0.05, 0.9)
        tokens = 1 if i in single else rng.randint(3, 12)
        gaps = [rng.uniform(0.01, 0.08) for _ in range(tokens - 1)]
        times = [first]
        for g in gaps:
            times.append(times[-1] + g)
        if i in at_limit or i in failed or i in tpot_limit:   # exact binary fractions
            t = round(t * 64) / 64           # t + 0.5 - t is exactly 0.5
            step = 1 / 32 if i in tpot_limit else 1 / 64       # a TPOT of exactly 1/32 s
            times = [t + (0.5 if i in at_limit else 0.25) + k * step for k in range(tokens)]
        records.append({"sent": t, "times": times, "ok": i not in failed})
    return records


def _q4_cases():
    return [(_trace(1, 40, failed={3, 17}, single={5}, at_limit={8, 21}), 0.5, 0.05, 12.0),
            (_trace(2, 25, failed={0}, single={2, 9}, at_limit={4}), 0.5, 0.04, 9.0),
            (_trace(3, 60, at_limit={1, 2}), 0.5, 0.06, 20.0),
            (_trace(4, 30, tpot_limit={3, 7, 11}, single={0}), 0.9, 1 / 32, 10.0)]


def _q4_mistakes(case) -> dict:
    records, slo_ttft, slo_tpot, duration = case

    def report(**mistake):
        return _report(records, slo_ttft, slo_tpot, duration, **mistake)
    linear = "use numpy's default, linear between ranks, as vllm bench serve does."
    return {
        "you kept failed requests, in the percentiles and in goodput; a request that failed (or timed out) has "
        "no latency to report and is never good.": report(with_failed=True),
        "you kept failed requests in the percentiles (and rightly out of goodput); a request that failed (or "
        "timed out) has no latency to report.": report(failed_latency=True),
        "a request whose TTFT is exactly slo_ttft meets it: the SLO is 'at most', ≤ (you used <).":
            report(strict=("ttft",)),
        "a request whose TPOT is exactly slo_tpot meets it: the SLO is 'at most', ≤ (you used <).":
            report(strict=("tpot",)),
        "a request exactly at an SLO limit meets it: the SLOs are 'at most', ≤ (you used < for both).":
            report(strict=("ttft", "tpot")),
        "TPOT is (last token − first token) / (tokens − 1): the time per token after the first; you divided "
        "the whole time since sending by the tokens.": report(tpot_rule="per token"),
        "TPOT divides the time after the first token by tokens − 1 (the gaps), not by the tokens.":
            report(tpot_rule="gaps by tokens"),
        "you took the p99 of every gap between tokens (ITL); TPOT is one number per request, (last − first) / "
        "(tokens − 1), and its p99 is over requests.": report(itl=True),
        "TTFT is the first token's time − sent; you took the last token's (the whole request's latency).":
            report(ttft_rule="last"),
        "a one-token request has no TPOT: it counts as 0 for the SLO (so it is good when its TTFT is), as "
        "vllm bench serve counts it; you counted it as missing the TPOT SLO.": report(tpot_one=math.inf),
        "a one-token request has no TPOT: leave it out of the TPOT percentile (it counts as 0 only for the "
        "SLO).": report(one_in_pct=True),
        f"you took the value at the rank below the 99th percentile (numpy's method='lower'); {linear}":
            report(method="lower"),
        f"you took the 99th percentile by the nearest rank (the ⌈0.99·n⌉-th smallest); {linear}":
            report(method="inverted_cdf"),
        f"you took numpy's method='nearest' (the value at the rank nearest 0.99·(n − 1)); {linear}":
            report(method="nearest"),
        "that is the 95th percentile; asked is the 99th.": report(quantile=95),
        "that is the median (50th percentile); asked is the 99th.": report(quantile=50),
        "that is the mean; asked is the 99th percentile, the latency 1 request in 100 exceeds.": report(stat="mean"),
        "np.percentile takes percent: 0.99 asks for the 0.99th percentile, nearly the smallest; pass 99 "
        "(np.quantile is the one that takes 0.99).": report(quantile=0.99),
        "those are milliseconds; the trace's times are seconds and so are the SLOs: return seconds.":
            report(scale=1000.0),
        "a request is good only when TTFT ≤ slo_ttft AND TPOT ≤ slo_tpot; you counted it when either was met.":
            report(either=True),
        "that is throughput, every completed request per second; goodput counts only the requests that met "
        "both SLOs.": report(rate="throughput"),
        "you divided by the trace's own span (first sent to last token); goodput is per second of `duration`, "
        "the run's length as given.": report(rate="span"),
        "that is the fraction of completed requests that met the SLOs; goodput is a rate: good requests / "
        "duration.": report(rate="completed"),
        "that is the fraction of the requests that met the SLOs; goodput is a rate: good requests / "
        "duration.": report(rate="all"),
        "that is the count of good requests; goodput is a rate: good requests / duration.": report(rate="count"),
    }


def _close(value, right) -> bool:
    return abs(value - right) <= 1e-9 * max(1.0, abs(right))


def _check_report(slo_report):
    require_function(slo_report, "slo_report")
    names = ("p99 TTFT", "p99 TPOT", "goodput")
    results = []
    for index, case in enumerate(_q4_cases()):
        records, slo_ttft, slo_tpot, duration = case
        what = f"slo_report(<trace {index + 1}>, {slo_ttft}, {slo_tpot}, {duration})"
        copies = [dict(r, times=list(r["times"])) for r in records]
        got = call_answer(slo_report, copies, slo_ttft, slo_tpot, duration, what=what, parts=names,
                          seconds=DEADLINE_S)
        if not isinstance(got, (tuple, list)) or len(got) != 3:
            raise Wrong(f"{what} returned {describe(got)}; return three numbers: (p99 TTFT, p99 TPOT, goodput).")
        values = [as_number(f"{what}'s {name}", v) for name, v in zip(names, got)]
        results.append((what, case, values, _report(*case)))
    # (trace, component) pairs the answer got wrong; a mistake is named by the most of them it gives,
    # whole traces first (a mistake that gives all three numbers of a trace), then single numbers
    wrong = [(r, k) for r in results for k in range(3) if not _close(r[2][k], r[3][k])]
    if wrong:
        mistakes = {r[0]: _q4_mistakes(r[1]) for r in results}
        traces = [r for r in results if any(w[0] is r for w in wrong)]
        fit = (best_fit(traces, lambda r: r[2], lambda r: mistakes[r[0]],
                        lambda got, v: all(_close(g, x) for g, x in zip(got, v)))
               or best_fit(wrong, lambda w: w[0][2][w[1]], lambda w: {m: v[w[1]] for m, v in mistakes[w[0][0]].items()},
                           _close))
        what, _, values, right = wrong[0][0]
        k = wrong[0][1]
        if fit:
            message = fit[0]
            (what, _, values, right), k = next(
                w for w in wrong if _close(w[0][2][w[1]], mistakes[w[0][0]][message][w[1]]))
            raise Wrong(f"{what}: your {names[k]} is {values[k]:.6g}, expected {right[k]:.6g}: {message}")
        raise Wrong(f"{what}: your {names[k]} is {values[k]:.6g}; expected {right[k]:.6g}.")
    records, slo_ttft, slo_tpot, duration = _q4_cases()[0]
    throughput = sum(r["ok"] for r in records) / duration
    return (f"right on {len(_q4_cases())} traces. On the first, {throughput:.2f} requests/s completed but only "
            f"{_report(records, slo_ttft, slo_tpot, duration)[2]:.2f}/s met the SLO: goodput, not throughput, "
            "is what users feel (DistServe).")


q4 = Exercise("ep15.q4", _check_report,
              hint=("For one request, which two moments give its TTFT, and which its time per output token?",
                    "Skip failed requests. TTFT = first token time − sent; TPOT = (last − first) / (tokens − 1) "
                    "for requests with more than one token (0 for one token, as vllm bench serve counts it for "
                    "goodput; left out of the TPOT percentile). p99 with numpy.percentile(values, 99). Goodput "
                    "= requests with TTFT ≤ its SLO and TPOT ≤ its SLO, divided by the duration."),
              solution=solution_link(NOTEBOOK))


# --- q5: how many users fit, and what rate keeps them busy ----------------------------------------

Q5_CONFIGS = {
    "SmolLM2-135M": dict(num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3, head_dim=64,
                         hidden_size=576),
    "Llama-3.2-1B": dict(num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8, head_dim=64,
                         hidden_size=2048),
    "Gemma-like": dict(num_hidden_layers=18, num_attention_heads=8, num_key_value_heads=1, head_dim=256,
                       hidden_size=2048),
    "Qwen3-0.6B": dict(num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8, head_dim=128,
                       hidden_size=1024),
    "Llama-2-7B": dict(num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=32, head_dim=128,
                       hidden_size=4096),
}

Q5_CASES = [(12 * 2**30, "SmolLM2-135M", 2048, 2), (10 * 2**30, "Llama-3.2-1B", 4096, 2),
            (30 * 2**30, "Gemma-like", 8192, 2), (20 * 2**30, "Llama-2-7B", 4096, 2),
            (5 * 2**30, "Llama-3.2-1B", 1000, 1), (8 * 2**30, "Qwen3-0.6B", 4096, 2)]


def _users(cache_bytes, c, context, dtype_bytes, *, heads="kv", kv=2, rounding="floor", dtype=None,
           layers=True, tokens=None, gib=False):
    """Whole users; the keywords are the mistakes (``dtype``: the bytes per number used instead of
    ``dtype_bytes``; ``tokens``: per user instead of ``context``; ``gib``: cache in GB against GiB)."""
    width = {"kv": c["num_key_value_heads"] * c["head_dim"], "q": c["num_attention_heads"] * c["head_dim"],
             "hidden": c["hidden_size"],
             "derived": c["num_key_value_heads"] * (c["hidden_size"] // c["num_attention_heads"])}[heads]
    per_token = kv * (c["num_hidden_layers"] if layers else 1) * width * (dtype_bytes if dtype is None else dtype)
    per_user = per_token * (context if tokens is None else tokens)
    raw = cache_bytes / 1e9 / (per_user / 2**30) if gib else cache_bytes / per_user
    return {"floor": math.floor(raw), "round": round(raw), "ceil": math.ceil(raw), "none": raw,
            "ceil - 1": math.ceil(raw) - 1}[rounding]


def _q5_mistakes(case) -> dict:
    cache_bytes, name, context, dtype_bytes = case
    c = Q5_CONFIGS[name]
    args = (cache_bytes, c, context, dtype_bytes)
    return {
        "you worked head_dim out as hidden_size / num_attention_heads; use the config's head_dim, which some "
        "models (Qwen3, Gemma) set apart from it.": _users(*args, heads="derived"),
        "you sized the cache by the query heads; keys and values are stored per key/value head "
        "(num_key_value_heads), fewer than the query heads with grouped-query attention.": _users(*args, heads="q"),
        "you sized the cache by hidden_size; a token stores num_key_value_heads × head_dim numbers for K and "
        "as many for V, in each layer.": _users(*args, heads="hidden"),
        "you forgot the factor 2: each token stores a key AND a value in every layer.": _users(*args, kv=1),
        "you left out the bytes per number (dtype_bytes).": _users(*args, dtype=1),
        "you took dtype_bytes for bits (divided by 8); it is bytes per number already.":
            _users(*args, dtype=dtype_bytes / 8),
        "you used 2 bytes per number whatever dtype_bytes is; use the argument (1 for an 8-bit cache).":
            _users(*args, dtype=2),
        "you left out the layers: every layer keeps its own keys and values.": _users(*args, layers=False),
        "you left out the context: that is how many tokens fit, not users; each user keeps `context` tokens.":
            _users(*args, tokens=1),
        "you counted context + 1 tokens per user; a user keeps `context` tokens.": _users(*args, tokens=context + 1),
        "you divided the cache in GB (10⁹ bytes) by a user's size in GiB (2³⁰ bytes); keep both in bytes.":
            _users(*args, gib=True),
        "you counted one user fewer when the users fit exactly (ceil − 1, or a loop that adds a user while the "
        "next fits with < ): a user fits when their bytes are ≤ what is left, so round down.":
            _users(*args, rounding="ceil - 1"),
        "round down: a user who does not fit whole does not fit.": _users(*args, rounding="round"),
        "you rounded up; a user who does not fit whole does not fit: round down.": _users(*args, rounding="ceil"),
        "that is a fraction of a user; count whole users (round down).": _users(*args, rounding="none"),
    }


Q5_RATE_CASES = [(100, 2.0), (37, 0.8), (1, 10.0), (512, 3.5), (19, 4.0)]


def _check_capacity(max_users, max_rate):
    require_function(max_users, "max_users")
    require_function(max_rate, "max_rate")
    results = []
    for cache_bytes, name, context, dtype_bytes in Q5_CASES:
        config = dict(Q5_CONFIGS[name])
        what = f"max_users({cache_bytes:,}, <{name}>, {context}, {dtype_bytes})"
        got = as_number(what, call_answer(max_users, cache_bytes, config, context, dtype_bytes, what=what,
                                              seconds=DEADLINE_S))
        results.append(((cache_bytes, name, context, dtype_bytes), got, _users(cache_bytes, Q5_CONFIGS[name],
                                                                                 context, dtype_bytes)))
    _judge(results, _q5_mistakes, lambda c: f"max_users({c[0]:,}, <{c[1]}>, {c[2]}, {c[3]})", "users",
           whole=True)
    rates = []
    for users, latency in Q5_RATE_CASES:
        what = f"max_rate({users}, {latency})"
        rate = call_answer(max_rate, users, latency, what=what, seconds=DEADLINE_S)
        rates.append(((users, latency), as_number(what, rate), users / latency))
    _judge(rates, lambda c: {
        "that is users × latency; Little's law is L = λ·W, so the rate is λ = L / W: users / latency.":
            c[0] * c[1],
        "that is latency / users, upside down: λ = L / W, users / latency.": c[1] / c[0],
        "you rounded the rate; it need not be a whole number of requests per second.": round(c[0] / c[1]),
        "you rounded the rate down; it need not be a whole number of requests per second.": c[0] // c[1],
        "you divided by twice the latency; in Little's law W is the time a request is in the system, "
        "latency_s: λ = users / latency_s.": c[0] / (2 * c[1]),
        "you divided by 2 s, the episode's latency, whatever latency_s is: λ = users / latency_s.": c[0] / 2,
        "you took latency_s for milliseconds; it is seconds, and the rate is per second.": c[0] / (1000 * c[1]),
        "that is per minute; the rate is per second: users / latency_s.": 60 * c[0] / c[1],
    }, lambda c: f"max_rate({c[0]}, {c[1]})", "requests/s", whole=False)
    users = _users(12 * 2**30, Q5_CONFIGS["SmolLM2-135M"], 2048, 2)
    return (f"right on {len(results)} models and {len(rates)} rates. SmolLM2-135M at 2,048 tokens each: "
            f"{users:,} users in 12 GiB of cache; with 2 s per request they sustain {users / 2:,.1f} "
            "requests/s, if the GPU can decode that many tokens a step (the bandwidth floor of episode 10).")


q5 = Exercise("ep15.q5", _check_capacity,
              hint=("How many bytes does one token of one user keep in the cache, across all layers?",
                    "Per token: 2 (K and V) × layers × num_key_value_heads × head_dim × dtype_bytes. A user "
                    "keeps `context` tokens; users = cache_bytes // (per token × context). Little's law "
                    "L = λ·W gives the rate that keeps L users busy for W seconds each: λ = L / W."),
              solution=solution_link(NOTEBOOK))


__all__ = ["q1", "q2", "q3", "q4", "q5", "page_hash", "NotDone"]
