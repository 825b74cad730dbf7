"""conformance/gpu.py and conformance/gpu_check.py exercised on the CPU, with the model
(reference.model.simulate) standing in for the AOT library, so that the one device call
the GPU tool gets is not spent on a typo.
"""


import numpy as np
import pytest

torch = pytest.importorskip("torch")

from decode_topk.conformance import gpu_check as tc  # noqa: E402
from decode_topk.conformance.checker import check as np_check  # noqa: E402
from decode_topk.kernel import policy  # noqa: E402
from decode_topk.reference.topk import decode_topk_reference  # noqa: E402

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
    """Patch the AOT loader and the NumPy adapter so that 'launches' run the model on CPU
    tensors."""
    from decode_topk.conformance import gpu_impl
    from decode_topk.kernel import aot_loader
    from decode_topk.reference.model import simulate

    def build_of(rows, width, build, block_mode):
        if build is None:
            return policy.build_for(rows, width, lambda b: 10**6, block_mode)
        return policy.Build.parse(build)

    def fake_decode(logits, lengths, k, out=None, block_mode=False, trace=None, build=None):
        bits = logits.contiguous().view(torch.int16).numpy().view(np.uint16)
        o, t = simulate(bits, lengths.numpy(), k, block_mode, build=build_of(*bits.shape, build, block_mode),
                        mutant=mutant)
        out = torch.from_numpy(o) if out is None else out.copy_(torch.from_numpy(o))
        if trace is None or trace is False:
            return out
        if trace is True:
            trace = torch.from_numpy(t)
        else:
            trace.copy_(torch.from_numpy(t))
        return out, trace

    def fake_run_numpy(launcher, bits, lengths, k, block_mode=False, build=None, trace=True, device="cpu"):
        ran = build_of(*bits.shape, build, bool(block_mode))
        o, t = simulate(bits, lengths, k, block_mode, build=ran, mutant=mutant)
        return o, t, ran

    monkeypatch.setattr(aot_loader, "library_info", lambda: {"arch": "fake", "kernel_source_sha256": "0" * 64,
                                                             "variants": [{}] * 48})
    monkeypatch.setattr(aot_loader, "max_active_clusters", lambda *a, **kw: 10**6)
    monkeypatch.setattr(aot_loader, "resident_for", lambda *a, **kw: (lambda b: 10**6))
    monkeypatch.setattr(aot_loader, "decode_topk_aot", fake_decode)
    monkeypatch.setattr(gpu_impl, "run_numpy", fake_run_numpy)


@pytest.mark.parametrize("mutant", [0, "gt_rank_collision"])
def test_gpu_conformance_tool_on_cpu(monkeypatch, tmp_path, capsys, mutant):
    from decode_topk.conformance import gpu as gc

    _fake_library(monkeypatch, mutant)
    monkeypatch.setattr(gc, "DEVICE", "cpu")
    rc = gc.main(["--out", str(tmp_path), "--rows", "40", "--width", "33024", "--trace-rows", "12",
                  "--skip-suite"])
    text = capsys.readouterr().out
    assert (tmp_path / "gpu_conformance.json").exists()
    assert "| batch | token | 512 |" in text and "| trace | block | 2048 |" in text
    assert rc == (0 if mutant == 0 else 1), text[-3000:]


def test_soak_plan_parses():
    from decode_topk.conformance.soak import DEFAULT_PLAN, parse_plan

    assert parse_plan(["1024:10x2", "8:3"]) == [(1024, 10), (1024, 10), (8, 3)]
    assert sum(rows for _, rows in parse_plan(DEFAULT_PLAN)) >= 1_000_000


def test_grid_report_lists_every_target():
    """bench/grid.py's RESULTS.md writer on a made-up run (no GPU, no matplotlib)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
    import grid

    def point(rows, length, k, us):
        return {"data": "rho0.9", "mode": "token", "rows": rows, "length": length, "width": length, "k": k,
                "ragged": False, "next_n": 1, "build": "8x512x8", "launches": 1, "violations": 0, "dtk_us": us,
                "floor_us": us / 2, "torch_us": us * 4, "vs_floor": 2.0, "vs_torch": 0.25, "dtk_tb_s": 1.0,
                "floor_tb_s": 2.0}

    meta = {"date": "2026-11-30", "gpu": "NVIDIA H200 (test)", "torch": "x", "kernel_source_sha256": "0" * 64,
            "timing": "t"}
    others = [t for t in grid.TARGETS if t != (128, 65536, 512)]
    results = dict(meta, points=[point(r, n, k, 5.0) for (r, n, k) in others])
    targets = dict(meta, points=[point(128, 65536, 512, 99.0)])
    text = grid.results_md(results, [], grid.REPO / "bench" / "results" / "x.png", targets)
    # 5 us meets the other eleven (every target is at least 5.8 us); 99 us is 5.8x of 17.2
    assert text.count("| yes |") == len(others) == 11 and "no (5.8x)" in text
    assert "results/x.png" in text and "| 128 | 65536 | 512 | 17.2 | 99.0 (`run --targets`" in text
    # target / floor beside DecodeTopK / floor: 7.5 us over a 2.5-us floor at 1 x 131072 k2048
    row = next(line for line in text.splitlines() if line.startswith("| 1 | 131072 | 2048 |"))
    assert row.endswith("| 2.0 | 3.00 | 0.25 |"), row
    other = grid.results_md(dict(results, gpu="NVIDIA H100 80GB HBM3"), [], grid.REPO / "bench" / "results" / "x.png")
    assert next(line for line in other.splitlines() if line.startswith("| 1 | 131072 | 2048 |")).endswith(
        "| 2.0 | n/a | 0.25 |")


def test_torch_seq_lens_lengths_agrees_with_the_reference():
    from decode_topk.reference.topk import seq_lens_lengths

    seq = np.array([10, 0, 1, -5, 2**31 - 1], dtype=np.int32)
    for next_n in (1, 2, 3):
        got = tc.seq_lens_lengths(torch.from_numpy(seq), next_n, 9)
        assert got.dtype == torch.int32
        assert got.tolist() == seq_lens_lengths(seq, next_n, 9).tolist()


def test_launch_slices_take_every_batch_in_one_launch(monkeypatch):
    """No row count is refused since session 45 (SPEC 2.1: block rows stage keys), so the
    benchmarks' and the soak's slices are one launch in either mode."""
    from decode_topk.kernel import aot_loader

    monkeypatch.setattr(aot_loader, "resident_for", lambda k, block_mode=False, trace=False, device=None:
                        lambda build: 7)
    wide = policy.MAX_WIDTH
    assert aot_loader.launch_slices(30, wide, 512, True) == [slice(0, 30)]
    assert aot_loader.launch_slices(32, wide, 512, True, next_n=4) == [slice(0, 32)]
    assert aot_loader.launch_slices(0, wide, 512, True) == []
    assert aot_loader.launch_slices(30, wide, 512) == [slice(0, 30)]  # token rows past two waves stream

