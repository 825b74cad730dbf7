"""The case catalogue: deterministic, well-formed, and covering the required boundaries."""

import numpy as np
import pytest

from decode_topk.conformance.cases import CASES, KERNEL_BOUNDARY_LENGTHS, LEVELS, boundary_lengths, cases, indexer_row
from decode_topk.reference import KS, element_keys, order_key
from decode_topk.conformance import coverage
from decode_topk.kernel import policy
from decode_topk.kernel.policy import BUILDS, Build


@pytest.fixture(scope="module")
def ci_data():
    return {c.name: c.generate() for c in cases("ci")}


@pytest.fixture(scope="module")
def full_shapes():
    """(width, lengths) of every full-level case (generating them takes a few seconds)."""
    result = {}
    for c in cases("full"):
        logits, lengths = c.generate()
        result[c.name] = (logits.shape[1], lengths)
    return result


def test_table_well_formed():
    names = [c.name for c in CASES]
    assert len(names) == len(set(names))
    assert len({c.seed for c in CASES}) == len(CASES)
    for c in CASES:
        assert c.level in LEVELS and c.comment
        assert set(c.ks) <= set(KS) and set(c.modes) <= {False, True}
    assert set(cases("ci")) < set(cases("full")) == set(CASES)
    with pytest.raises(ValueError, match="level"):
        cases("nightly")


def test_ci_generation_deterministic(ci_data):
    for c in cases("ci"):
        logits, lengths = c.generate()
        again_logits, again_lengths = ci_data[c.name]
        assert np.array_equal(logits, again_logits) and np.array_equal(lengths, again_lengths), c.name
        assert logits.dtype == np.uint16 and lengths.dtype == np.int32
        assert logits.shape[1] % 8 == 0


def test_ci_covers_every_k_and_mode():
    for k in KS:
        for mode in (False, True):
            assert any(k in c.ks and mode in c.modes for c in cases("ci"))


def test_ci_covers_boundary_lengths_under_wider_rows(ci_data):
    covered = {int(length) for logits, lengths in ci_data.values()
               for length in lengths if length < logits.shape[1]}
    required = {0, 1, 7, 8, 9}
    for k in KS:
        required |= {k - 1, k, k + 1, 8 * k - 1, 8 * k, 8 * k + 1}
    assert required <= covered
    assert required <= set(boundary_lengths())


def test_most_cases_have_garbage_past_length(ci_data, full_shapes):
    shapes = {name: (logits.shape[1], lengths) for name, (logits, lengths) in ci_data.items()}
    shapes.update(full_shapes)
    with_garbage = [name for name, (width, lengths) in shapes.items() if np.any(lengths < width)]
    assert len(with_garbage) >= 0.8 * len(shapes)


def test_ci_has_specials_of_both_signs(ci_data):
    valid = np.concatenate([logits[r, :length] for logits, lengths in ci_data.values()
                            for r, length in enumerate(lengths)])
    nan = (valid & 0x7FFF) > 0x7F80
    assert np.any(nan & (valid >= 0x8000)) and np.any(nan & (valid < 0x8000))
    for bits in (0x0000, 0x8000, 0x7F80, 0xFF80):
        assert np.any(valid == bits), hex(bits)


def test_mostly_neg_inf_has_fewer_than_k_finite_blocks(ci_data):
    logits, lengths = ci_data["mostly-neg-inf"]
    found = False
    for r, length in enumerate(lengths):
        keys = element_keys(logits[r], length, True)
        finite = np.count_nonzero(keys != 0x007F)
        found |= keys.size > 2048 and finite < 512
    assert found


def test_plateau_holds_k(ci_data):
    logits, lengths = ci_data["plateau"]
    keys = order_key(logits[0, :lengths[0]])
    for k in KS:
        kth = np.sort(keys)[::-1][k - 1]
        assert np.count_nonzero(keys == kth) >= 20000
        assert np.count_nonzero(keys > kth) < k


def test_ci_rows_have_monotone_and_one_value(ci_data):
    logits, lengths = ci_data["monotone"]
    keys = order_key(logits[0, :lengths[0]]).astype(np.int32)
    assert np.all(np.diff(keys) > 0)
    keys = order_key(logits[1, :lengths[1]]).astype(np.int32)
    assert np.all(np.diff(keys) < 0)
    logits, lengths = ci_data["one-value"]
    assert all(np.unique(logits[r, :lengths[r]]).size == 1 for r in range(len(lengths)))


def test_full_covers_kernel_boundaries(full_shapes):
    covered = {int(length) for width, lengths in full_shapes.values() for length in lengths}
    assert set(KERNEL_BOUNDARY_LENGTHS) <= covered
    assert 262144 in {width for width, _ in full_shapes.values()}
    assert any(width == 131072 and lengths.size == 64 for width, lengths in full_shapes.values())


def test_indexer_distinct_values():
    rng = np.random.default_rng(2024)
    counts = {rho: np.unique(indexer_row(rng, 131072, rho)).size for rho in (0.0, 0.9, 0.999)}
    print(f"distinct BF16 values in a 131072-wide indexer-like row: {counts}")
    assert 100 <= counts[0.9] <= 300
    assert counts[0.0] > counts[0.9] > counts[0.999]


def _top_slot_cases():
    return [c for c in cases("ci") if c.name.startswith("top-slot-")]


