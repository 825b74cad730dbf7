"""DecodeTopK as torch custom ops, for engines that trace (torch.compile) and capture (CUDA
graphs) their decode step.

    import decode_topk.kernel.torch_ops  # registers the ops
    torch.ops.decode_topk.decode_topk(logits, lengths, k, out, block_mode)
    torch.ops.decode_topk.decode_topk_seq_lens(logits, seq_lens, next_n, k, out, block_mode)

Both are out-variants (they write `out`, return nothing) with fake implementations, so
torch.compile traces them without running them; the fake implementations check all that
tensor metadata shows (k, dtypes, shapes, devices, strides, the width), so a bad call fails
while tracing as it would at run time.

CUDA inputs run on one of two backends, chosen once (`backend()`): the AOT library
(kernel/aot_loader.py) when it is present for the device's arch and built from this kernel
source, else the DSL module (kernel/decode_topk_cute.py). `DECODE_TOPK_BACKEND=aot` or `dsl`
forces one. Both take the same arguments and raise the same ValueErrors (one copy of the
checks, policy.check_inputs). Once `precompile` has run (DSL) or the library is loaded
(AOT), a call compiles nothing, allocates nothing and never synchronizes: it checks
metadata and enqueues one launch on the current stream (rows beyond the 16-CTA build's two
waves are refused, not split).

CPU inputs run the NumPy reference (decode_topk.reference.decode_topk_reference) with the
GPU op's length semantics (lengths clamped to [0, width]; seq_lens as
decode_topk_seq_lens), so `torch.library.opcheck` and CPU tests can run the ops; it is a
reference, not fast.
"""

from __future__ import annotations

import functools
import os
import warnings

import torch

from . import policy

NAMESPACE = "decode_topk"
BACKEND_VARIABLE = "DECODE_TOPK_BACKEND"
BACKENDS = ("aot", "dsl")


# ---------------------------------------------------------------------------------------
# Backend choice
# ---------------------------------------------------------------------------------------
def backend() -> str:
    """'aot' or 'dsl', the backend of CUDA inputs: $DECODE_TOPK_BACKEND when set (aot|dsl;
    unset, empty or 'auto': choose), else the AOT library when it loads for this device
    and matches the kernel source, else the DSL. ValueError for another value of the
    variable; RuntimeError saying why when the forced backend (or, unforced, neither)
    can be used. Decided once per value of the variable."""
    return _backend(os.environ.get(BACKEND_VARIABLE, ""))


def _aot_problem():
    """None when the AOT library loads (present for the device's arch, built from this
    kernel source), else why not."""
    try:
        from . import aot_loader

        aot_loader.load_library()
    except (ImportError, OSError, RuntimeError) as e:  # absent (FileNotFoundError), unloadable, stale
        return f"the AOT library cannot be used: {e}"
    return None


def _dsl_problem():
    """None when the DSL module imports, else why not."""
    try:
        from . import decode_topk_cute  # noqa: F401
    except ImportError as e:
        return f"the CuTe DSL does not import ({e}); install it with `pip install 'decode-topk[kernel]'`"
    return None


@functools.lru_cache(maxsize=None)
def _backend(value: str) -> str:
    forced = value.strip().lower()
    if forced not in ("", "auto") + BACKENDS:
        raise ValueError(f"{BACKEND_VARIABLE}={value!r} is not one of aot, dsl (or unset / auto: the AOT "
                         f"library when it matches the kernel source, else the DSL)")
    if forced in BACKENDS:
        problem = _aot_problem() if forced == "aot" else _dsl_problem()
        if problem is not None:
            raise RuntimeError(f"{BACKEND_VARIABLE}={forced}, but {problem}")
        return forced
    aot = _aot_problem()
    if aot is None:
        return "aot"
    dsl = _dsl_problem()
    if dsl is not None:
        raise RuntimeError(f"no DecodeTopK backend for CUDA tensors: {aot}; and {dsl}")
    from . import aot_loader

    if aot_loader.available():  # a library is there but unusable (stale, wrong arch): say so, not ignore it quietly
        warnings.warn(f"DecodeTopK runs on the DSL: {aot}", stacklevel=4)
    return "dsl"


