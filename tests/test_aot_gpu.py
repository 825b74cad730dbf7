"""The AOT library on a GPU: the conformance suite through 'aot' at the ci level, and hand
checks of kernel/aot_loader.py. Skips without torch, a CUDA device or the library
(`python -m decode_topk.kernel.aot` builds it; carry `kernel/aot` or install the platform wheel). A stale library
(built from another kernel source) fails, on purpose.
"""

import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from decode_topk.conformance.gpu_impl import POISON, run_numpy  # noqa: E402
from decode_topk.kernel import aot_loader, policy  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"),
    pytest.mark.skipif(not aot_loader.available(), reason=f"{aot_loader.library_path()} not built"),
]

def _rows(rng, rows, width, short=False):
    bits = rng.integers(0, 1 << 16, size=(rows, width), dtype=np.uint16)
    lengths = rng.integers(0, 600 if short else width + 1, size=rows).astype(np.int32)
    return bits, lengths


def test_library_matches_kernel_source():
    info = aot_loader.library_info()
    assert info["variants"], "empty library"
    have = {(v["k"], v["cluster"], v["vectors"], v["block_mode"], v["trace"]) for v in info["variants"]}
    want = {(v.k, v.build.cluster, v.build.vectors, v.block_mode, v.trace) for v in policy.variants((False, True))}
    assert have == want


@pytest.mark.parametrize("every_build", [False, True], ids=["policy-build", "every-build"])
def test_conformance_suite_ci(every_build):
    """`python -m decode_topk.conformance --impl aot --level ci [--build all]`: outputs against the
    contract, traces against the model on the build that ran."""
    from decode_topk.conformance.suite import run_suite
    result = run_suite("aot", "ci", stream=sys.stdout, builds=list(policy.BUILDS) if every_build else None)
    assert result.ok, f"{result.violation_count} violations"


@pytest.mark.parametrize("block_mode", [False, True])
@pytest.mark.parametrize("build", list(policy.BUILDS))
def test_trace_matches_model_every_build(build, block_mode):
    from decode_topk.conformance.checker import check
    from decode_topk.reference.model import simulate

    if block_mode not in build.modes:  # the register build: token rows only (SPEC 2.13)
        with pytest.raises(ValueError, match="takes token rows only"):
            run_numpy(aot_loader.AOT, *_rows(np.random.default_rng(7), 2, 64), 512, True, build=build)
        return
    rng = np.random.default_rng(7)
    # long enough for the sampled (or streamed) path; within the 1-CTA builds' capacity in
    # this mode (1x512x4: 65,536 token logits, streamed; its stage in block mode)
    width = min(build.capacity_in(block_mode), {16: 73728, 1: 65536}.get(build.cluster, 40960))
    bits, lengths = _rows(rng, 6, width)
    # the direct path's last length, plus one logit: the sampled path's edge (where the
    # build has one)
    lengths[:3] = (width, width - 1, min(width, policy.direct_max_length(build.cluster, build.vectors) + 1))
    for k in policy.KS:
        out, trace, used = run_numpy(aot_loader.AOT, bits, lengths, k, block_mode, build=build, trace=True)
        assert used == build
        m_out, m_trace = simulate(bits, lengths, k, block_mode, build=build)
        np.testing.assert_array_equal(trace, m_trace, err_msg=f"k={k} build={build} block={block_mode}")
        assert check(bits, lengths, k, block_mode, out) == []


def test_short_rows_and_poison_overwritten():
    rng = np.random.default_rng(1)
    bits, lengths = _rows(rng, 16, 4096, short=True)
    for k in policy.KS:
        for block_mode in (False, True):
            out, trace, _ = run_numpy(aot_loader.AOT, bits, lengths, k, block_mode, trace=True)
            assert not (out == np.int32(POISON)).any()
            assert not (trace == np.int32(POISON)).any()
            n = lengths if not block_mode else (lengths + 7) // 8
            for r in range(bits.shape[0]):
                if n[r] <= k:
                    assert (out[r, n[r]:] == -1).all()


