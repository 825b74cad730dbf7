"""The DSL-free policy module (kernel/policy.py): the Build and Variant types, the launch
policy at every threshold of SPEC.md 2.1 (conformance/policy_checks.py) with its planted
bugs, and the flag check of the front end."""

import numpy as np
import pytest

from decode_topk.conformance import policy_checks
from decode_topk.kernel import policy
from decode_topk.kernel.policy import BUILDS, Build, Variant


def test_policy_agrees_with_spec_at_every_edge():
    assert policy_checks.edge_problems() == []


@pytest.mark.parametrize("name", sorted(policy_checks.POLICY_MUTANTS))
def test_every_policy_mutant_is_seen(name):
    with policy_checks.planted(name):
        assert policy_checks.edge_problems(), f"policy mutant {name} survived the edge table"
    assert policy_checks.edge_problems() == [], "the mutant must be removed after the block"


def test_unknown_policy_mutant():
    with pytest.raises(ValueError, match="unknown policy mutant 'nope'"):
        with policy_checks.planted("nope"):
            pass


def test_build_spellings():
    for build in BUILDS:
        for spelling in (build, build.name, (build.cluster, build.vectors), tuple(build), list(build),
                         tuple(np.int64(x) for x in build)):
            assert Build.parse(spelling) == build
        assert str(build) == build.name == f"{build.cluster}x{build.threads}x{build.vectors}"
        assert build.stage == build.cluster * build.threads * build.vectors * 8
        # a token row of a streamed build may be as wide as any; a block row never streams
        assert build.capacity == (policy.MAX_WIDTH if build.streams else build.stage)
        # the register build and 3x512x4 take token rows only (SPEC 2.13, 2.1); a block row's
        # stage holds keys, 8 a vector (SPEC 2.2)
        token_only = build.registers or build.name == "3x512x4"
        assert build.token_only == token_only
        assert (build.capacity_in(False), build.capacity_in(True)) == (build.capacity,
                                                                       0 if token_only else 8 * build.stage)
    assert [b.name for b in BUILDS if b.streams] == [
        b.name for b in (policy.STREAM, policy.STREAM_2, policy.STREAM_4, policy.STREAM_8, policy.STREAM_3)] == [
        "1x512x4", "2x512x4", "4x512x4", "8x512x4", "3x512x4"]
    for bad in ("8x1024x8", "8x16", "8x512", "8-512-8", "x", (8,), (8, 512, 8, 1), (True, 8), 8, None, 8.0):
        with pytest.raises(ValueError, match="build"):
            Build.parse(bad)


def test_variants_and_names():
    every = policy.variants((False, True))
    assert len(every) == len(set(every)) == len(policy.KS) * sum(len(b.modes) for b in BUILDS) * 2
    # token rows only (SPEC 2.13, 2.1)
    assert [b.name for b in BUILDS if b.modes != (False, True)] == ["1x512x2", "3x512x4"]
    assert len({v.name for v in every}) == len(every)
    assert Variant(512, Build.of(16, 16), True, False).name == "dtk_k512_c16_v16_blk1_tr0"


@pytest.mark.parametrize("value, want", [(True, True), (False, False), (0, False), (1, True),
                                         (np.bool_(True), True)])
def test_flags_accept_bools(value, want):
    assert policy.check_flag("block_mode", value) is want


@pytest.mark.parametrize("value", ["false", "True", "", 2, -1, None, 1.0, np.array([True])])
def test_flags_refuse_the_rest(value):
    with pytest.raises(ValueError, match=r"block_mode=.* must be a bool"):
        policy.check_flag("block_mode", value)


def test_maxima_reads_plans_and_refuses():
    # row_max's plan (SPEC 2.5): a word a lane up to 32 words, 2 words a lane at 48 (3x512x4:
    # 24 lanes) and 64 (4x512x4), 16-byte loads at 128 and 256; no plan where 32 lanes of a
    # divisor of the warps cannot reach every word (a lane's words must lie in one CTA).
    assert [policy.maxima_reads(c, t) for c, t in ((1, 512), (2, 512), (3, 512), (4, 512), (8, 512), (4, 1024),
                                                   (16, 512))] == [(1, 1), (1, 1), (2, 1), (2, 1), (4, 4), (4, 4),
                                                                   (8, 4)]
    for cluster, threads in ((64, 32), (33, 32)):
        with pytest.raises(ValueError, match=f"{cluster} CTAs of {threads} threads"):
            policy.maxima_reads(cluster, threads)


