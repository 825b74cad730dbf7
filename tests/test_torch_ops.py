"""The custom ops' registration and fake implementations, on the CPU (meta tensors: what
torch.compile traces with). The real launches are tests/test_torch_op_gpu.py."""

import pytest

torch = pytest.importorskip("torch")

import decode_topk.kernel.torch_ops as ops  # noqa: E402


def _meta(rows, width, k, requests=None):
    return (torch.empty((rows, width), dtype=torch.bfloat16, device="meta"),
            torch.empty((rows if requests is None else requests,), dtype=torch.int32, device="meta"),
            torch.empty((rows, k), dtype=torch.int32, device="meta"))


def test_ops_are_registered_out_variants():
    for name in ("decode_topk", "decode_topk_seq_lens"):
        schema = getattr(torch.ops.decode_topk, name).default._schema
        assert str(schema.returns) == "[]", schema
        assert any(a.name == "out" and a.alias_info is not None and a.alias_info.is_write
                   for a in schema.arguments), schema


def test_fake_implementations_check_what_metadata_shows():
    logits, lengths, out = _meta(4, 1024, 512)
    torch.ops.decode_topk.decode_topk(logits, lengths, 512, out, False)
    logits, seq_lens, out = _meta(4, 1024, 512, requests=2)
    torch.ops.decode_topk.decode_topk_seq_lens(logits, seq_lens, 2, 512, out, True)
    with pytest.raises(ValueError, match=r"out must be int32 \(4, 2048\)"):
        torch.ops.decode_topk.decode_topk(logits, lengths, 2048, out, False)
    with pytest.raises(ValueError, match=r"lengths must be int32 \(2,\)"):
        torch.ops.decode_topk.decode_topk_seq_lens(logits, lengths, 2, 512, out, False)


def test_backend_is_the_dsl_where_it_imports():
    try:
        import cutlass  # noqa: F401
        expected = "dsl"
    except ImportError:
        expected = "aot"
    assert ops.backend() == expected
