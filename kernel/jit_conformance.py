"""The conformance suite's 'jit' implementation: DecodeTopK through the DSL
(kernel/decode_topk_cute.py's decode_topk), with the 'aot' implementation's conventions
(NumPy in and out, out and trace poisoned before every launch, the traced variant, the
build given or the policy's, `last_build` for the suite's trace comparison)."""

import numpy as np
import torch

from .aot_loader import POISON, parse_build, to_device_bf16


class JitImpl:
    """impl(logits_bits, lengths, k, block_mode, build=None) -> (out, trace)."""

    def __init__(self):
        if not torch.cuda.is_available():
            raise RuntimeError("the 'jit' implementation needs a CUDA GPU")
        from . import decode_topk_cute

        self.kernel = decode_topk_cute
        self.last_build = None

    def __call__(self, logits_bits, lengths, k, block_mode=False, build=None):
        dtk = self.kernel
        logits = to_device_bf16(logits_bits)
        rows, width = logits.shape
        lens = torch.from_numpy(np.ascontiguousarray(lengths, dtype=np.int32)).to(logits.device)
        out = torch.full((rows, int(k)), POISON, dtype=torch.int32, device=logits.device)
        trace = torch.full((rows, len(dtk.TRACE_FIELDS)), POISON, dtype=torch.int32, device=logits.device)
        forced = parse_build(build)
        if forced is None:
            cluster, threads, vectors = dtk.build_for(
                rows, width, lambda c, v: dtk.resident_clusters(c, v, int(k), bool(block_mode)))
        else:
            cluster, vectors = forced
            threads = dtk.threads_for(cluster)
        dtk.decode_topk(logits, lens, int(k), out=out, block_mode=bool(block_mode), trace=trace,
                        build=(cluster, vectors))
        torch.cuda.synchronize(logits.device)
        self.last_build = (cluster, threads, vectors)
        return out.cpu().numpy(), trace.cpu().numpy()
