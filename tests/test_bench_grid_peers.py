"""bench/grid.py with peers, on the CPU: `report` on a made-up grid.json whose points carry
peers records (valid, invalid, unsupported, failed, skipped) and L2-resident times, and
`run --peers` refusing a bad argument in one line before anything runs. The peer timing
itself (time_peer, run_peers) runs on CPU tensors with a stand-in timer and stand-in peers."""

import json
import subprocess
import sys
import types
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
import grid  # noqa: E402

META = {"date": "2026-12-01", "gpu": "test GPU", "torch": "x", "kernel_source_sha256": "ab" * 32,
        "timing": "t"}


def _point(rows, length, k, dtk, mode="token", data="rho0.9", peers=None, l2=None, torch_us=None, **extra):
    p = {"data": data, "mode": mode, "rows": rows, "length": length, "width": length, "k": k, "ragged": False,
         "next_n": 1, "build": "8x512x8", "launches": 1, "violations": 0, "dtk_us": dtk, "floor_us": dtk / 2,
         "torch_us": torch_us or dtk * 4, "vs_floor": 2.0, "vs_torch": round(dtk / (torch_us or dtk * 4), 3),
         "dtk_tb_s": 1.0, "floor_tb_s": 2.0}
    if l2 is not None:
        p.update(dtk_l2_us=l2, floor_l2_us=l2 / 2, torch_l2_us=(torch_us or dtk * 4) / 2)
    if peers is not None:
        p["peers"] = peers
    p.update(extra)
    return p


def _grid():
    """Three timed points with peers: at the first the fastest peer (b) is invalid, so a is the
    fastest valid one; at the second b is valid and fastest; the third is block mode (no peer
    and torch.topk not the contract's answer). Plus one DecodeTopK error point."""
    p1 = _point(1, 131072, 2048, 10.0, l2=7.0, peers={
        "a": {"valid": True, "topk_us": 8.0, "e2e_us": 20.0, "l2_us": 6.0, "l2_e2e_us": 14.0, "path": "x"},
        "b": {"valid": False, "topk_us": 5.0, "e2e_us": 5.0, "l2_us": 3.0, "l2_e2e_us": 3.0,
              "violations": {"missed-greater": 3}, "violation": "row 5: ... (3 rows bad)"},
        "c": {"unsupported": "cooperative_topk takes at most 64 rows"},
        "d": {"error": "RuntimeError: boom"}})
    p2 = _point(64, 8192, 512, 6.0, l2=5.0, peers={
        "a": {"valid": True, "topk_us": 12.0, "e2e_us": 13.0, "l2_us": 10.0, "l2_e2e_us": 11.0},
        "b": {"valid": True, "topk_us": 9.0, "e2e_us": 30.0},  # no L2 time: not in the L2 comparison
        "c": {"valid": True, "topk_us": 50.0, "e2e_us": 50.0, "l2_us": 40.0, "l2_e2e_us": 40.0},
        "d": {"skipped": "budget spent"}})
    p3 = _point(8, 1048576, 2048, 40.0, mode="block", l2=30.0,
                peers={n: {"unsupported": "block mode"} for n in "abcd"})
    bad = {"data": "rho0.9", "rows": 128, "length": 65536, "k": 512, "block": False, "error": "ValueError: x"}
    return dict(META, points=[p1, p2, p3, bad])


def _rows(md):
    return [line for line in md.splitlines() if line.startswith("| ")]


def test_fastest_valid_skips_invalid_and_unsupported():
    p1, p2, p3, _ = _grid()["points"]
    assert grid.fastest_valid(p1) == (8.0, "a")  # b is faster but invalid; c n/a; d failed
    assert grid.fastest_valid(p2) == (9.0, "b")
    assert grid.fastest_valid(p3) == (None, None)  # block mode: torch.topk is not the contract's answer
    assert grid.fastest_valid(p1, l2=True) == (6.0, "a")
    assert grid.fastest_valid(p2, l2=True) == (10.0, "a")  # b has no L2 time
    assert grid.fastest_valid(p2, ("e2e_us",)) == (13.0, "a")
    assert grid.fastest_valid(p2, ("e2e_us",), l2=True) == (11.0, "a")  # e2e_us -> l2_e2e_us
    status = {n: s for n, _, s in grid.candidates(p2)}
    assert status == {"a": "valid", "b": "valid", "c": "valid", "d": "skipped", grid.TORCH: "valid"}


