"""conformance/gpu.py and conformance/gpu_check.py exercised on the CPU, with the model
(reference.model.simulate) standing in for the AOT library, so that the one device call
the GPU tool gets is not spent on a typo.
"""


import numpy as np
import pytest

torch = pytest.importorskip("torch")

from conformance import gpu_check as tc  # noqa: E402
from conformance.checker import check as np_check  # noqa: E402
from reference import policy  # noqa: E402
from reference.topk import decode_topk_reference  # noqa: E402

pytestmark = pytest.mark.slow


def test_torch_checker_agrees_with_numpy_checker():
    logits, lengths, _ = tc.make_batch(24, 4136, seed=1, device="cpu", chunk=8)
    bits = logits.view(torch.int16).numpy().view(np.uint16)
    lens = lengths.numpy()
    rng = np.random.default_rng(0)
    for k in (512, 2048):
        for block_mode in (False, True):
            ref = decode_topk_reference(bits, lens, k, block_mode)
            counts, offenders = tc.check(logits, lengths, k, block_mode, torch.from_numpy(ref))
            assert sum(counts.values()) == 0, counts
            for trial in range(12):
                m = ref.copy()
                r, j = rng.integers(0, m.shape[0]), rng.integers(0, k)
                m[r, j] = (-1, m[r, (j + 1) % k], rng.integers(0, max(1, lens[r])), 0x7EADBEEF)[trial % 4]
                want = sorted({v.row for v in np_check(bits, lens, k, block_mode, m)})
                _, got = tc.check(logits, lengths, k, block_mode, torch.from_numpy(m))
                assert want == sorted(got), (k, block_mode, trial)


def _fake_library(monkeypatch, mutant=0):
    """Patch kernel.aot_loader so that 'launches' run the model on CPU tensors."""
    from kernel import aot_loader
    from reference.model import simulate

    def build_of(rows, width, build):
        if build is None:
            c, _, v = policy.build_for(rows, width, lambda c, v: 10**6)
            return c, v
        return aot_loader.parse_build(build)

    def fake_decode(logits, lengths, k, out=None, block_mode=False, trace=None, build=None):
        bits = logits.contiguous().view(torch.int16).numpy().view(np.uint16)
        c, v = build_of(*bits.shape, build)
        o, t = simulate(bits, lengths.numpy(), k, block_mode, cluster=c, vectors=v, mutant=mutant)
        out = torch.from_numpy(o) if out is None else out.copy_(torch.from_numpy(o))
        if trace is None or trace is False:
            return out
        if trace is True:
            trace = torch.from_numpy(t)
        else:
            trace.copy_(torch.from_numpy(t))
        return out, trace

    def fake_run_numpy(bits, lengths, k, block_mode=False, build=None, trace=True, device="cpu"):
        c, v = build_of(*bits.shape, build)
        o, t = simulate(bits, lengths, k, block_mode, cluster=c, vectors=v, mutant=mutant)
        return o, t, (c, policy.threads_for(c), v)

    monkeypatch.setattr(aot_loader, "library_info", lambda: {"arch": "fake", "kernel_source_sha256": "0" * 64,
                                                             "variants": [{}] * 48})
    monkeypatch.setattr(aot_loader, "max_active_clusters", lambda *a, **kw: 10**6)
    monkeypatch.setattr(aot_loader, "resident_for", lambda *a, **kw: (lambda c, v: 10**6))
    monkeypatch.setattr(aot_loader, "decode_topk_aot", fake_decode)
    monkeypatch.setattr(aot_loader, "run_numpy", fake_run_numpy)


@pytest.mark.parametrize("mutant", [0, "gt_rank_collision"])
def test_gpu_conformance_tool_on_cpu(monkeypatch, tmp_path, capsys, mutant):
    from conformance import gpu as gc

    _fake_library(monkeypatch, mutant)
    monkeypatch.setattr(gc, "DEVICE", "cpu")
    rc = gc.main(["--out", str(tmp_path), "--rows", "40", "--width", "33024", "--trace-rows", "12",
                  "--skip-suite"])
    text = capsys.readouterr().out
    assert (tmp_path / "gpu_conformance.json").exists()
    assert "| batch | token | 512 |" in text and "| trace | block | 2048 |" in text
    assert rc == (0 if mutant == 0 else 1), text[-3000:]
