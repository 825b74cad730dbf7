"""The cluster model (reference/model.py): conforms on every build, takes SPEC.md's paths
(the streamed path of 1x512x4 and 2x512x4 too), produces the trace conformance/trace.py prescribes, and
validates its inputs."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from decode_topk.conformance.checker import check
from decode_topk.conformance.trace import expected_trace, sample_positions, trace_invariants
from decode_topk.kernel import policy
from decode_topk.reference import bf16_bits_from_float32
from decode_topk.reference.model import MUTANTS, resolve_build, simulate
from decode_topk.kernel.policy import BUILDS, Build

SPECIALS = np.array([0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC0, 0xFFC0, 0x7F81, 0x7FFF, 0x3F80], np.uint16)
# Widths around the path thresholds D (SPEC 2.3: 32,768 logits at 1 and 2 CTAs, 65,536 at 4
# and 8, 131,072 at 16; 16,384 on 1x512x4, 2.12), so that every build sees short, direct and
# sampled rows.
WIDTHS = (8, 600, 4104, 16384, 16392, 17000, 32768, 32776, 40000, 65536, 65544, 90000, 131072, 131080)


def _fits(width, build, block_mode):
    return width <= build.capacity_in(block_mode)


@st.composite
def batches(draw):
    """1-3 rows of one width; values random bits, a quantized normal (ties) or a small pool,
    with specials; lengths anywhere in [0, width], often the whole width."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    width = draw(st.sampled_from(WIDTHS))
    rows = draw(st.integers(1, 3))
    kind = draw(st.sampled_from(("bits", "normal", "pool")))
    if kind == "bits":
        logits = rng.integers(0, 1 << 16, size=(rows, width), dtype=np.uint16)
    elif kind == "normal":
        step = draw(st.sampled_from((1.0, 8.0, 64.0)))
        logits = bf16_bits_from_float32(np.round(rng.standard_normal((rows, width)) * step) / step)
    else:
        pool = rng.integers(0, 1 << 16, size=draw(st.integers(1, 40)), dtype=np.uint16)
        logits = rng.choice(pool, size=(rows, width))
    if draw(st.booleans()):
        hit = rng.random((rows, width)) < 0.01
        logits[hit] = rng.choice(SPECIALS, size=int(hit.sum()))
    lengths = np.array([draw(st.one_of(st.just(width), st.integers(0, width))) for _ in range(rows)], np.int32)
    return logits.astype(np.uint16), lengths


@settings(max_examples=25, deadline=None)
@given(batches(), st.sampled_from(policy.KS), st.booleans())
def test_model_conforms_on_every_build(batch, k, block_mode):
    logits, lengths = batch
    for build in BUILDS:
        if not _fits(logits.shape[1], build, block_mode):
            continue
        out, trace = simulate(logits, lengths, k, block_mode, build=build)
        assert out.dtype == np.int32 and out.shape == (logits.shape[0], k)
        assert trace.dtype == np.int32 and trace.shape == (logits.shape[0], 8)
        assert check(logits, lengths, k, block_mode, out) == [], build
        assert trace_invariants(logits, lengths, k, block_mode, trace, build) == [], build


def _row(width, length, seed=0):
    rng = np.random.default_rng(seed)
    logits = rng.integers(0, 0x7F00, size=(1, width), dtype=np.uint16)
    return logits, np.array([length], np.int32)


@pytest.mark.parametrize("build", BUILDS, ids=str)
def test_paths_follow_spec(build):
    cluster, threads, vectors = build
    # SPEC 2.3, restated: the direct path's last length is eight vectors a thread at one
    # CTA, four at two, two on the clusters of 4, 8 and 16; on the streamed builds their
    # stage, four vectors a thread (2.12)
    direct_max = 8 * cluster * threads * (4 if build.streams else {1: 8, 2: 4}.get(cluster, 2))
    if build.registers:  # the register build: its capacity, no sampled path (SPEC 2.13)
        direct_max = build.stage
    assert policy.direct_max_length(cluster, vectors) == direct_max
    k = 512
    block_cap = min(build.capacity_in(True), policy.MAX_WIDTH)  # a stage of keys (SPEC 2.2), no row past MAX_WIDTH
    cases = [
        (False, 0, 0), (False, k, 0), (False, k + 1, 2), (True, 8 * k, 0), (True, 8 * k + 1, 2),
        (False, min(direct_max, build.capacity), 2), (True, block_cap, 2),
    ]
    if direct_max < build.capacity:
        cases += [(False, direct_max + 1, 1)]
    if direct_max < build.capacity_in(True):
        cases += [(True, direct_max + 1, 2)]
    for block_mode, length, path in cases:
        if block_mode not in build.modes:  # the register build: token rows only (SPEC 2.13)
            continue
        logits, lengths = _row(max(length, 8), length)
        _, trace = simulate(logits, lengths, k, block_mode, build=(cluster, vectors))
        got = int(trace[0, 0]) if trace[0, 1] == 0 else 1  # a fallback row attempted sampling
        assert got == path, (block_mode, length, trace[0].tolist())
        assert trace_invariants(logits, lengths, k, block_mode, trace, build) == []


