"""DecodeTopK as torch custom ops, for engines that trace (torch.compile) and capture (CUDA
graphs) their decode step.

    import decode_topk.kernel.torch_ops  # registers the ops
    torch.ops.decode_topk.decode_topk(logits, lengths, k, out, block_mode)
    torch.ops.decode_topk.decode_topk_seq_lens(logits, seq_lens, next_n, k, out, block_mode)

Both are out-variants (they write `out`, return nothing) with fake implementations, so
torch.compile traces them without running them. Behind them: the DSL module
(kernel/decode_topk_cute.py) where nvidia-cutlass-dsl is installed, else the AOT library
(kernel/aot_loader.py, `.aot`); `backend()` says which. Both take the same arguments and
raise the same ValueErrors (one copy of the checks, policy.check_inputs). Once
`precompile` has run (DSL) or the library is loaded (AOT), a call compiles nothing,
allocates nothing and never synchronizes: it checks metadata and enqueues one launch on
the current stream (rows beyond the 16-CTA build's two waves are refused, not split).
"""

from __future__ import annotations

import functools

import torch

NAMESPACE = "decode_topk"


@functools.lru_cache(maxsize=None)
def backend():
    """'dsl' when cutlass (the CuTe DSL) imports, else 'aot'."""
    try:
        import cutlass  # noqa: F401
    except ImportError:
        return "aot"
    return "dsl"


def _launch(logits, lengths, k, out, block_mode, next_n):
    if backend() == "dsl":
        from . import decode_topk_cute as dtk

        if next_n == 1:
            dtk.decode_topk(logits, lengths, k, out=out, block_mode=block_mode)
        else:
            dtk.decode_topk_seq_lens(logits, lengths, next_n, k, out=out, block_mode=block_mode)
    else:
        from . import aot_loader

        aot_loader.decode_topk_aot(logits, lengths, k, out=out, block_mode=block_mode, next_n=next_n)


@torch.library.custom_op(f"{NAMESPACE}::decode_topk", mutates_args=("out",))
def decode_topk(logits: torch.Tensor, lengths: torch.Tensor, k: int, out: torch.Tensor,
                block_mode: bool = False) -> None:
    """out[r] = indices of the k largest elements of logits[r, :lengths[r]] (SPEC.md)."""
    _launch(logits, lengths, k, out, block_mode, 1)


@torch.library.custom_op(f"{NAMESPACE}::decode_topk_seq_lens", mutates_args=("out",))
def decode_topk_seq_lens(logits: torch.Tensor, seq_lens: torch.Tensor, next_n: int, k: int, out: torch.Tensor,
                         block_mode: bool = False) -> None:
    """Row r: request r // next_n, length clamp(seq_lens[r // next_n] - next_n + 1 + r % next_n,
    0, width) (decode_topk_cute.decode_topk_seq_lens)."""
    _launch(logits, seq_lens, k, out, block_mode, next_n)


def _fake_check(logits, lengths, k, out, next_n):
    """What a fake tensor can tell (shapes, dtypes): the real op checks everything."""
    if logits.dim() != 2 or logits.dtype != torch.bfloat16:
        raise ValueError(f"logits must be bfloat16 [rows, width], got {logits.dtype} {tuple(logits.shape)}")
    rows = logits.shape[0]
    if tuple(out.shape) != (rows, k) or out.dtype != torch.int32:
        raise ValueError(f"out must be int32 {(rows, k)}, got {out.dtype} {tuple(out.shape)}")
    if lengths.dim() != 1 or lengths.dtype != torch.int32 or lengths.shape[0] * next_n != rows:
        raise ValueError(f"lengths must be int32 ({rows // max(next_n, 1)},), got {lengths.dtype} "
                         f"{tuple(lengths.shape)}")


@decode_topk.register_fake
def _decode_topk_fake(logits, lengths, k, out, block_mode=False):
    _fake_check(logits, lengths, k, out, 1)


@decode_topk_seq_lens.register_fake
def _decode_topk_seq_lens_fake(logits, seq_lens, next_n, k, out, block_mode=False):
    _fake_check(logits, seq_lens, k, out, next_n)
