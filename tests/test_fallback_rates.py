"""bench/fallback_rates.py on the CPU: its row for Gaussian rows of 196,608 logits, the
vectors of top >= cutoff and the keys >= cutoff a vector of them recounted here from the
rows and the model's cutoffs (a vector's top is the largest key of its 8 lanes)."""

import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
import fallback_rates  # noqa: E402

from decode_topk.conformance.cases import normal_bits  # noqa: E402
from decode_topk.kernel import policy  # noqa: E402
from decode_topk.reference.bits import order_key  # noqa: E402
from decode_topk.reference.model import simulate  # noqa: E402


def test_vectors_at_or_above_the_cutoff(capsys):
    rows, width = 4, 196608  # sampled on the build the policy picks (8x512x8), whatever its d
    fallback_rates.main(["--rows", str(rows), "--widths", str(width), "--data", "gaussian"])
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| gaussian |")]
    assert len(lines) == len(policy.KS)
    bits = normal_bits(np.random.default_rng(width), (rows, width))  # the script's rows: its seed
    keys = order_key(bits).astype(np.int64).reshape(rows, width // 8, 8)
    for line, k in zip(lines, policy.KS):
        cells = [c.strip() for c in line.strip("|").split("|")]
        _, trace = simulate(bits, np.full(rows, width, np.int32), k, False,
                            build=policy.build_for(8, width, lambda b: 15))
        cutoff = trace[:, 3][:, None]
        vectors = np.array([sum(1 for v in row if v.max() >= c) for row, c in zip(keys, cutoff[:, 0])])
        counted = (keys.reshape(rows, -1) >= cutoff).sum(axis=1)
        assert int(cells[-2]) == int(np.median(vectors)), (k, line)
        assert float(cells[-1]) == round(float(np.median(counted / vectors)), 2), (k, line)
        assert 1.0 <= float(cells[-1]) < 8.0