def test_short_rows_trace_and_output():
    logits, lengths = _row(64, 40)
    out, trace = simulate(logits, lengths, 512, False)
    assert trace[0].tolist() == [0, 0, -1, -1, -1, -1, -1, -1]
    assert out[0, :40].tolist() == list(range(40)) and (out[0, 40:] == -1).all()


def test_sampled_trace_fields():
    rng = np.random.default_rng(3)
    logits = rng.integers(0x3000, 0x4000, size=(2, 131072), dtype=np.uint16)
    lengths = np.array([131072, 100001], np.int32)
    # every build that holds the row and samples it (16x512x16 takes 131,072 logits direct)
    for build in (b for b in BUILDS if b.capacity >= logits.shape[1]
                  and policy.direct_max_length(b.cluster, b.vectors) < 100001):
        _, trace = simulate(logits, lengths, 1024, False, build=build)
        assert (trace[:, 0] == 1).all(), trace
        # SPEC 2.4: the aim, 56, above the bound m + 5 sqrt(m) with m = 2048 * 1024 / 131072 = 16
        assert (2048 * (1024 + 2560) + 131071) // 131072 == 56 and trace[0, 2] == 16 + 5 * 4
        assert np.array_equal(trace, expected_trace(logits, lengths, 1024, False, build))


def test_policy_chooses_the_build():
    rng = np.random.default_rng(4)
    logits = rng.integers(0, 0x7F00, size=(3, 40000), dtype=np.uint16)
    lengths = np.array([40000, 39999, 33000], np.int32)
    # 3 rows: 8x512x8 while 3 clusters fit; else (40000 logits, past the 2-CTA direct
    # length) 4x1024x8 while 3 of its clusters do; else 2x512x8 while 3 of its clusters do;
    # else a 1-CTA build (1x512x16), the rows outnumbering the resident 4-CTA clusters.
    for resident, build in ((lambda b: 3, (8, 512, 8)), (lambda b: 2 if b.cluster == 8 else 3, (4, 1024, 8)),
                            (lambda b: 3 if b.cluster == 2 else 2, (2, 512, 8)),
                            (lambda b: 2, (1, 512, 16)), (lambda b: 3 if b.cluster == 4 else 2, (4, 1024, 8))):
        assert resolve_build(3, 40000, resident=resident) == build
        got = simulate(logits, lengths, 512, False, resident=resident)
        want = simulate(logits, lengths, 512, False, build=build)
        assert all(np.array_equal(a, b) for a, b in zip(got, want))
    # past 262,144 logits 16x512x16 while every row's 16-CTA cluster is resident, else 8x512x16
    assert resolve_build(3, 300000) == (16, 512, 16)
    assert resolve_build(3, 300000, resident=lambda b: 2 if b.cluster == 16 else 3) == (8, 512, 16)
    assert resolve_build(3, 600000) == (16, 512, 16)
    # token rows past the 16-CTA build's two waves stream (on 2x512x4: wider than
    # STREAM_1_WIDTH); block rows there stage their keys (2x512x16 past 8x512x8's and
    # 4x512x4's resident clusters where 8x512x8 would take a third wave, else 8x512x8 in
    # waves: SPEC 2.1), until session 45 refused
    assert resolve_build(5, 600000, resident=lambda b: 2) == policy.STREAM_2
    assert resolve_build(5, 600000, resident=lambda b: 2, block_mode=True) == (8, 512, 8)
    assert resolve_build(5, 600000, resident=lambda b: 5 if b.cluster == 2 else 2, block_mode=True) == (2, 512, 16)
    # STREAM_ROWS rows wider than STREAM_WIDTH stream in token mode only: on 3x512x4 while
    # its clusters are resident, else on 2x512x4 while its are, else on 1x512x4; up to
    # STREAM_WIDTH, rows stream where 2x512x16 would take at least STREAM_WAVE_RATIO times
    # the streamed build's waves (but two of them past STREAM_TWO_WAVE_WIDTH logits)
    wide = policy.STREAM_WIDTH + 8
    assert resolve_build(policy.STREAM_ROWS, wide) == policy.STREAM_3
    assert resolve_build(policy.STREAM_ROWS, wide, resident=lambda b: policy.STREAM_ROWS - (b == policy.STREAM_3)) \
        == policy.STREAM_2
    assert resolve_build(policy.STREAM_ROWS, wide, resident=lambda b: 1) == policy.STREAM
    assert not resolve_build(policy.STREAM_ROWS, wide, block_mode=True).streams
    assert not resolve_build(policy.STREAM_ROWS - 1, wide).streams
    two16 = policy.Build.of(2, 16)
    resident = lambda b: 2 if b == two16 else 4  # noqa: E731
    assert not resolve_build(2, policy.STREAM_WIDTH, resident=resident).streams  # one wave each
    # two against one: streamed up to STREAM_TWO_WAVE_WIDTH logits, past it staged
    assert resolve_build(4, policy.STREAM_TWO_WAVE_WIDTH, resident=resident) == policy.STREAM_2
    assert not resolve_build(4, policy.STREAM_TWO_WAVE_WIDTH + 8, resident=resident).streams
    assert not resolve_build(4, policy.STREAM_WIDTH, resident=resident).streams
    assert not resolve_build(5, policy.STREAM_WIDTH, resident=resident).streams  # three against two
    assert resolve_build(8, policy.STREAM_WIDTH, resident=resident) == policy.STREAM  # four against two
    assert not resolve_build(3, policy.Build.of(1, 16).stage, resident=lambda b: 2).streams


