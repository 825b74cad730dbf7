"""Staged-vector slot coverage (conformance/coverage.py): the slot rule against the kernel's
staging loop, the reachable set against every length, the ci level reaching all of it, and
the check failing when a case (or the slot rule) is spoiled."""

import dataclasses
import io

import numpy as np
import pytest

from decode_topk.conformance import coverage as cv
from decode_topk.conformance import registry, run_suite
from decode_topk.conformance import suite as suite_module
from decode_topk.conformance.cases import cases
from decode_topk.kernel import policy
from decode_topk.kernel.policy import BUILDS, KS, Build
from decode_topk.reference.model import simulate

TOP_SLOT_CASES = [c for c in cases("ci") if c.name.startswith("top-slot-")]
SLOTS_REACHED = cv.slots_reached  # the rule as written, before a test plants a bug in it


def staged_slots(build, length, block_mode=False):
    """{cta: set of slots} the kernel's staging loop fills, written as the loop is
    (DecodeTopK.stage: token mode, for s < V, i = s * nt + tid, stored iff i < count; block
    mode, for batch b < ceil(count / (nt B)) and j < B, slot s = b B + j, i = s * nt + tid,
    its key stored iff i < count), over every thread, so it shares nothing with
    coverage.slots_reached but the chunk rule; on a streamed build a token row past the
    direct path's last length, its stage, stages nothing (count = 0: SPEC 2.12, it
    streams). The register build's loop is its own (DecodeTopKRegister.kernel: for v < V,
    vector g = tid * V + v, valid iff g < nv): slot v."""
    nv = -(-length // 8)
    if build.registers:
        tid = np.arange(build.threads)
        return {0: {v for v in range(build.vectors) if np.any(tid * build.vectors + v < nv)}}
    streamed = build.streams and not block_mode and length > policy.direct_max_length(build.cluster, build.vectors)
    batch = 4 if build.threads == 1024 else 8  # DecodeTopK's load_batch in block mode
    slots = {}
    for c in range(build.cluster):
        count = 0 if streamed else ((c + 1) * nv) // build.cluster - (c * nv) // build.cluster
        tid = np.arange(build.threads)
        if block_mode:
            batches = -(-count // (build.threads * batch))
            stored = [b * batch + j for b in range(batches) for j in range(batch)
                      if np.any((b * batch + j) * build.threads + tid < count)]
        else:
            stored = [s for s in range(build.vectors) if np.any(s * build.threads + tid < count)]
        slots[c] = set(stored)
    return slots


def test_a_streamed_row_meets_every_register_buffer():
    """coverage.STREAMED is one slot for every streamed row because the widest chunk of any
    streamed row (more than T V vectors) spans every one of a thread's STREAM_DEPTH - 1
    register buffers of STREAM_TILE vectors (SPEC 2.12): ceil((T V + 1) / (T U)) >= DEPTH - 1."""
    for build in (policy.STREAM, policy.STREAM_2):
        tiles = -(-(build.threads * build.vectors + 1) // (build.threads * policy.STREAM_TILE))
        assert tiles >= policy.STREAM_DEPTH - 1, (build.name, tiles)
        assert cv.slots_reached(build, [build.stage + 1]).tolist() == [0]
        assert cv.streamed_rows(build, [build.stage, build.stage + 1]).tolist() == [False, True]


def interesting_lengths(build):
    """0, 1, and a few logits around every slot boundary s C T vectors, the stage and the
    capacity (on the streamed builds the stage is not the capacity)."""
    step = 8 * build.cluster * build.threads
    lengths = {0, 1, 7, 8, 9, build.stage - 1, build.stage, build.stage + 1, build.capacity - 1, build.capacity}
    for s in range(1, build.vectors + 1):
        lengths |= {s * step + d for d in (-8, -7, -1, 0, 1, 7, 8, 9, 8 * build.cluster)}
    return sorted(v for v in lengths if 0 <= v <= build.capacity)


@pytest.mark.parametrize("build", BUILDS, ids=str)
def test_block_slots_reached_is_the_kernels_staging_loop(build):
    """Block mode's stage of keys (SPEC 2.2): up to 8 V slots a thread, none streamed."""
    if build.registers:
        return
    cap = min(build.capacity_in(True), policy.MAX_WIDTH)
    step = 8 * build.cluster * build.threads
    lengths = sorted({0, 1, 8, 9, cap - 1, cap} | {s * step + d for s in range(1, 8 * build.vectors + 1)
                                                   for d in (-8, -1, 0, 1, 9) if 0 <= s * step + d <= cap})
    got = cv.slots_reached(build, lengths, True)
    for length, filled in zip(lengths, got.tolist()):
        assert set(range(filled)) == set().union(*staged_slots(build, length, True).values()), (build.name, length)
        assert cv.streamed_rows(build, [length], True).tolist() == [False]


@pytest.mark.parametrize("build", BUILDS, ids=str)
def test_slots_reached_is_the_kernels_staging_loop(build):
    lengths = interesting_lengths(build)
    got = cv.slots_reached(build, lengths)
    for length, filled in zip(lengths, got.tolist()):
        by_cta = staged_slots(build, length)
        expected = set().union(*by_cta.values())
        assert set(range(filled)) == expected, (build.name, length)
        assert cv.streamed_rows(build, [length]).tolist() == [build.streams and length > build.stage]
        if not filled:
            continue  # top_slot_vectors: the staged rows' (a streamed row has no staged slot)
        # top_slot_vectors: each CTA's vectors in its own highest slot
        nv = -(-length // 8)
        want = []
        for c in range(build.cluster):
            start, end = (c * nv) // build.cluster, ((c + 1) * nv) // build.cluster
            if by_cta[c]:
                top = max(by_cta[c])
                slot_of = (lambda g: g % build.vectors) if build.registers else (lambda g: (g - start) // build.threads)
                want += [g for g in range(start, end) if slot_of(g) == top]
        assert cv.top_slot_vectors(build, length).tolist() == want, (build.name, length)


def _combinations_of_every_length(build):
    """The combinations SPEC.md 2.3 allows at every length 0 .. capacity (in that mode),
    every k and mode: the path a length takes, a sampled attempt ending in any of its
    outcomes: sampled, underflow, overflow (on the streamed builds, where an attempt
    streams and names the slot STREAMED, a queue's, SPEC 2.12; on the others, the narrow
    pass's, SPEC 2.5)."""
    combos = set()
    attempts = [(cv.SAMPLED, cv.NONE), (cv.DIRECT, cv.UNDERFLOW), (cv.DIRECT, cv.OVERFLOW)]
    for block_mode in build.modes:
        lengths = np.arange(min(build.capacity_in(block_mode), policy.MAX_WIDTH) + 1)
        filled = cv.slots_reached(build, lengths, block_mode)
        streamed = cv.streamed_rows(build, lengths, block_mode)
        nv = -(-lengths // 8)
        n = nv if block_mode else lengths
        for k in KS:
            attempt = (n > k) & (lengths > policy.direct_max_length(build.cluster, build.vectors)) & (not block_mode)
            groups = ((n <= k, [(cv.SHORT, cv.NONE)]),
                      ((n > k) & ~attempt, [(cv.DIRECT, cv.NONE)]),
                      (attempt, attempts))
            for mask, outcomes in groups:
                for count in np.unique(filled[mask & ~streamed]).tolist():
                    slots = range(count) if count else (cv.NO_SLOT,)
                    combos |= {(build.name, cv.MODE_NAMES[block_mode], s, p, r) for s in slots for p, r in outcomes}
                if (mask & streamed).any():
                    assert (mask & streamed).tolist() == (streamed & attempt).tolist()  # streams iff attempted
                    combos |= {(build.name, cv.MODE_NAMES[block_mode], cv.STREAMED, p, r) for p, r in outcomes}
    return combos


@pytest.mark.parametrize("build", BUILDS, ids=str)
def test_reachable_is_what_every_length_allows(build):
    assert cv.reachable(build) == _combinations_of_every_length(build)
    line = cv.describe(cv.reachable(build))  # grouped a (build, mode, path), slots as ranges
    if build.streams:  # a streamed row has no staged slot
        assert f"{build.name} token sampled: slots s;" in line and f"{build.name} token direct:overflow: slots s" in line
    elif policy.direct_max_length(build.cluster, build.vectors) < build.capacity:
        assert f"{build.name} token sampled: slots 0-{build.vectors - 1};" in line
    else:  # 1x512x8 and the register build: every token row up to its capacity takes the direct path
        slots = f"0-{build.vectors - 1}" if build.vectors > 1 else "0"
        assert "token sampled" not in line and f"{build.name} token direct: slots {slots}" in line
    # a short block row's 2048 vectors: 4 slots of one CTA, 2 at 2 CTAs a row
    short = {1: "0-3", 2: "0-1"}.get(build.cluster, "0")
    if build.token_only:  # token rows only (the register build, SPEC 2.13; 3x512x4, SPEC 2.1)
        assert "block" not in line
    else:
        assert f"{build.name} block short: slots -, {short};" in line


def test_the_model_at_ci_reaches_every_reachable_combination(model_ci):
    result, text = model_ci
    reached = cv.suite_combinations(result.runs)
    assert result.ok and result.slot_problems == [], text[-3000:]
    assert cv.reachable_all(BUILDS) <= set(reached)
    assert cv.unreachable(reached) == []
    table = cv.format_table(reached)
    assert "staged-vector slot coverage" in text and all(line in text for line in table)
    # one line a (build, mode, path) the build allows, none with a reachable cell unreached
    allowed = {(c[0], c[1], c[3], c[4]) for c in cv.reachable_all(BUILDS)}
    assert len(table) == 2 + len(allowed)
    assert not any("!" in line for line in table[2:])


@pytest.mark.parametrize("case", TOP_SLOT_CASES, ids=lambda c: c.name)
def test_dropping_a_top_slot_case_leaves_its_slots_unreached(model_ci, case):
    result, _ = model_ci
    others = [run for run in result.runs if run.case != case.name]
    problems = cv.suite_problems(others, BUILDS)
    lacking = cv.missing(cv.suite_combinations(others), BUILDS)
    assert problems and lacking and "not reached" in problems[0]
    # what goes missing: on the case's builds only, the slots above the widest other row of
    # the same mode, path and reason
    widest = {}
    for run in others:
        for build, mode, slot, path, reason in run.slots:
            key = (build, mode, path, reason)
            widest[key] = max(widest.get(key, 0), slot + 1)
    for build, mode, slot, path, reason in lacking:
        assert build in case.make.keywords["builds"], (build, slot)
        assert slot >= widest.get((build, mode, path, reason), 0), (build, mode, slot, path, reason)
    for name in case.make.keywords["builds"]:  # (block rows' key slots: the key-stage cases)
        top = Build.parse(name).vectors - 1
        assert {(name, "token", top, cv.SAMPLED, cv.NONE), (name, "token", top, cv.DIRECT, cv.UNDERFLOW)} \
            <= set(lacking)


# short, length 0, direct at slot 0; the 1-CTA builds' slots (their direct, sampled and
# underflow rows, block rows up to 65,536 logits); 2x512x16's (rows of 131,072 logits, both
# modes, and its underflow); 1x512x4's (its stage in both modes); the streamed builds' streamed
# rows, sampled, overflowed (4x512x4's in rows past 262,144 logits, 8x512x4's past 524,288)
# and underflowed;
# then the top-slot cases (the last one is dropped below)
MINIMAL = ["lengths", "one-cta-direct", "one-cta-underflow-wide", "needles", "plateau", "sampled-lengths",
           "sampled-underflow", "sampled-narrow-overflow", "sampled-narrow-overflow-65536", "stage-16384",
           "streamed-queue", "streamed-queue-4", "streamed-queue-8", "register-boundaries", "key-stage-131072",
           "key-stage-262144", "key-stage-524288", "key-stage-1048576"] + [c.name for c in TOP_SLOT_CASES]


@pytest.fixture(scope="module")
def minimal_cases():
    """The MINIMAL cases with their data made once (generating the top-slot rows is most of
    a run's time): each case's `make` returns a copy of it."""
    def frozen(case):
        logits, lengths = case.generate()
        return dataclasses.replace(case, make=lambda rng: (logits.copy(), lengths.copy()))
    return {c.name: frozen(c) for c in cases("ci") if c.name in MINIMAL}


@pytest.fixture
def small_catalogue(monkeypatch, minimal_cases):
    """The suite over a catalogue of the named MINIMAL cases only (run_suite's `catalogue`)."""
    def use(names):
        chosen = tuple(minimal_cases[name] for name in names)
        monkeypatch.setattr(suite_module, "catalogue", lambda level: chosen)
    return use


def test_the_suite_fails_when_a_combination_is_missing(small_catalogue):
    small_catalogue(MINIMAL)
    stream = io.StringIO()
    result = run_suite("model", "ci", stream=stream, builds=list(BUILDS))
    assert result.ok, stream.getvalue()[-3000:]  # these cases alone reach everything
    dropped = next(c for c in TOP_SLOT_CASES if c.name == MINIMAL[-1])
    small_catalogue(MINIMAL[:-1])
    stream = io.StringIO()
    result = run_suite("model", "ci", stream=stream, builds=list(BUILDS))
    text = stream.getvalue()
    assert not result.ok and result.violation_count == 0
    lacking = cv.missing(cv.suite_combinations(result.runs), BUILDS)
    lines = [line for line in text.splitlines() if line.startswith("slot coverage:")]
    assert lines == result.slot_problems and cv.describe(lacking) in lines[0]
    for name in dropped.make.keywords["builds"]:  # its builds' top slot (block rows': the key-stage cases)
        top = Build.parse(name).vectors - 1
        assert (name, "token", top, cv.SAMPLED, cv.NONE) in set(lacking)
        assert f"{name} token sampled: slots " in lines[0]
    assert text.rstrip().endswith(lines[-1])  # the last line says what is missing
    # a case filter, or builds left to the implementation, check nothing: not a whole level
    assert run_suite("model", "ci", stream=None, builds=list(BUILDS), case_filter="top-slot").slot_problems == []
    assert run_suite("model", "ci", stream=None).slot_problems == []


def _floor_slots(build, lengths, block_mode=False):
    """Planted: count // T slots a CTA (a partly filled slot not counted)."""
    build = cv.normalize_build(build)
    start, end = cv.chunks(cv.vector_count(lengths)[:, None], build.cluster)
    return ((end - start) // build.threads).max(axis=1, initial=0)


def _one_more_slot(build, lengths, block_mode=False):
    """Planted: ceil(count / T) + 1 slots a CTA that stages any."""
    filled = SLOTS_REACHED(build, lengths, block_mode)
    return np.where(filled > 0, filled + 1, 0)


@pytest.mark.parametrize("planted, problem", [(_floor_slots, "not reached"), (_one_more_slot, "rule out")],
                         ids=["floor", "plus-one"])
def test_a_slot_rule_off_by_one_is_reported(small_catalogue, monkeypatch, planted, problem):
    small_catalogue(MINIMAL)
    lengths = np.arange(0, 4 * 8 * 4096, 8 * 1000 + 1)
    assert not np.array_equal(planted(BUILDS[0], lengths), cv.slots_reached(BUILDS[0], lengths))
    monkeypatch.setattr(cv, "slots_reached", planted)
    result = run_suite("model", "ci", stream=None, builds=list(BUILDS))
    assert not result.ok and result.violation_count == 0
    assert any(problem in p for p in result.slot_problems), result.slot_problems


@pytest.fixture
def top_slot_poisoned():
    """The model fed logits whose vectors in the top slot V - 1 (by `staged_slots`' rule)
    read as -inf: a kernel bug confined to that slot."""
    def impl(logits_bits, lengths, k, block_mode, build=None):
        bits = logits_bits.copy()
        for r, length in enumerate(lengths.tolist()):
            nv = -(-length // 8)
            for c in range(build.cluster):
                start, end = (c * nv) // build.cluster, ((c + 1) * nv) // build.cluster
                first = start + (build.vectors - 1) * build.threads
                bits[r, 8 * first: 8 * max(first, end)] = 0xFF80
        return simulate(bits, lengths, k, block_mode, build=build)

    registry.register("top-slot-poisoned-for-test", lambda: impl, returns_trace=True, takes_build=True,
                      trace_oracle="invariants")
    yield "top-slot-poisoned-for-test"
    registry.unregister("top-slot-poisoned-for-test")


def test_a_bug_in_the_top_slot_fails_the_top_slot_cases(top_slot_poisoned):
    """The top-slot rows hold the row's largest values in the top slot, so dropping that
    slot loses selected indices: the contract check fails on every build and mode."""
    named = [Build.parse(name) for case in TOP_SLOT_CASES for name in case.make.keywords["builds"]]
    result = run_suite(top_slot_poisoned, "ci", case_filter="top-slot-", stream=None, builds=named)
    failed = {(run.build, run.block_mode) for run in result.runs
              if any(not v.reason.startswith("trace-") for v in run.violations)}
    assert failed == {(b.name, mode) for b in named for mode in (False, True)}
