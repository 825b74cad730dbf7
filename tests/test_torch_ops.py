"""The custom ops on the CPU: registration, the fake implementations (meta tensors: what
torch.compile traces with), the CPU implementation (the NumPy reference with the GPU op's
length semantics) under torch.library.opcheck, and the backend choice. The real CUDA
launches are tests/test_torch_op_gpu.py."""

import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import decode_topk.kernel.torch_ops as ops  # noqa: E402
from decode_topk.kernel import policy  # noqa: E402
from decode_topk.reference.topk import decode_topk_reference  # noqa: E402


def _meta(rows, width, k, requests=None):
    return (torch.empty((rows, width), dtype=torch.bfloat16, device="meta"),
            torch.empty((rows if requests is None else requests,), dtype=torch.int32, device="meta"),
            torch.empty((rows, k), dtype=torch.int32, device="meta"))


def _bits(logits):
    return logits.contiguous().view(torch.int16).numpy().view(np.uint16)


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
    with pytest.raises(ValueError, match=r"out must have shape \(4, 2048\)"):
        torch.ops.decode_topk.decode_topk(logits, lengths, 2048, out, False)
    with pytest.raises(ValueError, match=r"seq_lens must have shape \(2,\)"):
        torch.ops.decode_topk.decode_topk_seq_lens(logits, lengths, 2, 512, out, False)
    with pytest.raises(ValueError, match="rows=4 is not a multiple of next_n=3"):
        torch.ops.decode_topk.decode_topk_seq_lens(logits, seq_lens, 3, 512, out, False)
    with pytest.raises(ValueError, match="logits must be torch.bfloat16, got torch.float16"):
        torch.ops.decode_topk.decode_topk(logits.to(torch.float16), lengths, 512, out, False)
    with pytest.raises(ValueError, match="row stride 1020 is not a multiple of 8"):
        torch.ops.decode_topk.decode_topk(torch.empty((4, 1020), dtype=torch.bfloat16, device="meta"),
                                          lengths, 512, out, False)
    with pytest.raises(ValueError, match=r"logits must have unit inner stride, got strides \(1, 4\)"):
        torch.ops.decode_topk.decode_topk(torch.empty((1024, 4), dtype=torch.bfloat16, device="meta").t(),
                                          lengths, 512, out, False)
    wide = torch.empty((4, policy.MAX_WIDTH + 8), dtype=torch.bfloat16, device="meta")
    with pytest.raises(ValueError, match="row width 1048584 is outside"):
        torch.ops.decode_topk.decode_topk(wide, lengths, 512, out, False)


def test_fake_refuses_k_100_as_the_real_op_does():
    logits, lengths, _ = _meta(4, 1024, 512)
    out = torch.empty((4, 100), dtype=torch.int32, device="meta")
    with pytest.raises(ValueError) as fake:
        torch.ops.decode_topk.decode_topk(logits, lengths, 100, out, False)
    with pytest.raises(ValueError) as real:  # the CUDA path's first check (policy.check_inputs)
        policy.check_logits(torch.empty((4, 1024), dtype=torch.bfloat16), 100)
    assert str(fake.value) == str(real.value) == "k=100 is not one of (512, 1024, 2048)"
    cpu = [torch.zeros((4, 1024), dtype=torch.bfloat16), torch.zeros(4, dtype=torch.int32),
           torch.empty((4, 100), dtype=torch.int32)]
    with pytest.raises(ValueError, match=r"^k=100 is not one of"):
        torch.ops.decode_topk.decode_topk(cpu[0], cpu[1], 100, cpu[2], False)