def test_build_validation():
    logits, lengths = _row(64, 64)
    for bad in ((3, 8), (4, 16), (8, 1024, 8), "8x512", "8x512x8x1", (8.0, 8), True):
        with pytest.raises(ValueError, match=r"build .* is not"):
            simulate(logits, lengths, 512, build=bad)
    wide = np.zeros((1, 262152), np.uint16)
    with pytest.raises(ValueError, match="262152"):
        simulate(wide, np.array([10], np.int32), 512, build="8x512x8")
    for streamed in ("1x512x4", "2x512x4"):
        simulate(wide, np.array([10], np.int32), 512, build=streamed)  # token rows stream
    # block rows stage keys, 8 a vector (SPEC 2.2): 8 times the stage, and no more
    simulate(np.zeros((1, 131072), np.uint16), np.array([10], np.int32), 512, True, build="1x512x4")
    with pytest.raises(ValueError, match=r"width = 131080 exceeds the capacity 131072 of build 1x512x4 in block mode"):
        simulate(np.zeros((1, 131080), np.uint16), np.array([10], np.int32), 512, True, build="1x512x4")
    with pytest.raises(ValueError, match=r"width = 262152 exceeds the capacity 262144 of build 2x512x4 in block mode"):
        simulate(np.zeros((1, 262152), np.uint16), np.array([10], np.int32), 512, True, build="2x512x4")
    with pytest.raises(ValueError, match="1048584"):
        simulate(np.zeros((1, 1048584), np.uint16), np.array([1], np.int32), 512)
    for spelling in ("16x512x16", (16, 16), (16, 512, 16), Build(16, 512, 16)):
        assert Build.parse(spelling) == Build(16, 512, 16)
        assert Build.parse(spelling).name == "16x512x16"
    with pytest.raises(ValueError):
        Build.parse("4x512x8")


def test_input_validation():
    logits, lengths = _row(64, 64)
    with pytest.raises(ValueError, match="k = 100"):
        simulate(logits, lengths, 100)
    with pytest.raises(ValueError, match="lengths"):
        simulate(logits, np.array([65], np.int32), 512)
    with pytest.raises(ValueError, match="uint16"):
        simulate(logits.astype(np.int32), lengths, 512)
    with pytest.raises(ValueError, match="2-D"):
        simulate(logits[0], lengths, 512)
    out, trace = simulate(np.zeros((0, 16), np.uint16), np.zeros(0, np.int32), 2048)
    assert out.shape == (0, 2048) and trace.shape == (0, 8)


def test_mutant_table():
    assert len(MUTANTS) >= 40
    ids = [number for number, _ in MUTANTS.values()]
    assert sorted(ids) == list(range(1, len(ids) + 1))
    assert all(doc for _, doc in MUTANTS.values())