def test_launch_slices():
    wide = policy.MAX_WIDTH
    # block rows: one launch at any count (until session 45, two waves of the 16-CTA build)
    assert policy.launch_slices(30, wide, lambda b: 7, block_mode=True) == [slice(0, 30)]
    assert policy.build_for(30, wide, lambda b: 7, block_mode=True) == policy.Build.of(8, 8)  # in waves
    assert policy.launch_slices(32, wide, lambda b: 7, next_n=4, block_mode=True) == [slice(0, 32)]
    assert policy.launch_slices(0, wide, lambda b: 7, block_mode=True) == []
    # token rows past the two waves stream (2x512x4 at this width): one launch takes them all
    assert policy.build_for(30, wide, lambda b: 7) == policy.STREAM_2
    assert policy.launch_slices(30, wide, lambda b: 7) == [slice(0, 30)]
    assert policy.launch_slices(0, wide, lambda b: 7) == []


def test_block_rows_past_two_cta_capacity():
    """Past 2x512x8's block capacity and 8x512x8's resident clusters (SPEC.md 2.1, session
    46): 2x512x16 only while its one wave holds rows that would give 8x512x8 a third wave;
    else 8x512x8 in waves. (H200 residencies: 7, 30 and 66.)"""
    resident = lambda b: {16: 7, 8: 30, 2: 66}.get(b.cluster, 30)  # noqa: E731
    two16, eight = policy.Build.of(2, 16), policy.Build.of(8, 8)
    wide = policy.MAX_WIDTH
    for rows, want in ((30, eight), (31, eight), (60, eight), (61, two16), (66, two16), (67, eight), (128, eight)):
        assert policy.build_for(rows, wide, resident, block_mode=True) == want, rows
    # up to 2x512x8's capacity the 2-CTA build takes them at any row count
    assert policy.build_for(128, policy.Build.of(2, 8).capacity_in(True), resident, block_mode=True) == \
        policy.Build.of(2, 8)


def test_k512_streams_wider_rows_on_one_cta():
    """At k = 512 one wave of 1x512x4 takes streaming batches up to STREAM_1_WIDTH_K512
    logits (SPEC.md 2.1); at k = 2048 (and for k None) 2x512x4 does past STREAM_1_WIDTH."""
    width = policy.STREAM_1_WIDTH + 8
    # (3x512x4's clusters: fewer than the rows, 39 on the H200)
    resident = lambda b: 132 if b == policy.STREAM else 39 if b == policy.STREAM_3 else 66  # noqa: E731
    assert policy.build_for(128, width, resident, k=512) == policy.STREAM
    assert policy.build_for(128, width, resident, k=2048) == policy.STREAM_2
    assert policy.build_for(128, width, resident) == policy.STREAM_2
    assert policy.build_for(133, width, resident, k=512) == policy.STREAM_2  # two waves of it
    assert policy.build_for(64, width, resident, k=512) == policy.STREAM_2  # 2x512x4 in one wave
    assert policy.build_for(128, policy.STREAM_1_WIDTH_K512 + 8, resident, k=512) == policy.STREAM_2


def test_a_truthy_string_is_no_block_mode():
    """'false' is truthy: taken as block_mode it would silently switch the mode."""
    from decode_topk.conformance.checker import check
    from decode_topk.reference import decode_topk_reference
    from decode_topk.reference.model import simulate

    bits, lengths = np.zeros((1, 16), np.uint16), np.array([16], np.int32)
    for run in (decode_topk_reference, simulate):
        with pytest.raises(ValueError, match="block_mode='false' must be a bool"):
            run(bits, lengths, 512, "false")
    with pytest.raises(ValueError, match="block_mode='false' must be a bool"):
        check(bits, lengths, 512, "false", decode_topk_reference(bits, lengths, 512))
    with pytest.raises(ValueError, match="block_mode='false' must be a bool"):
        policy.launch(None, None, None, 512, block_mode="false")  # refused before any tensor is read
