"""Trace checks (conformance/trace.py): they accept the model's traces and catch wrong ones;
the algorithm cases take their intended paths in every build."""

import numpy as np
import pytest

from decode_topk.conformance import algorithm_cases as A
from decode_topk.conformance.cases import cases
from decode_topk.conformance.trace import FIELDS, compare_traces, coverage, expected_trace, trace_invariants
from decode_topk.reference.model import simulate
from decode_topk.kernel import policy
from decode_topk.kernel.policy import BUILDS, Build



@pytest.fixture(scope="module")
def sampled_rows():
    rng = np.random.default_rng(7)
    logits = rng.integers(0x3000, 0x4000, size=(3, 65544), dtype=np.uint16)
    lengths = np.array([65544, 40000, 300], np.int32)
    out, trace = simulate(logits, lengths, 512, False, build=(8, 8))
    return logits, lengths, trace


def test_compare_traces_names_row_and_field(sampled_rows):
    *_, trace = sampled_rows
    assert compare_traces(trace, trace.copy()) == []
    bad = trace.copy()
    bad[1, 3] += 1
    bad[2, 0] = 2
    problems = compare_traces(trace, bad)
    assert len(problems) == 2
    assert "row 1 field cutoff" in problems[0] and "row 2 field path" in problems[1]
    assert "shape" in compare_traces(trace, trace[:2])[0]


@pytest.mark.parametrize("field", range(8), ids=FIELDS)
def test_invariants_catch_each_field(sampled_rows, field):
    logits, lengths, trace = sampled_rows
    build = (8, 512, 8)
    assert trace_invariants(logits, lengths, 512, False, trace, build) == []
    assert trace_invariants(logits, lengths, 512, False, trace) == []
    for row in range(3):
        bad = trace.copy()
        bad[row, field] += 1
        assert trace_invariants(logits, lengths, 512, False, bad, build), (row, field)


def test_invariants_without_build_still_check_the_row(sampled_rows):
    logits, lengths, trace = sampled_rows
    for field in (0, 2, 4, 6, 7):  # path, q, gt, kth, above are build-independent
        bad = trace.copy()
        bad[0, field] += 1
        assert trace_invariants(logits, lengths, 512, False, bad), field
    short = trace.copy()
    short[2, 6] = 5
    assert any("short row" in p for p in trace_invariants(logits, lengths, 512, False, short))
    assert "shape" in trace_invariants(logits, lengths, 512, False, trace[:, :7])[0]
    assert "dtype" in trace_invariants(logits, lengths, 512, False, trace.astype(np.int64))[0]


def test_coverage_counts():
    trace = np.array([[0, 0] + [-1] * 6, [1, 0, 1, 1, 1, 1, 1, 1], [2, 1, 1, 1, 1, 1, 1, 1],
                      [2, 2, 1, 1, 1, 1, 1, 1], [2, 0] + [-1] * 4 + [1, 1]], np.int32)
    assert coverage(trace) == {"path:short": 1, "path:sampled": 1, "path:direct": 3,
                               "reason:overflow": 1, "reason:underflow": 1}


@pytest.mark.parametrize("build", BUILDS, ids=str)
def test_algorithm_cases_take_their_intended_paths(build):
    intended = [c for c in cases("full") if c.intent is not None]
    assert len(intended) >= 5  # the algorithm cases: every fallback and its boundaries
    for case in intended:
        logits, lengths = case.generate()
        if logits.shape[1] > build.capacity:
            continue
        for k in case.ks:
            want = expected_trace(logits, lengths, k, False, build)
            assert A.intent_problems(case.intent, build, k, False, want) == [], (case.name, k)
            _, trace = simulate(logits, lengths, k, False, build=build)
            assert compare_traces(want, trace) == [], (case.name, k)


def test_the_least_sample_rank_is_spec_2_4s():
    # policy.Q_MIN (the kernel's and the model's) against the trace oracle's own derivation
    # of SPEC 2.4's rule; a planted Q_MIN is caught here and by the traces (q_min_one)
    from decode_topk.conformance.trace import q_min
    assert policy.Q_MIN == {k: q_min(k) for k in policy.KS} == {512: 6, 1024: 8, 2048: 11}


def test_the_sample_rank_is_bounded_by_spec_2_4s_deviations():
    # q_for's bound against SPEC 2.4's definition, by search: the least q >= m with (q -
    # m)^2 >= 25 m, m = ceil(2048 k / length), at every sampled length's m (m <= 256); and
    # q_for is the aim where that is lower (the widest rows), Q_MIN where both are.
    from decode_topk.conformance.trace import q_for, q_min
    for k in policy.KS:
        for length in list(range(16385, 1048577, 997)) + [16385, 65536, 131072, 219470, 629146, 1048576]:
            m = -(-2048 * k // length)
            bound = next(q for q in range(m, 2049) if (q - m) ** 2 >= policy.Q_DEVIATIONS ** 2 * m)
            aim = -(-2048 * (k + policy.SURVIVOR_AIM) // length)
            assert q_for(length, k) == max(q_min(k), min(aim, bound)), (k, length)
    assert (q_for(65536, 512), q_for(131072, 2048), q_for(1048576, 2048)) == (16 + 20, 32 + 29, q_min(2048))


def test_overflow_is_a_streamed_queues():
    """Reason 1 (SPEC 2.11, 2.12): some CTA's queue of vectors overflows, Q_c = GV_c +
    min(EV_c, k) > STREAM_QUEUE, on the streamed builds only; a trace claiming it where the
    queues fit, or hiding it, is reported with the build, and without it where no CTA's
    queue could overflow (G + min(E, k) <= STREAM_QUEUE)."""
    case = next(c for c in cases("ci") if c.name == "streamed-queue")
    logits, lengths = case.generate()
    for build in (policy.STREAM, policy.STREAM_2):
        for k in policy.KS:
            _, trace = simulate(logits, lengths, k, False, build=build)
            assert trace_invariants(logits, lengths, k, False, trace, build) == []
            over = np.flatnonzero(trace[:, 1] == 1)
            fits = np.flatnonzero(trace[:, 0] == 1)
            assert over.size and fits.size, trace[:, :2]
            assert (trace[over, 4] + np.minimum(trace[over, 5], k) > policy.STREAM_QUEUE).all()
            hidden = trace.copy()
            hidden[over, :2] = (1, 0)  # claims the sampled path
            assert trace_invariants(logits, lengths, k, False, hidden, build)
            claimed = trace.copy()
            claimed[fits, :2] = (2, 1)  # claims an overflow where every queue fits
            assert len(trace_invariants(logits, lengths, k, False, claimed, build)) >= fits.size
            assert any("overflow with" in p for p in trace_invariants(logits, lengths, k, False, claimed))
            # the same rows on a build that stages them: no overflow
            assert 1 not in expected_trace(logits, lengths, k, False, Build.parse("8x512x8"))[:, 1].tolist()
    # CTA by CTA: row 2's queues overflow at one CTA a row (10,000 + 200 vectors) and fit at
    # two (5,100 each), row 3's only in the last CTA at two
    one = expected_trace(logits, lengths, 512, False, policy.STREAM)
    two = expected_trace(logits, lengths, 512, False, policy.STREAM_2)
    assert one[2:4, :2].tolist() == [[2, 1], [2, 1]] and two[2:4, :2].tolist() == [[1, 0], [2, 1]]