def test_streamed_path_and_its_fallbacks():
    """1x512x4 and 2x512x4 (SPEC 2.12): a row past the stage streams (path 1 with the
    sampled fields); one value is each queue truncated at k vectors of top == cutoff (K =
    cutoff, A = 0); the samples at the row's lowest values make every vector's top exceed
    the cutoff and each queue overflow (reason 1: GV_c > STREAM_QUEUE, the chunks hold
    more), and the largest values at the samples underflow (reason 2), each then taking the
    direct path from global memory; every output the canonical answer, every trace the
    oracle's."""
    rng = np.random.default_rng(5)
    width = 140000
    lengths = np.array([width, width - 3, width, width - 1], np.int32)

    def samples(length):  # both streamed builds' sample positions
        return np.unique(np.concatenate([sample_positions(length, c) for c in (1, 2)]))

    normal = rng.integers(0x3000, 0x3F00, size=width).astype(np.uint16)
    one = np.full(width, 0x3F80, np.uint16)
    over = rng.integers(0x4000, 0x4300, size=width).astype(np.uint16)
    over[samples(int(lengths[2]))] = 0x3000
    under = normal.copy()
    hits = samples(int(lengths[3]))
    under[hits] = 0x4000 + rng.permutation(hits.size).astype(np.uint16)
    logits = np.stack([normal, one, over, under])
    for build in (policy.STREAM, policy.STREAM_2):
        for k in policy.KS:
            out, trace = simulate(logits, lengths, k, False, build=build)
            assert check(logits, lengths, k, False, out, strict=True) == [], (build.name, k)
            assert np.array_equal(trace, expected_trace(logits, lengths, k, False, build)), (build.name, k)
            assert trace[:, :2].tolist() == [[1, 0], [1, 0], [2, 1], [2, 2]], trace
            assert trace[1, 4:].tolist() == [0, width - 3, 0xBF80, 0]  # G, E, K = the cutoff, A
            assert trace[2, 4] + min(trace[2, 5], k) > policy.STREAM_QUEUE


def test_a_streamed_row_is_the_direct_paths_answer():
    """SPEC 2.12: a streamed row, sampled or fallen back, writes the direct path's answer
    with its K and A: the same rows on the streamed builds and on builds that take them
    direct agree in out, kth and above."""
    rng = np.random.default_rng(11)
    width = 65536
    bits = bf16_bits_from_float32(rng.standard_normal((3, width)).astype(np.float32))
    bits[1, ::3] = 0x3F80
    lengths = np.array([width, width - 5, 40001], np.int32)
    for k in policy.KS:
        direct_out, direct_trace = simulate(bits, lengths, k, False, build="8x512x8")  # D = 65,536: direct
        assert (direct_trace[:, 0] == 2).all()
        for build in (policy.STREAM, policy.STREAM_2):
            out, trace = simulate(bits, lengths, k, False, build=build)
            assert (trace[:, 2] > 0).all()  # streamed: a sampled attempt
            np.testing.assert_array_equal(out, direct_out, err_msg=f"{build.name} k={k}")
            np.testing.assert_array_equal(trace[:, 6:], direct_trace[:, 6:])


@pytest.mark.parametrize("cluster", [1, 2, 3, 4, 8, 16])
@pytest.mark.parametrize("length", [32769, 40000, 65536, 131071, 524288, 1048576])
def test_sample_positions_spread_over_banks(length, cluster):
    """SPEC.md 2.4: each CTA's samples lie in its chunk, distinct, and every run of 32
    consecutive samples (a warp's reads of its own stage) lies in 32 different four-byte
    banks: the word index (offset >> 1) of sample j is j mod 32."""
    if length < 8 * cluster * 512:
        pytest.skip("no sampled row this short at this cluster (length > D >= 8 C T)")
    pos = sample_positions(length, cluster)
    nv = -(-length // 8)
    chunks = policy.sample_chunks(cluster)  # 3x512x4: one, the row (1x512x4's samples)
    assert chunks == (1 if cluster == 3 else cluster)
    per = policy.SAMPLES // chunks
    assert pos.size == policy.SAMPLES
    if chunks == 1:
        assert np.array_equal(pos, sample_positions(length, 1))
    for c in range(chunks):
        start, end = (c * nv) // chunks, ((c + 1) * nv) // chunks
        offsets = pos[c * per:(c + 1) * per] - 8 * start
        assert offsets.min() >= 0 and offsets.max() < min(8 * end, length) - 8 * start
        assert np.unique(offsets).size == per
        assert np.array_equal((offsets >> 1) % 32, np.arange(per) % 32)


@pytest.mark.parametrize("k", [512, 1024, 2048])
def test_register_top_span_rows_take_both_ways(k):
    """SPEC.md 2.13: the case register-top-span has, at every k, rows whose K the register
    build's window from the top places (K at most TOP_SPAN - 1 steps below the row's largest
    key M: bins 1 .. 511) and rows where it cannot (TOP_SPAN or more: the two passes), among
    them K exactly TOP_SPAN - 1 and TOP_SPAN steps below M, so that each side of the rule
    and its boundary is run."""
    from decode_topk.conformance.cases import cases
    from decode_topk.reference.topk import element_keys

    case = next(c for c in cases("ci") if c.name == "register-top-span")
    logits, lengths = case.generate()
    gaps = set()
    for row, length in zip(logits, lengths):
        keys = np.sort(element_keys(row, int(length), False).astype(np.int64))[::-1]
        gaps.add(int(keys[0] - keys[k - 1]))
    placed = {g for g in gaps if g <= policy.TOP_SPAN - 1}
    assert placed and gaps - placed, gaps
    assert {policy.TOP_SPAN - 1, policy.TOP_SPAN} <= gaps, gaps