def test_cpu_op_is_the_reference_with_the_kernels_lengths():
    """Lengths clamp to [0, width] as in the kernel; seq_lens give row r of request
    r // next_n the length seq_len - next_n + 1 + r % next_n; a row view of a wider buffer."""
    rng = np.random.default_rng(3)
    width, k = 1200, 512
    buffer = torch.from_numpy(rng.integers(0, 1 << 16, size=(6, 1208), dtype=np.uint16).view(np.int16))
    logits = buffer.view(torch.bfloat16)[:, :width]
    bits = _bits(logits)
    for block_mode in (False, True):
        lengths = torch.tensor([-3, 0, 5, 600, 1200, 5000], dtype=torch.int32)
        out = torch.full((6, k), 7, dtype=torch.int32)
        torch.ops.decode_topk.decode_topk(logits, lengths, k, out, block_mode)
        want = decode_topk_reference(bits, np.array([0, 0, 5, 600, 1200, 1200]), k, block_mode)
        np.testing.assert_array_equal(out.numpy(), want)

        seq_lens = torch.tensor([1, 700, 1300], dtype=torch.int32)  # next_n 2: rows (0, 1), (699, 700), (1200, 1200)
        torch.ops.decode_topk.decode_topk_seq_lens(logits, seq_lens, 2, k, out, block_mode)
        want = decode_topk_reference(bits, np.array([0, 1, 699, 700, 1200, 1200]), k, block_mode)
        np.testing.assert_array_equal(out.numpy(), want)


@pytest.mark.parametrize("block_mode", [False, True], ids=["token", "block"])
def test_opcheck_on_cpu(block_mode):
    g = torch.Generator().manual_seed(1)
    logits = torch.randn((4, 1536), generator=g).to(torch.bfloat16)
    out = torch.empty((4, 1024), dtype=torch.int32)
    lengths = torch.tensor([0, 700, 1100, 1536], dtype=torch.int32)
    torch.library.opcheck(torch.ops.decode_topk.decode_topk.default, (logits, lengths, 1024, out, block_mode))
    seq_lens = torch.tensor([1030, 1536], dtype=torch.int32)
    torch.library.opcheck(torch.ops.decode_topk.decode_topk_seq_lens.default,
                          (logits, seq_lens, 2, 1024, out, block_mode))


@pytest.fixture
def choose(monkeypatch, tmp_path):
    """backend() under a given DECODE_TOPK_BACKEND (None: unset), decided afresh, with no
    library where the loader looks (an empty $DECODE_TOPK_AOT_DIR)."""
    monkeypatch.setenv("DECODE_TOPK_AOT_DIR", str(tmp_path / "no_aot"))

    def call(value):
        if value is None:
            monkeypatch.delenv(ops.BACKEND_VARIABLE, raising=False)
        else:
            monkeypatch.setenv(ops.BACKEND_VARIABLE, value)
        ops._backend.cache_clear()
        return ops.backend()

    yield call
    ops._backend.cache_clear()


def _have_dsl():
    try:
        import decode_topk.kernel.decode_topk_cute  # noqa: F401
    except ImportError:
        return False
    return True


def test_backend_variable_must_name_a_backend(choose):
    with pytest.raises(ValueError, match=r"^DECODE_TOPK_BACKEND='cuda' is not one of aot, dsl"):
        choose("cuda")


def test_forced_aot_says_why_it_cannot_load(choose):
    with pytest.raises(RuntimeError, match=r"^DECODE_TOPK_BACKEND=aot, but the AOT library cannot be used: "
                                           r".*not found: looked in .*no_aot"):
        choose("aot")


@pytest.mark.skipif(not _have_dsl(), reason="the DSL does not import here")
def test_without_a_library_the_dsl_runs(choose):
    assert choose(None) == "dsl"
    assert choose("auto") == "dsl"
    assert choose(" DSL ") == "dsl"


def test_without_the_dsl_forced_dsl_and_auto_say_why(choose, monkeypatch):
    import decode_topk.kernel

    monkeypatch.setitem(sys.modules, "decode_topk.kernel.decode_topk_cute", None)  # import fails
    monkeypatch.delattr(decode_topk.kernel, "decode_topk_cute", raising=False)  # else `from . import` finds it
    with pytest.raises(RuntimeError, match=r"^DECODE_TOPK_BACKEND=dsl, but the CuTe DSL does not import"):
        choose("dsl")
    with pytest.raises(RuntimeError, match=r"^no DecodeTopK backend for CUDA tensors: the AOT library cannot "
                                           r"be used: .*; and the CuTe DSL does not import"):
        choose(None)