def test_table_names_the_fastest_valid_peer_and_the_ratio():
    results = _grid()
    text = grid.table(results)
    head = next(line for line in text.splitlines() if line.startswith("| data"))
    cols = [c.strip() for c in head.strip("|").split("|")]
    for c in ("a us", "b us", "c us", "d us", "fastest valid peer us", "DecodeTopK / fastest valid peer",
              "DecodeTopK L2 us", "fastest valid peer L2 us", "DecodeTopK / fastest valid peer, L2"):
        assert c in cols, c
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in _rows(text)[1:]]
    r1, r2, r3, r4 = (dict(zip(cols, r)) for r in rows)
    assert (r1["a us"], r1["b us"], r1["c us"], r1["d us"]) == ("8.0", "5.0 (invalid)", "n/a", "failed")
    assert r1["fastest valid peer us"] == "8.0 (a)" and r1["DecodeTopK / fastest valid peer"] == "1.25"
    assert r1["DecodeTopK L2 us"] == "7.0" and r1["fastest valid peer L2 us"] == "6.0 (a)"
    assert r1["DecodeTopK / fastest valid peer, L2"] == "1.17"
    assert r2["fastest valid peer us"] == "9.0 (b)" and r2["DecodeTopK / fastest valid peer"] == "0.67"
    assert r2["d us"] == "skipped" and r2["fastest valid peer L2 us"] == "10.0 (a)"
    assert r2["DecodeTopK / fastest valid peer, L2"] == "0.50"
    assert r3["fastest valid peer us"] == "" and r3["DecodeTopK / fastest valid peer"] == ""
    assert "**ValueError: x**" in rows[3]


def test_targets_are_judged_by_the_quoted_times_on_an_h200_only():
    p1 = _grid()["points"][0]  # 1 x 131072 k2048 (target 7.5 us): 10 us, fastest valid peer a at 8
    assert grid.target_met(p1, 7.5, "NVIDIA H200") == "no (1.3x)"
    assert grid.target_met(dict(p1, dtk_us=7.5), 7.5, "NVIDIA H200") == "yes"
    # elsewhere the 0.6x rule on this run's own peers (the quoted H200 time does not apply)
    assert grid.target_met(p1, 7.5, "NVIDIA H100 80GB HBM3") == \
        "no (1.25x this run's fastest valid peer; NVIDIA H100 80GB HBM3)"
    assert grid.target_met(dict(p1, dtk_us=4.8), 7.5, "H100").startswith("yes (0.60x")
    assert grid.target_met(dict(p1, peers={}, mode="block"), 7.5, "H100") == "n/a (H200 target; no valid peer timed)"
    md = grid.results_md(dict(_grid(), gpu="NVIDIA H100 80GB HBM3"), [], Path("x.png"))
    assert "| 1 | 131072 | 2048 | 7.5 | 10.0 | no (1.25x this run's fastest valid peer;" in md


def test_report_refuses_runs_of_different_gpus():
    h100 = dict(_grid(), gpu="NVIDIA H100 80GB HBM3")
    for extras, targets in (([h100], None), ([], h100)):
        with pytest.raises(ValueError, match="different GPUs: 'test GPU' and 'NVIDIA H100 80GB HBM3'"):
            grid.results_md(_grid(), extras, Path("x.png"), targets)


