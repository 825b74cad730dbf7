"""bench/spread_model.py, the algorithm of bench/spread_probe.cu (a row spread over
independent CTAs, bench/NOTES.md session 38), gives the canonical answer (SPEC.md 1.4) on
every token row of the ci catalogue, in each of its modes: the probe's own slice and caps,
and shapes small enough that the last CTA's other modes and both fallbacks are reached."""

import collections
import sys
from pathlib import Path

import numpy as np
import pytest

from decode_topk.conformance.cases import cases
from decode_topk.reference import decode_topk_reference

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import spread_model  # noqa: E402

SHAPES = {
    "probe": spread_model.Shape(),
    # 128 samples: the cutoff misjudges rows more often (fallback-few); an fcap of 2048: mode
    # A's gather overflows wherever more keys than that lie above the cutoff (fallback-overflow)
    "tight": spread_model.Shape(slice_logits=4096, sample_vectors=16, cap=2048, fcap=2048),
}
MUST_REACH = {"probe": {"A", "B"}, "tight": {"A", "B", "fallback-overflow", "fallback-few"}}


def _rows():
    for case in cases("ci"):
        if False not in case.modes:
            continue
        logits, lengths = case.generate()
        for k in case.ks:
            yield case.name, logits, lengths, k


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_spread_model_is_canonical(name):
    shape = SHAPES[name]
    seen = collections.Counter()
    for case, logits, lengths, k in _rows():
        want = decode_topk_reference(logits, lengths, k, canonical=True)
        for r in range(logits.shape[0]):
            got, mode = spread_model.spread_row(logits[r], int(lengths[r]), k, logits.shape[1], shape)
            seen[mode] += 1
            assert np.array_equal(got, want[r]), f"{case} row {r} k {k}: mode {mode}"
    assert MUST_REACH[name] <= set(seen), f"modes reached: {dict(seen)}"


def test_cap_below_k_is_refused():
    with pytest.raises(ValueError, match="cap = 512 is below k = 1024"):
        spread_model.spread_row(np.zeros(8192, np.uint16), 8192, 1024, 8192, spread_model.Shape(cap=512))