def test_top_slot_cases_cover_every_build():
    # Every build of 4 or more CTAs. A 1-CTA build's top slot, at the shortest length
    # reaching it, holds only the pinned newest block (whose logits are never read), so its
    # slots are covered by the one-cta cases and the ci rows up to 65,536 logits instead; a
    # 2-CTA build's top slot (from 57,345 and 122,881 logits) lies inside the ci rows of
    # 65,536 and 131,072 logits, which reach it (test_coverage's model-at-ci test), as does
    # the streamed 4x512x4's (from 49,177 logits; its staged rows are direct only), and the
    # streamed 8x512x4's (from 98,305 logits: the ci rows of 131,072, in both modes).
    assert sorted(name for c in _top_slot_cases() for name in c.make.keywords["builds"]) == sorted(
        b.name for b in BUILDS if b.cluster > 2 and not b.streams)


def _chunk_counts(build, length):
    """Vectors of each CTA's chunk (SPEC.md 2.2)."""
    nv = -(-length // 8)
    return [((c + 1) * nv) // build.cluster - (c * nv) // build.cluster for c in range(build.cluster)]


def test_top_slot_rows_are_the_shortest_to_stage_every_ctas_top_slot(ci_data):
    for case in _top_slot_cases():
        logits, lengths = ci_data[case.name]
        assert logits.shape[1] > lengths.max()  # garbage past the length: the last vector is masked
        builds = [Build.parse(name) for name in case.make.keywords["builds"]]
        for length in set(lengths.tolist()):
            # a chunk longer than (V - 1) T vectors reaches slot V - 1: at the length in every
            # CTA of every build, one logit shorter not in some CTA of one of them
            reach = [[count > (b.vectors - 1) * b.threads for count in _chunk_counts(b, length)] for b in builds]
            shorter = [[count > (b.vectors - 1) * b.threads for count in _chunk_counts(b, length - 1)] for b in builds]
            assert all(map(all, reach)) and not all(map(all, shorter)), (case.name, length)


def test_top_slot_rows_hold_selected_values_in_the_top_slot(ci_data):
    """Every vector a build stages in its top slot holds a key above the row's k-th largest
    at the smallest k, in both modes, so a bug confined to that slot loses selected
    indices."""
    k = min(KS)
    for case in _top_slot_cases():
        logits, lengths = ci_data[case.name]
        for r, length in enumerate(lengths.tolist()):
            for block_mode in (False, True):
                keys = element_keys(logits[r], length, block_mode)
                kth = np.sort(keys)[keys.size - k]
                for name in case.make.keywords["builds"]:
                    vectors = coverage.top_slot_vectors(name, length)
                    assert vectors.size >= Build.parse(name).cluster
                    for g in vectors.tolist():
                        top = keys[g] if block_mode else keys[8 * g: 8 * g + 8].max()
                        assert top > kth, (case.name, r, block_mode, name, g)


def test_the_sanitizer_cases_reach_every_path_of_every_build():
    """conformance/sanitize.py's cases, as its loop runs them (each k, mode and build that
    holds the width), reach on every build each path SPEC 2.3 lets that build take, by the
    model's traces: a build whose sampled path no case reaches is a build the sanitizers
    never ran there (the 1-CTA builds before session 6's cases)."""
    from decode_topk.conformance import coverage as cv
    from decode_topk.conformance import sanitize
    from decode_topk.conformance.cases import CASES
    from decode_topk.reference.model import simulate

    catalogue = {c.name: c for c in CASES}
    names = [name for name, _ in sanitize.CASES]
    assert set(names) <= set(catalogue), sorted(set(names) - set(catalogue))
    reached = {b: set() for b in policy.BUILDS}
    for name in names:
        case = catalogue[name]
        bits, lengths = case.generate()
        for block_mode in case.modes:
            for k in (k for k in (512, 2048) if k in case.ks):
                for build in policy.BUILDS:
                    if bits.shape[1] <= build.capacity_in(block_mode):
                        _, trace = simulate(bits, lengths, k, block_mode, build=build)
                        reached[build] |= {(int(p), int(r)) for p, r in trace[:, :2]}
    for build in policy.BUILDS:
        want = {(0, 0), (2, 0)}  # short, direct
        if policy.direct_max_length(build.cluster, build.vectors) < build.capacity:
            # sampled, its underflow, and its overflow (a staged attempt's one pass that
            # cannot place K, or a streamed queue past its capacity)
            want |= {(1, 0), (2, cv.UNDERFLOW), (2, cv.OVERFLOW)}
        assert want <= reached[build], (build.name, sorted(want - reached[build]))


def test_ci_has_the_streamed_builds_boundaries(ci_data):
    """1x512x4 and 2x512x4 (SPEC 2.12): ci rows at each stage's last length and the first
    streamed ones, a streamed masked last vector, each under a wider row (garbage past it),
    and rows whose 2-CTA chunks hold more than STREAM_QUEUE vectors (each CTA may
    overflow alone)."""
    covered = {int(length) for logits, lengths in ci_data.values() for length in lengths
               if length < logits.shape[1]}
    for build in (policy.STREAM, policy.STREAM_2):
        stage = build.stage
        assert {stage - 1, stage, stage + 1, stage + 8} <= covered, build.name
        assert any(length > stage and length % 8 for length in covered), build.name
    assert any(length > 2 * 8 * policy.STREAM_QUEUE and length % 8 for length in covered)