def test_summary_counts_faster_points_and_ratios():
    points = _grid()["points"]
    s = grid.peer_summary(points)
    assert (s["timed"], s["compared"], s["faster"]) == (3, 2, 1)
    assert s["median"] == pytest.approx((10 / 8 + 6 / 9) / 2) and s["worst"] == pytest.approx(1.25)
    assert s["best"] == pytest.approx(6 / 9) and s["worst_peer"] == "a" and "1 x 131072 k2048" in s["worst_at"]
    assert s["floor_median"] == 2.0
    s2 = grid.peer_summary(points, l2=True)
    assert (s2["compared"], s2["faster"]) == (2, 1) and s2["worst"] == pytest.approx(7 / 6)
    md = grid.results_md(_grid(), [], REPO / "bench" / "results" / "x.png")
    assert "## DecodeTopK against the fastest valid peer" in md
    assert "DecodeTopK is faster than the fastest valid peer at 1 of 2 points" in md
    assert "median 0.96, worst 1.25" in md and "DecodeTopK / floor: median 2.00 over the grid" in md
    assert "- L2-resident: DecodeTopK is faster than the fastest valid peer at 1 of 2 points" in md
    breakdown = {line.split("|")[1].strip(): [c.strip() for c in line.strip("|").split("|")]
                 for line in _rows(md) if line.split("|")[1].strip() in "abcd"}
    # peer | valid | invalid | n/a | failed | skipped | fastest at | median | median L2 | invalid at
    assert breakdown["a"][1:8] == ["2", "0", "1", "0", "0", "1", f"{(10 / 8 + 6 / 12) / 2:.2f}"]
    assert breakdown["b"][1:7] == ["1", "1", "1", "0", "0", "1"] and breakdown["b"][9] == "rho0.9 1x131072 k2048"
    assert breakdown["d"][4:6] == ["1", "1"]


def test_crowded_summary_pairs_each_crowded_point_with_its_gaussian_twin():
    points = [_point(8, 131072, 2048, 13.0), _point(8, 131072, 2048, 10.0, data="gaussian"),
              _point(8, 131072, 2048, 12.0, data="rho0.999"), _point(8, 131072, 512, 9.0),
              _point(8, 131072, 512, 6.0, data="gaussian", mode="block")]  # no token twin: not compared
    s = grid.crowded_summary(points)
    assert (s["compared"], s["within"], s["worst"]) == (2, 2, pytest.approx(1.3))  # 1.3x is within
    points[0]["dtk_us"] = 13.5
    s = grid.crowded_summary(points)
    assert (s["compared"], s["within"], s["worst"]) == (2, 1, pytest.approx(1.35))
    assert s["worst_at"].endswith("8 x 131072 k2048") and "rho0.9" in s["worst_at"]
    md = grid.results_md(dict(META, points=points), [], REPO / "bench" / "results" / "x.png")
    assert "within 1.3x at 1 of 2 points, worst 1.35 (rho0.9 token 8 x 131072 k2048)" in md
    assert grid.crowded_summary(points[3:])["worst"] is None


def test_report_writes_png_and_results_with_and_without_peers(tmp_path):
    pytest.importorskip("matplotlib")
    src = tmp_path / "grid.json"
    src.write_text(json.dumps(_grid()))
    old = tmp_path / "old.json"  # a run before --peers and L2 (the format of bench/results/*.json)
    old.write_text(json.dumps(dict(META, points=[{k: v for k, v in _point(1, 131072, 2048, 10.0).items()},
                                                 _point(1, 262144, 2048, 12.0)])))
    for name, extra in (("peers", []), ("old", [])):
        png, md = tmp_path / f"{name}.png", tmp_path / f"{name}.md"
        assert grid.main(["report", str(src if name == "peers" else old), *extra, "--png", str(png),
                          "--results", str(md)]) == 0
        assert png.stat().st_size > 10_000
        text = md.read_text()
        assert ("fastest valid peer, L2" in text) == (name == "peers")
        assert ("## DecodeTopK against the fastest valid peer" in text) == (name == "peers")
    md = grid.results_md(_grid(), [], tmp_path / "e.png", time_keys=("e2e_us",))
    row = next(line for line in md.splitlines() if line.startswith("| 1 | 131072 | 2048 |"))
    assert "| 20.0 (a) | 0.50 |" in row and "| 7.0 | 14.0 (a) | 0.50 |" in row  # e2e_us, then l2_e2e_us


