"""Programmatic dependent launch (SPEC.md 2.10): DecodeTopK waits on its predecessor grid
before it reads its inputs.

A producer kernel lets its dependents launch at its first instruction, spins for about
100 us, and only then writes the logits. DecodeTopK, launched right after it on the same
stream with the programmatic-serialization attribute, may start while the producer still
spins; a kernel that read before `griddepcontrol.wait` would see the previous iteration's
logits, so every iteration's output is checked against its own source. Needs a CUDA GPU
and the DSL (the JIT path).
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
cutlass = pytest.importorskip("cutlass", reason="nvidia-cutlass-dsl is not installed")

import cuda.bindings.driver as cuda  # noqa: E402
import cutlass.cute as cute  # noqa: E402
from cutlass import Int32  # noqa: E402
from cutlass.cute.runtime import from_dlpack  # noqa: E402

from decode_topk.conformance.checker import check  # noqa: E402
from decode_topk.kernel import decode_topk_cute as dtk  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")]

SPIN_CYCLES = 200_000  # about 100 us at the H200's clock: longer than a decode_topk host call
ITERATIONS = 64
POISON = 0x7EADBEEF
PRODUCER_BLOCKS = 16


@cute.kernel
def _producer(src: cute.Tensor, dst: cute.Tensor, words: Int32):
    cute.arch.griddepcontrol_launch_dependents()  # dependents may start now, before the writes
    start = dtk.read_clock()
    spins = Int32(0)
    while dtk.read_clock() - start < SPIN_CYCLES:
        spins = spins + 1
    first = cute.arch.block_idx()[0] * 256 + cute.arch.thread_idx()[0]
    for j in cutlass.range(first, words, cute.arch.grid_dim()[0] * 256):
        dst[j] = src[j]


@cute.jit
def _produce(src: cute.Tensor, dst: cute.Tensor, words: Int32, stream: cuda.CUstream):
    # 16 blocks, so most SMs stay free: a DecodeTopK CTA takes a whole SM's registers (512
    # threads x 128), so on an SM the producer holds it could only start once the producer
    # left, and without the wait nothing would be early enough to show.
    _producer(src, dst, words).launch(grid=[PRODUCER_BLOCKS, 1, 1], block=[256, 1, 1], stream=stream)


def _words(tensor):
    """A 1-D int32 view of a contiguous int16 tensor (two logits a word)."""
    return from_dlpack(tensor.view(-1).view(torch.int32), assumed_align=16).mark_layout_dynamic()


def _violating_iterations():
    """Run the producer / DecodeTopK pairs back to back; the iterations whose output
    breaks the contract on that iteration's own logits."""
    rows, width, k = 8, 131072, 2048
    rng = np.random.default_rng(2026)
    sources = [rng.integers(0, 1 << 16, size=(rows, width), dtype=np.uint16) for _ in range(ITERATIONS)]
    on_device = [torch.from_numpy(bits.view(np.int16)).cuda() for bits in sources]
    logits = torch.zeros((rows, width), dtype=torch.int16, device="cuda")
    lengths = torch.full((rows,), width, dtype=torch.int32, device="cuda")
    outs = [torch.empty((rows, k), dtype=torch.int32, device="cuda") for _ in range(ITERATIONS)]
    stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
    produce = cute.compile(_produce, _words(on_device[0]), _words(logits), Int32(0), stream)
    dtk.decode_topk(logits.view(torch.bfloat16), lengths, k, out=outs[0])  # compile before timing matters
    torch.cuda.synchronize()
    for source, out in zip(on_device, outs):
        out.fill_(POISON)
        produce(_words(source), _words(logits), Int32(rows * width // 2), stream)
        dtk.decode_topk(logits.view(torch.bfloat16), lengths, k, out=out)
    torch.cuda.synchronize()
    lengths_np = np.full(rows, width, dtype=np.int32)
    return [(i, violations[0]) for i, (bits, out) in enumerate(zip(sources, outs))
            if (violations := check(bits, lengths_np, k, False, out.cpu().numpy()))]


def test_decode_topk_reads_logits_only_after_its_producer_finishes():
    bad = _violating_iterations()
    assert not bad, f"{len(bad)} of {ITERATIONS} iterations violate; first: iteration {bad[0][0]}: {bad[0][1]}"


def test_without_the_wait_the_test_fails(monkeypatch):
    """The planted bug: DecodeTopK compiled without griddepcontrol.wait reads the logits
    while the producer still spins, so the test above must see violations."""
    monkeypatch.setattr(cute.arch, "griddepcontrol_wait", lambda *args, **kwargs: None)
    monkeypatch.setattr(dtk, "_compiled", {})  # compile afresh, without the wait
    bad = _violating_iterations()
    assert bad, "no iteration violated without griddepcontrol.wait: the PDL test cannot fail"
