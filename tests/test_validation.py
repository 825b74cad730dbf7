"""Bad input gets a ValueError naming the value, before any launch (SPEC.md 1.5).

The checks are one function, check_inputs in kernel/policy.py, which the host front end
(policy.launch) calls for the DSL module, the AOT loader and the custom op alike. The CPU tests call it directly for what a CPU machine can build; the GPU
tests send each kind of bad input through every entry point (tests/_entries.py).
"""

import re

import pytest

torch = pytest.importorskip("torch")

import _entries  # noqa: E402
from decode_topk.kernel import policy  # noqa: E402


def _resident(build):
    return {(8, 8): 15, (4, 8): 30, (8, 16): 15, (16, 16): 7}[(build.cluster, build.vectors)]


def _args(rows=4, width=1024, k=512, device="cpu"):
    return (torch.zeros((rows, width), dtype=torch.bfloat16, device=device),
            torch.full((rows,), width, dtype=torch.int32, device=device), k,
            torch.empty((rows, k), dtype=torch.int32, device=device))


@pytest.mark.parametrize("change, message", [
    (lambda a: (a[0].float(),) + a[1:], "torch.float32"),
    (lambda a: (a[0][None],) + a[1:], r"2-D .* shape \(1, 4, 1024\)"),
    (lambda a: a, "must be on a CUDA device, got cpu"),
    (lambda a: a[:2] + (100,) + a[3:], "k=100 is not one of"),
    (lambda a: a[:2] + (True,) + a[3:], "k=True is not one of"),
    (lambda a: ("logits",) + a[1:], "must be a torch.Tensor, got str"),
], ids=["dtype", "not-2d", "cpu", "k", "k-bool", "not-a-tensor"])
def test_check_inputs_on_cpu(change, message):
    with pytest.raises(ValueError, match=message):
        policy.check_inputs(*change(_args()), _resident)


# -- every entry point on a GPU ---------------------------------------------------------
def _cuda(rows=4, width=1024, k=512):
    return list(_args(rows, width, k, "cuda"))


def _strided(rows, width, stride, offset=0):
    buffer = torch.zeros(rows * stride + offset + 8, dtype=torch.bfloat16, device="cuda")
    return buffer[offset:offset + rows * stride].view(rows, stride)[:, :width]


def _bad(kind):
    """(args, message) of one kind of bad input."""
    a = _cuda()
    if kind == "dtype":
        a[0] = a[0].float()
        return a, "must be torch.bfloat16, got torch.float32"
    if kind == "not-2d":
        a[0] = a[0].view(2, 2, 1024)
        return a, r"2-D \[rows, width\], got shape \(2, 2, 1024\)"
    if kind == "cpu-logits":
        a[0] = a[0].cpu()
        # The custom op also runs on CPU tensors (the reference), so for it the fault is
        # the other tensors' device; the kernel entries refuse the CPU logits themselves.
        return a, r"must be on a CUDA device, got cpu|lengths is on cuda:0, logits on cpu"
    if kind == "row-stride":
        a[0] = _strided(4, 1000, 1004)
        return a, "row stride 1004 is not a multiple of 8"
    if kind == "unaligned-base":
        a[0] = _strided(4, 1024, 1024, offset=1)
        return a, "base address 0x[0-9a-f]+ is not 16-byte aligned"
    if kind == "inner-stride":
        a[0] = torch.zeros((4, 2048), dtype=torch.bfloat16, device="cuda")[:, ::2]
        return a, r"unit inner stride, got strides \(2048, 2\)"
    if kind == "k":
        a[2] = 256
        return a, r"k=256 is not one of \(512, 1024, 2048\)"
    if kind == "out-shape":
        a[3] = torch.empty((4, 511), dtype=torch.int32, device="cuda")
        return a, r"out must have shape \(4, 512\), got \(4, 511\)"
    if kind == "out-dtype":
        a[3] = torch.empty((4, 512), dtype=torch.int64, device="cuda")
        return a, "out must be torch.int32, got torch.int64"
    if kind == "out-device":
        a[3] = a[3].cpu()
        return a, "out is on cpu, logits on cuda"
    if kind == "out-not-contiguous":
        a[3] = torch.empty((4, 1024), dtype=torch.int32, device="cuda")[:, :512]
        return a, "out must be contiguous"
    if kind == "lengths-dtype":
        a[1] = a[1].long()
        return a, "lengths must be torch.int32, got torch.int64"
    if kind == "lengths-shape":
        a[1] = a[1][:3]
        return a, r"lengths must have shape \(4,\), got \(3,\)"
    if kind == "lengths-device":
        a[1] = a[1].cpu()
        return a, "lengths is on cpu, logits on cuda"
    if kind == "too-wide":
        a = _cuda(rows=1, width=policy.MAX_WIDTH + 8)
        return a, r"row width 1048584 is outside \[0, 1048576\]"
    raise AssertionError(kind)


