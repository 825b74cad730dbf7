"""The algorithm of bench/spread_probe.cu in NumPy, row by row (bench/NOTES.md session 38).

A row spread over S slices of C logits, each slice an independent CTA: every CTA selects
the same cutoff `c` from the same samples, keeps its keys above `c` and, apart, equal to
it (each list capped), and the last CTA of the row finishes from those lists alone (mode
A: at least k keys above `c`; B: `K = c`) or falls back to the whole row. This module
returns, for one token row, the answer the probe's algorithm gives and the mode it takes,
so that tests/test_spread_model.py can check the algorithm against the reference on the
conformance catalogue (every mode and fallback forced with small slices and caps), and
the probe's CUDA is checked against DecodeTopK on the GPU (bench/spread_probe.py).

Parameters are the probe's: C = 4096 V logits a slice, 512 sample vectors, CAP 2048 keys
a list, FCAP 16384 keys gathered; smaller ones reach every mode on small rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from decode_topk.reference import bits as _bits
from decode_topk.reference.topk import _row_topk

MODES = ("A", "B", "fallback-overflow", "fallback-few")  # the probe's stats order


@dataclass(frozen=True)
class Shape:
    slice_logits: int = 4096   # C = 4096 V
    sample_vectors: int = 512  # one a thread
    cap: int = 2048            # keys above c (and, apart, equal to c) a slice keeps
    fcap: int = 16384          # keys above c the last CTA gathers


def sample_rank(k: int, n: int, ns: int) -> int:
    """The cutoff's rank among ns valid samples, as the probe computes it (float32)."""
    q = np.float32(k) * np.float32(ns) / np.float32(n)
    r = int(np.ceil(np.float32(q + np.float32(5.0) * np.sqrt(q) + np.float32(2.0))))
    return min(r, ns)


def cutoff(keys: np.ndarray, k: int, shape: Shape) -> int:
    """c: the R-th largest of the samples: vector (t nvec) // V_s of the row, t < V_s."""
    n = keys.size
    nvec = -(-n // 8)
    starts = (np.arange(shape.sample_vectors, dtype=np.int64) * nvec // shape.sample_vectors) * 8
    idx = (starts[:, None] + np.arange(8)[None, :]).ravel()
    samples = keys[idx[idx < n]]
    r = sample_rank(k, n, samples.size)
    return int(np.sort(samples)[::-1][r - 1])


def spread_row(bits: np.ndarray, length: int, k: int, width: int, shape: Shape = Shape()):
    """(answer int32[k], mode) of one token row under the probe's algorithm."""
    if shape.cap < k:  # mode B takes a prefix of each slice's list of ties: at most k of them
        raise ValueError(f"cap = {shape.cap} is below k = {k}: mode B needs every list to hold k ties")
    keys = _bits.order_key(np.asarray(bits[:length], dtype=np.uint16))
    n = keys.size
    if n <= k:
        return _row_topk(keys, k, False), "short"
    c = cutoff(keys, k, shape)
    C = shape.slice_logits
    slices = -(-width // C)
    gt_lists, eq_lists, gts, eqs = [], [], [], []
    for s in range(slices):
        seg = keys[s * C:min((s + 1) * C, n)]
        base = s * C
        gt_idx = base + np.flatnonzero(seg > c)
        eq_idx = base + np.flatnonzero(seg == c)
        gts.append(gt_idx.size)
        eqs.append(eq_idx.size)
        gt_lists.append(gt_idx[: shape.cap])
        eq_lists.append(eq_idx[: shape.cap])
    GT, EQ = sum(gts), sum(eqs)
    overflow = max(gts) > shape.cap
    if not overflow and k <= GT <= shape.fcap:
        idx = np.concatenate(gt_lists)  # index order: the reference's canonical positions in it
        return idx[_row_topk(keys[idx], k, False, canonical=True)].astype(np.int32), "A"
    if not overflow and GT < k <= GT + EQ:
        chosen_eq = np.concatenate(eq_lists)[: k - GT]  # the first k - GT ties by index
        return np.sort(np.concatenate(gt_lists + [chosen_eq])).astype(np.int32), "B"
    mode = "fallback-overflow" if overflow or GT > shape.fcap else "fallback-few"
    return _row_topk(keys, k, False, canonical=True), mode
