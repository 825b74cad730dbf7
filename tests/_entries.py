"""The GPU entry points of DecodeTopK available on this machine, behind one signature

    call(logits, lengths, k, out, block_mode=False, next_n=1, check_lengths=False)

(lengths holds one entry a request of next_n rows): 'dsl' (kernel/decode_topk_cute.py,
where nvidia-cutlass-dsl is installed), 'aot' (kernel/aot_loader.py, where the library for this GPU's arch is
built from this kernel source) and 'op' (the torch custom op, kernel/torch_ops.py, on its
backend). The GPU tests parametrize over these, so one test covers every way in.
"""

import pytest

torch = pytest.importorskip("torch")


def _dsl(logits, lengths, k, out, block_mode=False, next_n=1, check_lengths=False):
    from decode_topk.kernel import decode_topk_cute as dtk

    if next_n == 1:
        return dtk.decode_topk(logits, lengths, k, out=out, block_mode=block_mode, check_lengths=check_lengths)
    return dtk.decode_topk_seq_lens(logits, lengths, next_n, k, out=out, block_mode=block_mode,
                                    check_lengths=check_lengths)


def _aot(logits, lengths, k, out, block_mode=False, next_n=1, check_lengths=False):
    from decode_topk.kernel import aot_loader

    return aot_loader.decode_topk_aot(logits, lengths, k, out=out, block_mode=block_mode, next_n=next_n,
                                      check_lengths=check_lengths)


def _op(logits, lengths, k, out, block_mode=False, next_n=1, check_lengths=False):
    import decode_topk.kernel.torch_ops  # noqa: F401  (registers the ops)

    if check_lengths:
        pytest.skip("the custom op has no check mode (it never synchronizes)")
    if next_n == 1:
        torch.ops.decode_topk.decode_topk(logits, lengths, k, out, block_mode)
    else:
        torch.ops.decode_topk.decode_topk_seq_lens(logits, lengths, next_n, k, out, block_mode)
    return out


def _have_dsl():
    try:
        import cutlass  # noqa: F401
    except ImportError:
        return False
    return True


def _have_aot():
    from decode_topk.kernel import aot_loader

    try:
        aot_loader.load_library()
    except (FileNotFoundError, OSError, aot_loader.StaleLibraryError):
        return False
    return True


def available():
    """[(name, call)] of the entry points this machine has (empty without a CUDA GPU)."""
    if not torch.cuda.is_available():
        return []
    found = [("dsl", _dsl)] if _have_dsl() else []
    if _have_aot():
        found.append(("aot", _aot))
    if found:
        found.append(("op", _op))
    return found


def params():
    """pytest parameters over available(), or one skipped parameter."""
    found = available()
    if not found:
        return [pytest.param(None, marks=pytest.mark.skip(reason="no CUDA GPU with the DSL or the AOT library"))]
    return [pytest.param(call, id=name) for name, call in found]
