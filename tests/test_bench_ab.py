"""bench/ab.py on the CPU: `compare` on made-up grid JSON of two labels and two rounds (the
median of the rounds, the ratio to the first label, the slower points named, a violation
making the exit 1, runs of two GPUs refused), and `run` refusing a label it could not
read back from a file name."""

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
import ab  # noqa: E402


def _write(folder, label, rnd, times, violations=0, gpu="NVIDIA H200"):
    points = [{"data": "rho0.9", "mode": "token", "rows": rows, "length": 8192, "k": 512, "build": "2x512x8",
               "violations": violations if rows == 1 else 0, "dtk_us": us} for rows, us in times.items()]
    path = folder / f"grid_{label}_{rnd}.json"
    path.write_text(json.dumps({"gpu": gpu, "points": points}))
    return path


def test_compare_medians_and_ratios(tmp_path, capsys):
    files = [_write(tmp_path, "base", 0, {1: 10.0, 8: 20.0}), _write(tmp_path, "new", 0, {1: 9.0, 8: 22.0}),
             _write(tmp_path, "base", 1, {1: 12.0, 8: 20.0}), _write(tmp_path, "new", 1, {1: 9.0, 8: 22.0})]
    assert ab.compare(files) == 0
    text = capsys.readouterr().out
    # base at 1 row: median of 10 and 12 = 11; new 9 -> 0.818; at 8 rows 22 / 20 = 1.1
    assert "| rho0.9 | token | 1 | 8192 | 512 | 2x512x8 | 11.00 | 2x512x8 | 9.00 | 0.818 |" in text
    assert "| 1.100 |" in text
    assert "new / base: median 0.959" in text
    assert "1 points 3% or more faster, 1 3% or more slower: rho0.9 token 8x8192 k512 1.100" in text


def test_compare_fails_on_a_violation(tmp_path, capsys):
    files = [_write(tmp_path, "base", 0, {1: 10.0}), _write(tmp_path, "new", 0, {1: 9.0}, violations=3)]
    assert ab.compare(files) == 1
    assert "violations recorded: 3" in capsys.readouterr().out


def test_compare_refuses_runs_of_different_gpus(tmp_path):
    files = [_write(tmp_path, "base", 0, {1: 10.0}), _write(tmp_path, "new", 0, {1: 9.0}, gpu="NVIDIA H100 80GB HBM3")]
    with pytest.raises(ValueError, match="different GPUs: 'NVIDIA H200' .*'NVIDIA H100 80GB HBM3'"):
        ab.compare(files)


@pytest.mark.parametrize("spec", ["nolabel", "=dir", "a_b=dir"])
def test_run_refuses_a_bad_checkout(spec, tmp_path):
    with pytest.raises(SystemExit, match="LABEL=DIR"):
        ab.main(["run", "--out", str(tmp_path), spec])
