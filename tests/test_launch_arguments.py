"""The JIT launch's arguments carry every layout the kernel reads as dynamic (CPU, no GPU).

The kernel derives next_n from the lengths' extent (rows / len(lengths)) and addresses rows
by the logits' row stride; both were compiled as dynamic modes, and an argument built with
a static layout leaves them unset: on the H200 that read lengths out of bounds (an illegal
address on the first DSL launch, found by tests/test_seq_lens_gpu.py). `from_dlpack`
prints a dynamic mode as `?`.
"""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("cutlass", reason="nvidia-cutlass-dsl is not installed")

import cuda.bindings.driver as cuda  # noqa: E402

from decode_topk.kernel import decode_topk_cute as dtk  # noqa: E402


def test_lengths_extent_and_row_stride_are_dynamic():
    logits = torch.zeros((4, 1024), dtype=torch.bfloat16)
    lengths = torch.zeros((2,), dtype=torch.int32)
    out = torch.zeros((4, 512), dtype=torch.int32)
    trace = torch.zeros((4, 8), dtype=torch.int32)
    args = dtk.cute_arguments(logits, lengths, out, trace, stream=cuda.CUstream(0))
    assert len(args) == 5
    assert "o (?):" in repr(args[1]), repr(args[1])  # the lengths' extent
    assert ":(?{i64},1)" in repr(args[0]), repr(args[0])  # the logits' row stride


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message a machine without a GPU gets")
def test_precompile_without_a_gpu_says_so_before_compiling(monkeypatch):
    compiled = []
    monkeypatch.setattr(dtk, "compile_decode_topk", lambda *a, **kw: compiled.append(a))
    with pytest.raises(RuntimeError, match="needs a CUDA GPU, and torch sees none"):
        dtk.precompile(8192)
    assert compiled == []