def test_the_stored_runs_still_report_without_peer_columns():
    checked = 0
    for path in sorted((REPO / "bench" / "results").glob("*_grid*.json")):
        results = json.loads(path.read_text())
        if "peer_libraries" in results:  # a run with peers (session 7 on) has their columns
            continue
        text = grid.table(results)
        assert "fastest valid peer" not in text and "L2" not in text.split("\n")[2]
        checked += 1
    assert checked


def _run(args):
    """grid.py run in a fresh interpreter: (status, stderr lines, whether torch got imported)."""
    code = ("import sys; sys.path.insert(0, 'bench'); import grid; rc = grid.main(sys.argv[1:]); "
            "print('TORCH' if 'torch' in sys.modules else 'NOTORCH'); sys.exit(rc)")
    p = subprocess.run([sys.executable, "-c", code, *args], cwd=REPO, capture_output=True, text=True, timeout=60)
    return p.returncode, p.stderr.strip().splitlines(), p.stdout.strip().splitlines()[-1]


def test_run_with_a_missing_peers_folder_fails_in_one_line(tmp_path):
    out = tmp_path / "out"
    rc, err, torch_seen = _run(["run", "--peers", str(tmp_path / "nope"), "--out", str(out), "--targets"])
    assert rc == 2 and len(err) == 1 and err[0].startswith("grid.py run: --peers ") and "no such folder" in err[0]
    assert torch_seen == "NOTORCH" and not out.exists()  # nothing ran