def _launch_cuda(logits, lengths, k, out, block_mode, next_n):
    if backend() == "dsl":
        from . import decode_topk_cute as dtk

        if next_n == 1:
            dtk.decode_topk(logits, lengths, k, out=out, block_mode=block_mode)
        else:
            dtk.decode_topk_seq_lens(logits, lengths, next_n, k, out=out, block_mode=block_mode)
    else:
        from . import aot_loader

        aot_loader.decode_topk_aot(logits, lengths, k, out=out, block_mode=block_mode, next_n=next_n)


# ---------------------------------------------------------------------------------------
# What metadata shows: the fake implementations' checks, and the CPU implementation's
# (the CUDA path checks this and more, data pointers included, in policy.check_inputs,
# with the same messages).
# ---------------------------------------------------------------------------------------
def check_metadata(logits, lengths, k, out, next_n=1):
    """Raise ValueError naming the bad value unless the metadata of these arguments is what
    a launch takes (SPEC.md 1.5): policy.check_arguments without what only device memory
    shows (the CUDA device, base addresses), so fake tensors and CPU tensors are judged by
    the very checks, and messages, of a launch."""
    policy.check_arguments(logits, lengths, k, out, next_n, memory=False)


def _reference(logits, lengths, k, out, block_mode, next_n):
    """The CPU implementation: the NumPy reference on the rows' lengths as the kernel takes
    them (clamped to [0, width]; with next_n > 1, row r of request r // next_n has
    seq_lens[r // next_n] - next_n + 1 + r % next_n)."""
    import numpy as np

    from decode_topk.reference.topk import decode_topk_reference, seq_lens_lengths

    check_metadata(logits, lengths, k, out, next_n)
    width = logits.shape[1]
    bits = logits.detach().contiguous().view(torch.int16).numpy().view(np.uint16)
    row_lengths = seq_lens_lengths(lengths.detach().numpy(), next_n, width)  # next_n 1: the clamp alone
    out.copy_(torch.from_numpy(decode_topk_reference(bits, row_lengths, k, block_mode)))


def _run(logits, lengths, k, out, block_mode, next_n):
    if logits.device.type == "cpu":
        _reference(logits, lengths, k, out, block_mode, next_n)
    elif logits.device.type == "cuda":
        _launch_cuda(logits, lengths, k, out, block_mode, next_n)
    else:
        raise ValueError(f"logits are on {logits.device}: the decode_topk ops run on CUDA devices (and on the "
                         f"CPU, through the NumPy reference)")


# ---------------------------------------------------------------------------------------
# The ops
# ---------------------------------------------------------------------------------------
@torch.library.custom_op(f"{NAMESPACE}::decode_topk", mutates_args=("out",))
def decode_topk(logits: torch.Tensor, lengths: torch.Tensor, k: int, out: torch.Tensor,
                block_mode: bool = False) -> None:
    """out[r] = indices of the k largest elements of logits[r, :lengths[r]] (SPEC.md)."""
    _run(logits, lengths, k, out, block_mode, 1)


@torch.library.custom_op(f"{NAMESPACE}::decode_topk_seq_lens", mutates_args=("out",))
def decode_topk_seq_lens(logits: torch.Tensor, seq_lens: torch.Tensor, next_n: int, k: int, out: torch.Tensor,
                         block_mode: bool = False) -> None:
    """Row r: request r // next_n, length clamp(seq_lens[r // next_n] - next_n + 1 + r % next_n,
    0, width) (decode_topk_cute.decode_topk_seq_lens)."""
    _run(logits, seq_lens, k, out, block_mode, next_n)


@decode_topk.register_fake
def _decode_topk_fake(logits, lengths, k, out, block_mode=False):
    check_metadata(logits, lengths, k, out, 1)


@decode_topk_seq_lens.register_fake
def _decode_topk_seq_lens_fake(logits, seq_lens, next_n, k, out, block_mode=False):
    check_metadata(logits, seq_lens, k, out, next_n)
