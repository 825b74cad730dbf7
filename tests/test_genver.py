"""gen | subject | ver: the inputs written once, outputs made anywhere, judged with the
suite's checker, reasons and repro lines."""

import io
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from decode_topk.conformance import genver, registry, run_suite
from decode_topk.conformance.cases import cases
from decode_topk.conformance.suite import case_runs, format_violation
from decode_topk.reference import decode_topk_reference

ROOT = Path(__file__).resolve().parents[1]


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "decode_topk.conformance", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def needles(tmp_path_factory):
    """cases.npz of the needles case and the reference's outputs.npz, through the CLI."""
    tmp = tmp_path_factory.mktemp("genver")
    cases_path, outputs_path = tmp / "cases.npz", tmp / "outputs.npz"
    gen = _cli("gen", "--level", "ci", "--case", "needles", "--out", str(cases_path))
    assert gen.returncode == 0 and "wrote 6 runs of level ci" in gen.stdout, gen.stderr
    out = _cli("out", str(cases_path), "--impl", "reference", "--out", str(outputs_path))
    assert out.returncode == 0, out.stderr
    return cases_path, outputs_path


def _outputs(path):
    with np.load(path) as data:
        return {key: data[key] for key in data.files}


def _ver(cases_path, outputs, tmp_path):
    path = tmp_path / "edited.npz"
    np.savez(path, **outputs)
    return _cli("ver", str(cases_path), str(path))


def test_gen_out_ver_passes(needles):
    result = _cli("ver", *map(str, needles))
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr
    assert "total: 6 runs, 0 failing, 0 violations" in result.stdout


def test_gen_writes_every_run_of_the_level(tmp_path):
    path = tmp_path / "ci.npz"
    count = genver.gen(path, "ci")
    level, runs = genver.load_cases(path)
    want = [(genver.run_id(c.name, k, mode), c.seed, k, mode) for c in cases("ci") for k, mode in case_runs(c)]
    assert level == "ci" and count == len(runs) == len(want)
    assert [(r.id, r.seed, r.k, r.block_mode) for r in runs] == want
    first = {}
    for run in runs:
        first.setdefault(run.case, run)
    for case in cases("ci"):  # the stored inputs are the case's, bit for bit
        logits, lengths = case.generate()
        run = first[case.name]
        assert np.array_equal(run.logits_bits, logits) and np.array_equal(run.lengths, lengths), case.name


def test_a_planted_fault_is_reported_as_the_suite_reports_it(needles, tmp_path):
    """One output array with a repeated index: ver exits 1 with the reason and repro
    lines the suite prints for an implementation making the same fault."""
    cases_path, outputs_path = needles
    outputs = _outputs(outputs_path)
    run = "needles.k1024.token"
    outputs[run][:, -1] = outputs[run][:, 0]
    result = _ver(cases_path, outputs, tmp_path)
    assert result.returncode == 1
    assert "total: 6 runs, 1 failing," in result.stdout
    assert "case=needles seed=110 k=1024 mode=token row=0 [duplicate]" in result.stdout
    assert "repro: row=0, length=32768, k=1024, block_mode=False, K=" in result.stdout

    def faulty(logits_bits, lengths, k, block_mode):
        out = decode_topk_reference(logits_bits, lengths, k, block_mode)
        if k == 1024 and not block_mode:
            out[:, -1] = out[:, 0]
        return out

    registry.register("faulty-for-test", lambda: faulty)
    try:
        suite = run_suite("faulty-for-test", "ci", case_filter="needles", stream=io.StringIO())
    finally:
        registry.unregister("faulty-for-test")
    lines = [format_violation(r, v) for r in suite.runs for v in r.violations][:5]
    assert lines and all(line in result.stdout for line in lines)


@pytest.mark.parametrize("edit, problem", [
    (lambda o: o.pop("needles.k2048.block"), "no array for run 'needles.k2048.block'"),
    (lambda o: o.update({"needles.k512.token": o["needles.k512.token"].astype(np.int64)}),
     "run 'needles.k512.token' is int64 [9, 512], expected int32 [9, 512]"),
    (lambda o: o.update({"needles.k512.block": o["needles.k512.block"][:, :-1]}),
     "run 'needles.k512.block' is int32 [9, 511], expected int32 [9, 512]"),
    (lambda o: o.update({"needles.k4096.token": o["needles.k512.token"]}),
     "1 arrays are no run of the cases file, first 'needles.k4096.token'"),
])
def test_a_malformed_outputs_file_exits_2_naming_the_problem(needles, tmp_path, edit, problem):
    cases_path, outputs_path = needles
    outputs = _outputs(outputs_path)
    edit(outputs)
    result = _ver(cases_path, outputs, tmp_path)
    assert result.returncode == 2 and result.stdout == ""
    assert problem in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_a_malformed_cases_file_exits_2_naming_the_problem(needles, tmp_path):
    cases_path, outputs_path = needles
    with np.load(cases_path) as data:
        arrays = {key: data[key] for key in data.files if key != "lengths.needles"}
    broken = tmp_path / "broken-cases.npz"
    np.savez(broken, **arrays)
    result = _cli("ver", str(broken), str(outputs_path))
    assert result.returncode == 2 and "no array 'lengths.needles'" in result.stderr
    not_npz = tmp_path / "not.npz"
    not_npz.write_text("hello")
    result = _cli("ver", str(not_npz), str(outputs_path))
    assert result.returncode == 2 and f"cases {not_npz}: cannot be read as .npz" in result.stderr


def test_ver_strict_judges_the_canonical_answer(needles, tmp_path):
    """The reference's default order (descending key) passes the contract but not --strict;
    its canonical answer passes both, and the summary names the mode."""
    cases_path, outputs_path = needles
    contract = _cli("ver", str(cases_path), str(outputs_path))
    strict = _cli("ver", str(cases_path), str(outputs_path), "--strict")
    assert contract.returncode == 0 and "judged: contract" in contract.stdout
    assert strict.returncode == 1 and "not-canonical" in strict.stdout and "judged: strict" in strict.stdout
    canonical = tmp_path / "canonical.npz"
    _, runs = genver.load_cases(cases_path)
    np.savez(canonical, **{r.id: decode_topk_reference(r.logits_bits, r.lengths, r.k, r.block_mode, canonical=True)
                           for r in runs})
    assert _cli("ver", str(cases_path), str(canonical), "--strict").returncode == 0