def test_run_refuses_bad_peer_arguments(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert grid.main(["run", "--peers", str(tmp_path / "empty"), "--out", str(tmp_path / "o")]) == 2
    assert "no peers.py" in capsys.readouterr().err
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "peers.py").write_text("PEERS = {'p1': {}, 'p2': {}}\nDEFAULT_PEERS = list(PEERS)\n"
                                   "def load(names=None): raise RuntimeError('no GPU')\n"
                                   "def check(*a): return {}\ndef violation_text(c): return ''\n")
    assert grid.main(["run", "--peers", str(fake), "--peer-names", "p1", "zz", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown zz" in err[0] and "p1, p2" in err[0]
    assert grid.main(["run", "--peer-names", "p1", "--out", str(tmp_path / "o")]) == 2
    assert "--peer-names needs --peers" in capsys.readouterr().err
    (fake / "peers.py").write_text("raise ImportError('broken\\nacross lines')\n")
    assert grid.main(["run", "--peers", str(fake), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "does not import" in err[0]
    assert not (tmp_path / "o").exists()


def test_help_needs_no_gpu():
    code = ("import contextlib, io, sys; sys.path.insert(0, 'bench'); import grid\n"
            "for args in ([], ['run'], ['report']):\n"
            "    buf = io.StringIO()\n"
            "    with contextlib.redirect_stdout(buf):\n"
            "        try:\n"
            "            grid.main(args + ['--help'])\n"
            "        except SystemExit as e:\n"
            "            assert e.code == 0, e.code\n"
            "    text = buf.getvalue()\n"
            "    assert 'usage:' in text and ('--peers PATH' in text and '--no-l2' in text) == (args == ['run'])\n"
            "assert 'torch' not in sys.modules\n")
    _passes_in_a_fresh_python(code)


def _passes_in_a_fresh_python(code):
    """Run `code` in a new interpreter from the repository's root (so that no module this
    process imported counts): it must exit 0."""
    p = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr[-2000:]


# ---------------------------------------------------------------------------------------
# time_peer / run_peers on CPU tensors
# ---------------------------------------------------------------------------------------
class _Timer:
    def __init__(self):
        self.calls = []

    def us(self, fn, evict=True):
        fn()
        self.calls.append(evict)
        return 1.5 if evict else 0.5


class _Peer:
    """A stand-in peer: 'good' (torch.topk), 'wrong' (the k smallest), 'raise', 'narrow'
    (supports no row over 16 logits)."""

    def __init__(self, torch, kind, dtype="bfloat16"):
        self.torch, self.kind, self.input_dtype, self.last_path = torch, kind, dtype, None

    def supports(self, rows, width, k):
        return "too wide" if self.kind == "narrow" and width > 16 else None

    def prepare(self, lengths):
        return {}

    def to_input(self, logits):
        return logits.float() if self.input_dtype == "float32" else logits

    def __call__(self, logits, lengths, k, out, **kw):
        return self.topk(self.to_input(logits), lengths, k, out)

    def topk(self, x, lengths, k, out, **kw):
        if self.kind == "raise":
            raise RuntimeError("peer failed\nsecond line")
        self.last_path = "cpu"
        x = x.float()
        pos = self.torch.arange(x.shape[1])[None, :]
        x = x.masked_fill(pos >= lengths[:, None].long(), float("-inf"))
        out.copy_(self.torch.topk(x, k, dim=1, largest=self.kind != "wrong").indices.to(self.torch.int32))
        return out


def test_time_peer_and_run_peers_on_cpu():
    torch = pytest.importorskip("torch")
    from decode_topk.conformance import gpu_check

    fake_torch = types.SimpleNamespace(**{n: getattr(torch, n) for n in dir(torch) if not n.startswith("__")})
    fake_torch.cuda = types.SimpleNamespace(synchronize=lambda: None)
    rows, width, k = 4, 64, 8
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(rows, width, generator=g).to(torch.bfloat16)
    lengths = torch.full((rows,), width, dtype=torch.int32)
    stats = gpu_check.row_stats(logits, lengths, (k,), False)
    peers_mod = types.SimpleNamespace(check=lambda *a: {"rows_bad": 4}, violation_text=lambda c: "4 rows bad")
    timer = _Timer()
    names = ["good32", "good16", "wrong", "raise", "narrow", "full", "late"]
    fns = {"good32": _Peer(torch, "good", "float32"), "good16": _Peer(torch, "good"), "wrong": _Peer(torch, "wrong"),
           "raise": _Peer(torch, "raise"), "narrow": _Peer(torch, "narrow"), "full": _Peer(torch, "good"),
           "late": _Peer(torch, "good")}
    ctx = {"torch": fake_torch, "check": gpu_check, "timer": timer, "peers": peers_mod, "l2": True,
           "live": {"rec": None, "peer": None}, "peer_names": names, "peer_fns": fns,
           "peer_off": {"late": "not loaded: no GPU"}, "peer_last_s": {}, "full_width_only": {"full"},
           "peer_timeout": 60.0, "deadline": 1e18, "forget_logits": lambda: None}
    rec = {"data": "gaussian", "rows": rows, "length": width, "width": width, "k": k}
    grid.run_peers(ctx, rec, logits, lengths, k, False, stats)
    got = rec["peers"]
    assert got["good32"]["valid"] is True and got["good32"]["checks"] == {
        "eager": 0, "after topk replays": 0, "after e2e replays": 0}
    assert (got["good32"]["topk_us"], got["good32"]["e2e_us"], got["good32"]["l2_us"],
            got["good32"]["l2_e2e_us"]) == (1.5, 1.5, 0.5, 0.5)
    assert got["good16"]["valid"] is True and got["good16"]["topk_us"] == got["good16"]["e2e_us"] == 1.5
    assert got["wrong"]["valid"] is False and got["wrong"]["violations"].get("missed-greater") == rows
    assert got["wrong"]["first_rows"] == list(range(rows)) and got["wrong"]["violation"] == "4 rows bad"
    assert got["wrong"]["topk_us"] == 1.5  # invalid: still timed, flagged
    assert got["raise"]["error"] == "RuntimeError: peer failed second line"
    assert got["narrow"] == {"unsupported": "too wide", "elapsed_s": got["narrow"]["elapsed_s"]}
    assert "valid" in got["full"]  # every row at the full width: FlashInfer's top_k may run
    assert got["late"] == {"error": "not loaded: no GPU"}
    assert grid.fastest_valid(dict(rec, torch_us=9.0, mode="token", next_n=1)) == (1.5, "full")
    # shorter rows: a lengths-ignoring peer is n/a; block mode: every peer is; the budget: skipped
    short = lengths - 3
    stats = gpu_check.row_stats(logits, short, (k,), False)
    grid.run_peers(ctx, rec, logits, short, k, False, stats)
    assert "unsupported" in rec["peers"]["full"] and rec["peers"]["good16"]["valid"] is True
    grid.run_peers(ctx, rec, logits, lengths, k, True, stats)
    assert all("unsupported" in r for n, r in rec["peers"].items() if n != "late")
    ctx.update(deadline=0.0)
    grid.run_peers(ctx, rec, logits, lengths, k, False, stats)
    assert rec["peers"]["good16"] == {"skipped": "budget spent"}
    # a peer over --peer-timeout keeps its numbers and is not run again
    ctx.update(deadline=1e18, peer_timeout=-1.0)
    grid.run_peers(ctx, rec, logits, lengths, k, False, stats)
    assert rec["peers"]["good16"]["valid"] is True and "timeout" in rec["peers"]["good16"]
    grid.run_peers(ctx, rec, logits, lengths, k, False, stats)
    assert rec["peers"]["good16"]["error"].startswith("not run: timed out at gaussian 4x64 k8")


# ---------------------------------------------------------------------------------------
# run --builds (time_builds on CPU tensors) and its table in report
# ---------------------------------------------------------------------------------------
def test_time_builds_checks_then_times_every_other_build_on_cpu():
    torch = pytest.importorskip("torch")
    from decode_topk.conformance import gpu_check
    from decode_topk.kernel import policy

    fake_torch = types.SimpleNamespace(**{n: getattr(torch, n) for n in dir(torch) if not n.startswith("__")})
    fake_torch.cuda = types.SimpleNamespace(synchronize=lambda: None)
    rows, width, k = 3, 64, 8
    g = torch.Generator().manual_seed(1)  # distinct values: one answer, whatever the tie rule
    logits = torch.stack([torch.randperm(width, generator=g) for _ in range(rows)]).to(torch.bfloat16)
    lengths = torch.full((rows,), width, dtype=torch.int32)
    stats = gpu_check.row_stats(logits, lengths, (k,), False)
    forced = []

    def decode_topk_aot(x, lens, k, out, block_mode, build, next_n):  # 1x512x16 answers wrongly
        forced.append(build.name)
        top = torch.topk(x.float(), k, dim=1, largest=build.name != "1x512x16").indices
        out.copy_(torch.sort(top.to(torch.int32), dim=1).values)

    resident = {16: 2}  # clusters of 16x512x16 resident at once: fewer than the 3 rows, then 3
    aot = types.SimpleNamespace(decode_topk_aot=decode_topk_aot,
                                resident_for=lambda k, block_mode: lambda b: resident.get(b.cluster, 8))
    ctx = {"torch": fake_torch, "check": gpu_check, "timer": _Timer(), "policy": policy, "aot": aot}
    chosen = policy.Build.parse("8x512x8")
    times = grid.time_builds(ctx, logits, lengths, lengths, k, False, 1, chosen, stats)
    others = [b.name for b in policy.BUILDS if b != chosen and b.cluster != 16]
    assert list(times) == others == list(dict.fromkeys(forced))  # 16x512x16 would run in two waves
    # each run once and checked; only a valid one is then timed (the stand-in timer runs it once)
    assert [forced.count(n) for n in others] == [1 if n == "1x512x16" else 2 for n in others]
    assert times["1x512x16"].startswith("invalid: ") and all(times[n] == 1.5 for n in others if n != "1x512x16")
    resident[16] = 3  # one wave of it: timed too
    assert list(grid.time_builds(ctx, logits, lengths, lengths, k, False, 1, chosen, stats)) == \
        [b.name for b in policy.BUILDS if b != chosen]


def test_report_tables_every_build_forced():
    p1 = _point(64, 8192, 512, 12.0, build="1x512x8", builds_us={"4x1024x8": 37.0, "8x512x8": 47.0})
    p2 = _point(32, 65536, 2048, 36.0, build="1x512x16", builds_us={"4x1024x8": 34.0, "8x512x16": "invalid: 3"})
    p3 = _point(1, 131072, 2048, 18.0)  # no --builds: not in the table
    text = grid.builds_table([p1, p2, p3])
    rows = _rows(text)
    assert rows[0].split(" | ")[5:-2] == ["8x512x8 us", "4x1024x8 us", "8x512x16 us", "1x512x8 us",
                                         "1x512x16 us"]
    assert len(rows) == 3  # the header and two points
    assert rows[1].endswith("| 47.0 | 37.0 | - | **12.0** | - | 1x512x8 | 1.00 |")
    assert rows[2].endswith("| - | 34.0 | invalid: 3 | - | **36.0** | 4x1024x8 | 1.06 |")
    assert grid.builds_table([p3]) is None
    md = grid.results_md(dict(META, points=[p3]), [dict(META, points=[p1, p2])], Path("x.png"))
    assert "## Every build forced (`run --builds`)" in md and "## more points: rows [32, 64]" in md


def test_a_median_far_above_the_fastest_replay_is_taken_again():
    """Timer.us's settled_median: a steady take is kept at once; a take whose median is
    more than RETIME_RATIO times its fastest replay (the GPU's slow windows, session 37) is
    taken again, at most RETIMES more times, and the lowest median is kept."""
    takes = iter([[10.0, 10.2, 10.1]])
    assert grid.settled_median(lambda: next(takes)) == (10.1, 0)
    slow_then_steady = iter([[10.0, 170.0, 171.0], [10.0, 10.4, 10.2]])
    assert grid.settled_median(lambda: next(slow_then_steady)) == (10.2, 1)
    always_slow = iter([[10.0, 90.0, 95.0], [10.0, 50.0, 60.0], [10.0, 70.0, 71.0], [1.0, 1.0, 1.0]])
    assert grid.settled_median(lambda: next(always_slow)) == (50.0, grid.RETIMES)
    assert grid.RETIMES == 2 and next(always_slow) == [1.0, 1.0, 1.0]  # no fourth take


def test_two_passes_keep_each_times_lower_median():
    """run --passes: lower_of_passes keeps each time's lower median (DecodeTopK, the floors,
    torch.topk, every forced build and peer) and makes the ratios again from them; a peer
    is valid only if valid in both passes; a pass that failed or violated is kept as is."""
    first = _point(8, 524288, 512, 108.0, l2=13.0, peers={
        "a": {"valid": True, "topk_us": 25.0, "e2e_us": 30.0, "l2_us": 18.0},
        "b": {"valid": True, "topk_us": 40.0}, "c": "n/a"},
        read_bytes=8 * 524288 * 2, phys_floor_us=9.5, builds_us={"2x512x4": 39.0, "x": "invalid: 3 rows"})
    first["floor_us"] = 107.0
    second = _point(8, 524288, 512, 17.0, l2=14.0, peers={
        "a": {"valid": True, "topk_us": 26.0, "e2e_us": 29.0, "l2_us": 17.0},
        "b": {"valid": False, "topk_us": 35.0, "violations": {"order": 1}}, "c": "n/a"},
        read_bytes=8 * 524288 * 2, phys_floor_us=9.7, builds_us={"2x512x4": 38.0, "x": "invalid: 3 rows"},
        retimed=2)
    second["floor_us"] = 9.8
    rec = grid.lower_of_passes(first, second)
    assert (rec["dtk_us"], rec["floor_us"], rec["phys_floor_us"], rec["dtk_l2_us"]) == (17.0, 9.8, 9.5, 13.0)
    assert rec["vs_floor"] == round(17.0 / 9.8, 2) and rec["vs_phys_floor"] == round(17.0 / 9.5, 2)
    assert rec["dtk_tb_s"] == round(8 * 524288 * 2 / 17.0 / 1e6, 3) and rec["passes"] == 2 and rec["retimed"] == 2
    assert rec["builds_us"] == {"2x512x4": 38.0, "x": "invalid: 3 rows"}
    assert rec["peers"]["a"] == {"valid": True, "topk_us": 25.0, "e2e_us": 29.0, "l2_us": 17.0}
    assert rec["peers"]["b"]["valid"] is False and rec["peers"]["b"]["violations"] == {"order": 1}
    assert rec["peers"]["b"]["topk_us"] == 35.0 and rec["peers"]["c"] == "n/a"
    assert first["dtk_us"] == 108.0 and first["peers"]["b"]["valid"] is True  # the passes' records untouched
    bad = dict(second, violations=3)
    assert grid.lower_of_passes(first, bad) is bad and grid.lower_of_passes(bad, first) is bad
    failed = {"data": "rho0.9", "rows": 8, "length": 524288, "k": 512, "error": "boom"}
    assert grid.lower_of_passes(failed, second) is failed


def test_run_refuses_fewer_than_one_pass(tmp_path, capsys):
    assert grid.main(["run", "--passes", "0", "--out", str(tmp_path / "o")]) == 2
    assert "--passes 0" in capsys.readouterr().err and not (tmp_path / "o").exists()


def test_the_head_start_sleeps_before_a_takes_first_replay():
    """Timer.replays with --head-start: one GPU sleep of HEAD_START_REPLAYS x L2_SLEEP_CYCLES
    before the take's first event, then per replay the eviction (or the L2 sleep), the
    start event, the replay and the end event; without it, no such sleep."""
    calls = []

    class Event:
        def __init__(self, enable_timing):
            self.i = len(calls)

        def record(self):
            calls.append("record")

        def elapsed_time(self, end):
            return 0.01

    cuda = types.SimpleNamespace(Event=Event, _sleep=lambda n: calls.append(("sleep", n)),
                                 synchronize=lambda: calls.append("sync"))
    for head_start in (True, False):
        calls.clear()
        timer = object.__new__(grid.Timer)
        timer.torch, timer.reps, timer.head_start = types.SimpleNamespace(cuda=cuda), 2, head_start
        timer.flush = types.SimpleNamespace(zero_=lambda: calls.append("evict"))
        graph = types.SimpleNamespace(replay=lambda: calls.append("replay"))
        assert timer.replays(graph, evict=True) == [0.01, 0.01]
        replay = ["evict", "record", "replay", "record"]
        head = [("sleep", grid.HEAD_START_REPLAYS * grid.L2_SLEEP_CYCLES)] if head_start else []
        assert calls == head + replay * 2 + ["sync"]


def test_the_timer_probe_helps_without_a_gpu():
    code = ("import contextlib, io, sys; sys.path.insert(0, 'bench'); import timer_probe\n"
            "buf = io.StringIO()\n"
            "with contextlib.redirect_stdout(buf):\n"
            "    try:\n"
            "        timer_probe.main(['--help'])\n"
            "    except SystemExit as e:\n"
            "        assert e.code == 0, e.code\n"
            "assert '--head-start' in buf.getvalue() and 'torch' not in sys.modules\n")
    _passes_in_a_fresh_python(code)


def test_summary_flags_a_floor_slower_than_decode_topk():
    """A floor that loads more than DecodeTopK (session 51: the multi-CTA streamed builds'
    read each row once a CTA) shows as DecodeTopK faster than it, and the summary says so."""
    good = [_point(8, 131072, 2048, 10.0)]
    assert "faster than its launch's floor" not in grid._ratio_summary(good)
    bad = good + [_point(8, 1048576, 512, 27.0, build="8x512x4", floor_us=44.8, vs_floor=0.6)]
    text = grid._ratio_summary(bad)
    assert "DecodeTopK faster than its launch's floor at 1 of 2 points" in text and "8 x 1048576 k512" in text
