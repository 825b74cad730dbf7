"""bench/sample_layouts.py on the CPU: the grouped layout, and one small point end to end."""

import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
import sample_layouts  # noqa: E402


def test_grouped_moves_each_run_into_the_first_samples_sector():
    positions = np.array([5, 40, 77, 100])
    assert sample_layouts.grouped(positions, 200, 1).tolist() == [5, 40, 77, 100]
    assert sample_layouts.grouped(positions, 200, 2).tolist() == [0, 1, 64, 65]
    assert sample_layouts.grouped(positions, 65, 2).tolist() == [0, 1, 64, 64]  # below the length
    assert sample_layouts.grouped(positions, 200, 4).tolist() == [0, 1, 2, 3]


def test_a_point_prints_every_layout(capsys):
    sample_layouts.main(["--rows", "2", "--data", "ar0.9", "--points", "131072:2048:1", "--groups", "4"])
    rows = [line.split(" | ") for line in capsys.readouterr().out.splitlines()[2:]]
    assert [r[4] for r in rows] == ["1", "4"]
    assert all(int(r[5]) + int(r[6]) <= 2 and int(r[7]) >= 1 for r in rows)


def test_outcome_takes_the_qth_largest_sample_as_the_cutoff():
    from decode_topk.conformance import trace

    n, k = 131072, 2048
    keys = np.arange(n, dtype=np.int64)  # key = position: the samples' keys are their positions
    positions = trace.sample_positions(n, 1)
    q = trace.q_for(n, k)
    cutoff = int(np.sort(positions)[-q])
    assert sample_layouts.outcome(keys, positions, n, k, 1) == (n - cutoff < k, False, n - cutoff)
    # every sample at the row's end: the cutoff is near the top and the row underflows
    late = np.full(positions.size, n - 1)
    assert sample_layouts.outcome(keys, late, n, k, 1) == (True, False, 1)
    # a cutoff at the k-th largest key keeps exactly k: no underflow
    exact = np.full(positions.size, n - k)
    assert sample_layouts.outcome(keys, exact, n, k, 1) == (False, False, k)