KINDS = ("dtype", "not-2d", "cpu-logits", "row-stride", "unaligned-base", "inner-stride", "k", "out-shape",
         "out-dtype", "out-device", "out-not-contiguous", "lengths-dtype", "lengths-shape", "lengths-device",
         "too-wide")


@pytest.mark.gpu
@pytest.mark.parametrize("call", _entries.params())
@pytest.mark.parametrize("kind", KINDS)
def test_bad_input_raises_before_launch(call, kind):
    args, message = _bad(kind)
    out = args[3]
    if out.is_cuda and out.dtype == torch.int32:
        out.fill_(-7)
    with pytest.raises(ValueError, match=message):
        call(*args)
    if out.is_cuda and out.dtype == torch.int32:
        torch.cuda.synchronize()
        assert bool((out == -7).all()), "a launch happened"


@pytest.mark.gpu
@pytest.mark.parametrize("call", _entries.params())
def test_rows_past_two_waves_of_the_16_cta_build_take_one_launch(call):
    """Block rows past the 16-CTA build's two waves, refused until session 45, take one
    launch (SPEC 2.1: their stage of keys fits smaller clusters, max_rows is None); token
    rows there stream (2x512x4). One value, so the canonical answers are known: token
    0 .. 511, block 0 .. 510 and the pinned newest block."""
    from decode_topk.kernel import aot_loader

    width = policy.MAX_WIDTH
    rows = policy.WAVES_16 * (aot_loader.max_active_clusters(512, 16, 16, True) if _entries._have_aot() else 7) + 1
    logits = torch.zeros((rows, width), dtype=torch.bfloat16, device="cuda")
    lengths = torch.full((rows,), width // 8, dtype=torch.int32, device="cuda")
    out = torch.full((rows, 512), -7, dtype=torch.int32, device="cuda")
    call(logits, lengths, 512, out, block_mode=True)
    torch.cuda.synchronize()
    newest = width // 64 - 1
    want = torch.cat([torch.arange(511, dtype=torch.int32), torch.tensor([newest], dtype=torch.int32)]).cuda()
    assert bool((out == want).all())
    out.fill_(-7)
    call(logits, lengths, 512, out)
    torch.cuda.synchronize()
    assert bool((out == torch.arange(512, dtype=torch.int32, device="cuda")).all())


@pytest.mark.gpu
@pytest.mark.parametrize("call", _entries.params())
@pytest.mark.parametrize("next_n, message", [(3, "rows=4 is not a multiple of next_n=3"),
                                             (0, "next_n=0 must be an int >= 1")])
def test_bad_next_n(call, next_n, message):
    logits, lengths, k, out = _cuda()
    with pytest.raises(ValueError, match=message):
        call(logits, lengths[:1], k, out, next_n=next_n)


@pytest.mark.gpu
@pytest.mark.parametrize("call", _entries.params())
@pytest.mark.parametrize("bad, row", [(-5, 2), (1025, 3)])
def test_check_mode_names_the_first_bad_length(call, bad, row):
    logits, lengths, k, out = _cuda()
    lengths[row] = bad
    lengths[row + 1:] = bad  # a later bad row too: the first one is named
    with pytest.raises(ValueError, match=re.escape(f"lengths[{row}]={bad} is outside [0, 1024]")):
        call(logits, lengths, k, out, check_lengths=True)
    call(logits, lengths, k, out)  # without the check the kernel clamps (SPEC.md 1.5)
    torch.cuda.synchronize()


@pytest.mark.gpu
@pytest.mark.parametrize("call", _entries.params())
def test_check_mode_on_seq_lens(call):
    logits, _, k, out = _cuda()
    seq_lens = torch.tensor([1024, 1025], dtype=torch.int32, device="cuda")
    with pytest.raises(ValueError, match=re.escape("seq_lens[1]=1025 is outside [0, 1024]")):
        call(logits, seq_lens, k, out, next_n=2, check_lengths=True)