def test_garbage_past_length_is_ignored():
    """Two batches equal before each length and different (NaN, garbage) after: both
    outputs satisfy the contract, and the traces are equal."""
    from decode_topk.conformance.checker import check

    rng = np.random.default_rng(2)
    width = 65536
    bits, lengths = _rows(rng, 8, width)
    other = bits.copy()
    pos = np.arange(width)[None, :]
    past = pos >= lengths[:, None]
    other[past] = np.uint16(0x7FC0)
    bits[past] = rng.integers(0, 1 << 16, size=int(past.sum()), dtype=np.uint16)
    for block_mode in (False, True):
        a_out, a_trace, _ = run_numpy(aot_loader.AOT, bits, lengths, 2048, block_mode, trace=True)
        b_out, b_trace, _ = run_numpy(aot_loader.AOT, other, lengths, 2048, block_mode, trace=True)
        assert check(bits, lengths, 2048, block_mode, a_out) == []
        assert check(other, lengths, 2048, block_mode, b_out) == []
        np.testing.assert_array_equal(a_trace, b_trace)


def test_register_build_odd_width():
    """The register build loads every lane inside the width before the length is known
    (SPEC.md 2.13): under a width of 8,189 (a padded view whose last vector is partial,
    loaded lane by lane), lengths around each k and at each lane of the last vectors, with
    NaN past each length, give the contract's answer and the model's trace."""
    from decode_topk.conformance.checker import check
    from decode_topk.reference.model import simulate

    rng = np.random.default_rng(4)
    width = policy.REGISTER.stage - 3
    lengths = np.array(sorted({0, 1, *(k + d for k in policy.KS for d in (-1, 0, 1)), *range(width - 9, width + 1)}),
                       np.int32)
    bits = rng.integers(0, 1 << 16, size=(lengths.size, width), dtype=np.uint16)
    bits[1::2, :] = np.uint16(0x3F80)  # every other row one value: a warp's adds at one word beside stray keys
    # +NaN past each length, the largest key: a lane counted or written past it moves K or is written
    bits[np.arange(width)[None, :] >= lengths[:, None]] = np.uint16(0x7FC0)
    for k in policy.KS:
        out, trace, used = run_numpy(aot_loader.AOT, bits, lengths, k, False, build=policy.REGISTER, trace=True)
        assert used == policy.REGISTER
        _, m_trace = simulate(bits, lengths, k, False, build=policy.REGISTER)
        np.testing.assert_array_equal(trace, m_trace, err_msg=f"k={k}")
        assert check(bits, lengths, k, False, out) == []


def test_padded_rows_side_stream_and_empty():
    from decode_topk.conformance.checker import check

    rng = np.random.default_rng(3)
    bits, lengths = _rows(rng, 5, 40000)
    big = torch.zeros((5, 40960), dtype=torch.int16, device="cuda")
    big[:, :40000] = torch.from_numpy(bits.view(np.int16)).cuda()
    logits = big.view(torch.bfloat16)[:, :40000]  # row stride 40960 > width
    lens = torch.from_numpy(lengths).cuda()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        out = aot_loader.decode_topk_aot(logits, lens, 512)
    s.synchronize()
    assert check(bits, lengths, 512, False, out.cpu().numpy()) == []
    empty = aot_loader.decode_topk_aot(logits[:0], lens[:0], 512)
    assert tuple(empty.shape) == (0, 512)


def test_a_forced_build_must_exist_and_hold_the_width():
    """The build override (the other input checks: tests/test_validation.py)."""
    logits = torch.zeros((4, 4096), dtype=torch.bfloat16, device="cuda")
    lens = torch.full((4,), 4096, dtype=torch.int32, device="cuda")
    with pytest.raises(ValueError, match=r"build \(3, 8\) is not one of"):
        aot_loader.decode_topk_aot(logits, lens, 512, build=(3, 8))
    wide = torch.zeros((1, 524288), dtype=torch.bfloat16, device="cuda")
    with pytest.raises(ValueError, match="holds token rows of up to 262144 logits, not 524288"):
        aot_loader.decode_topk_aot(wide, lens[:1], 512, build=(8, 8))


def test_occupancy_query():
    for build in policy.BUILDS:
        n = aot_loader.max_active_clusters(2048, build.cluster, build.vectors, False, False)
        assert n is None or n > 0
