"""The GPU kernel as a conformance implementation: NumPy in, NumPy out, over a launcher.

One class serves both ways of running the kernel ('aot': the ahead-of-time library,
kernel/aot_loader.py's AOT; 'jit': the DSL, kernel/decode_topk_cute.py's JIT), because
what the suite needs is the same: copy the bits to a CUDA bfloat16 tensor, poison out and
trace, launch the traced variant on the build given or the policy's, synchronize, copy
back, and say which build ran. Imports torch (only when used), never cutlass unless the
'jit' launcher is asked for.
"""

import numpy as np

from decode_topk.kernel import policy
from decode_topk.kernel.policy import TRACE_FIELDS, Build, Variant

POISON = 0x7EADBEEF  # written into out and trace before every launch; never a valid value


def to_device_bf16(logits_bits, device="cuda"):
    """CUDA bfloat16 [rows, width] holding the uint16 BF16 bit patterns exactly, with a
    row stride rounded up to a multiple of 8 (a padded view when width % 8 != 0)."""
    import torch

    bits = np.ascontiguousarray(logits_bits, dtype=np.uint16)
    rows, width = bits.shape
    padded = width + (-width) % 8
    host = torch.from_numpy(bits.view(np.int16))
    dev = torch.empty((rows, padded), dtype=torch.int16, device=device)
    if padded != width:
        dev.fill_(0x7FC0)  # a NaN past the width: never read
    dev[:, :width].copy_(host)
    return dev.view(torch.bfloat16)[:, :width]


class _Recording:
    """A launcher that passes everything to `launcher` and keeps the Variant it enqueued:
    the build the front end chose, so that run_numpy never chooses one itself."""

    def __init__(self, launcher):
        self.launcher = launcher
        self.variant = None

    def resident(self, variant, device):
        return self.launcher.resident(variant, device)

    def enqueue(self, variant, *args):
        self.variant = variant
        self.launcher.enqueue(variant, *args)


def run_numpy(launcher, logits_bits, lengths, k, block_mode=False, build=None, trace=True, device="cuda"):
    """(out, trace, build) as NumPy for NumPy inputs through `launcher` (policy.launch):
    copies to the GPU, poisons out and trace with POISON, launches (the traced variant
    when trace), synchronizes and copies back. trace is None when not asked for."""
    import torch

    logits = to_device_bf16(logits_bits, device)
    rows, width = logits.shape
    k, trace = int(k), bool(trace)
    lens = torch.from_numpy(np.ascontiguousarray(lengths, dtype=np.int32)).to(device)
    out = torch.full((rows, k), POISON, dtype=torch.int32, device=device)
    tr = torch.full((rows, len(TRACE_FIELDS)), POISON, dtype=torch.int32, device=device) if trace else None
    recording = _Recording(launcher)
    policy.launch(recording, logits, lens, k, out, block_mode, tr, build)
    torch.cuda.synchronize(logits.device)
    if recording.variant is not None:
        ran = recording.variant.build
    elif build is not None:  # an empty batch enqueues nothing
        ran = Build.parse(build)
    else:
        ran = policy.build_for(rows, width, lambda b: launcher.resident(Variant(k, b, bool(block_mode), trace),
                                                                         logits.device), bool(block_mode), k)
    return out.cpu().numpy(), (tr.cpu().numpy() if trace else None), ran


class GpuImpl:
    """impl(logits_bits, lengths, k, block_mode, build=None) -> (out, trace): the traced
    variant on `build` or the policy's; `last_build` is the Build of the latest call."""

    def __init__(self, launcher, name):
        from decode_topk.kernel.aot_loader import no_cuda_device_reason  # torch only, no DSL

        reason = no_cuda_device_reason()
        if reason is not None:
            raise RuntimeError(f"the {name!r} implementation needs a CUDA GPU: {reason}")
        self.launcher = launcher
        self.name = name
        self.last_build = None

    def __call__(self, logits_bits, lengths, k, block_mode=False, build=None):
        out, trace, self.last_build = run_numpy(self.launcher, logits_bits, lengths, k, block_mode, build)
        return out, trace


def aot_impl():
    """The registry loader of 'aot' (fails early: absent or stale library, no GPU)."""
    from decode_topk.kernel import aot_loader

    aot_loader.load_library()
    return GpuImpl(aot_loader.AOT, "aot")


def jit_impl():
    """The registry loader of 'jit' (the DSL must import)."""
    from decode_topk.kernel import decode_topk_cute

    return GpuImpl(decode_topk_cute.JIT, "jit")
