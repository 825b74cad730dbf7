"""The contract (SPEC.md 1.3-1.4) checked on the GPU with torch, for batches too big for
the NumPy checker (conformance.checker), plus GPU generators of such batches.

`check(logits, lengths, k, block_mode, out, stats=None)` returns {reason: rows} counts
with the same reason codes as conformance.checker (bad-output aside) and the first
offending rows. It derives the row's K (k-th largest element key) and the count above it
with torch.topk over order keys, then checks every slot with gathers:
- short rows (n <= k): out equals the fixed answer (block mode: -1 for -inf blocks);
- other rows: every slot is -1 or an index in [0, n); indices distinct; none with a key
  below K; every key above K present; in block mode a -inf block is never written as its
  index, and the -1 count is k - |{key > K}| when K is the -inf key, else 0 (token mode:
  always 0).
Those rules force exactly k - |{key > K}| indices of key K, like the NumPy checker.

Imports torch only (no DSL), so it runs on the GPU runner.
"""

from __future__ import annotations

import math

import torch

KEY_NEG_INF = 0x007F
KEY_POS_INF = 0xFF80
KEY_CANONICAL_NAN = 0xFFFF  # order key of 0x7FFF, what max.NaN.bf16x2 returns for any NaN
REASONS = ("out-of-range", "past-length", "duplicate", "wrong-tie", "missed-greater", "not-minus-one",
           "bad-minus-one", "short-row")
NAN_PATTERNS = (0x7FC0, 0xFFC0, 0x7F81, 0xFF81, 0x7FFF, 0xFFFF, 0x7FA5, 0xFFA5)
SPECIALS = NAN_PATTERNS + (0x0000, 0x8000, 0x7F80, 0xFF80)


def bits32(x):
    """BF16 tensor (or int16 view) -> int32 bit patterns in [0, 65535]."""
    if x.dtype == torch.bfloat16:
        x = x.view(torch.int16)
    return x.to(torch.int32) & 0xFFFF


def order_key(bits):
    """SPEC.md 1.2 on int32 bit patterns in [0, 65535]."""
    return torch.where((bits & 0x8000) != 0, (~bits) & 0xFFFF, bits | 0x8000)


def _is_nan(bits):
    return (bits & 0x7FFF) > 0x7F80


def seq_lens_lengths(seq_lens, next_n, width):
    """decode_topk.reference.topk.seq_lens_lengths in torch, on seq_lens' device: row r's length
    clamp(seq_lens[r // next_n] - next_n + 1 + r % next_n, 0, width), in int64 (no wrap)."""
    seq = seq_lens.to(torch.int64).repeat_interleave(next_n)
    draft = torch.arange(seq.numel(), device=seq.device) % next_n
    return (seq - next_n + 1 + draft).clamp(0, width).to(torch.int32)


def element_count(lengths, block_mode):
    lengths = lengths.to(torch.int64)
    return (lengths + 7) // 8 if block_mode else lengths


def row_keys(logits, lengths, block_mode):
    """int32 [R, N] element keys of rows of logits (BF16 [R, W]); positions at or past a
    row's element count are -1 (below every key)."""
    bits = bits32(logits)
    R, W = bits.shape
    if block_mode:
        pad = (-W) % 8
        if pad:
            bits = torch.nn.functional.pad(bits, (0, pad))
        lanes = bits.view(R, -1, 8)
        keys = torch.where(_is_nan(lanes).any(dim=2), torch.full_like(lanes[..., 0], KEY_CANONICAL_NAN),
                           order_key(lanes).amax(dim=2))
    else:
        keys = order_key(bits)
    n = element_count(lengths, block_mode)
    pos = torch.arange(keys.shape[1], device=keys.device)
    keys = torch.where(pos[None, :] < n[:, None], keys, torch.full_like(keys, -1))
    if block_mode:
        last = (n - 1).clamp(min=0)
        pinned = torch.where(n > 0, torch.full_like(last, KEY_POS_INF), torch.full_like(last, -1))
        keys.scatter_(1, last[:, None], pinned[:, None].to(keys.dtype))
    return keys


def keys_at(logits, lengths, block_mode, idx):
    """int32 [R, m]: the element keys at indices idx (int64 [R, m], clamped into the row's
    element range by the caller), the newest block pinned at +inf in block mode."""
    bits = bits32(logits)
    n = element_count(lengths, block_mode)
    if not block_mode:
        return order_key(torch.gather(bits, 1, idx))
    W = bits.shape[1]
    lane = idx[:, :, None] * 8 + torch.arange(8, device=idx.device)
    lane_bits = torch.gather(bits, 1, lane.clamp(max=W - 1).view(idx.shape[0], -1)).view(*idx.shape, 8)
    lane_bits = torch.where(lane < W, lane_bits, torch.zeros_like(lane_bits))
    key = torch.where(_is_nan(lane_bits).any(dim=2), torch.full_like(lane_bits[..., 0], KEY_CANONICAL_NAN),
                      order_key(lane_bits).amax(dim=2))
    return torch.where(idx == (n - 1)[:, None], torch.full_like(key, KEY_POS_INF), key)


@torch.no_grad()
def row_stats(logits, lengths, ks, block_mode, chunk=1024):
    """{k: (K int32 [R], above int64 [R])} for every k of ks (rows with n <= k: K = -1)."""
    kmax = max(ks)
    R = logits.shape[0]
    K = {k: torch.full((R,), -1, dtype=torch.int32, device=logits.device) for k in ks}
    A = {k: torch.zeros(R, dtype=torch.int64, device=logits.device) for k in ks}
    for s in range(0, R, chunk):
        keys = row_keys(logits[s:s + chunk], lengths[s:s + chunk], block_mode)
        top = torch.topk(keys.to(torch.float32), min(kmax, keys.shape[1]), dim=1).values.to(torch.int32)
        for k in ks:
            if k > keys.shape[1]:
                continue
            kth = top[:, k - 1]
            K[k][s:s + chunk] = kth
            A[k][s:s + chunk] = (keys > kth[:, None]).sum(dim=1)
    return {k: (K[k], A[k]) for k in ks}


@torch.no_grad()
def check(logits, lengths, k, block_mode, out, stats=None, chunk=4096, first=5):
    """({reason: rows violating it}, [first offending rows]) of out (int32 [R, k], on the
    GPU) under the contract. stats: row_stats(...) for this mode (computed if None)."""
    if stats is None:
        stats = row_stats(logits, lengths, (k,), block_mode)
    K_all, A_all = stats[k]
    R = logits.shape[0]
    counts = {r: 0 for r in REASONS}
    bad_rows = torch.zeros(R, dtype=torch.bool, device=out.device)
    n_all = element_count(lengths, block_mode)
    for s in range(0, R, chunk):
        o = out[s:s + chunk].to(torch.int64)
        lg, ln, n = logits[s:s + chunk], lengths[s:s + chunk], n_all[s:s + chunk]
        Kr, Ar = K_all[s:s + chunk], A_all[s:s + chunk]
        rows = o.shape[0]
        short = n <= k
        slots = torch.arange(k, device=o.device)[None, :].expand(rows, k)
        # short rows: the fixed answer
        jkeys = keys_at(lg, ln, block_mode, slots.clamp(max=max(lg.shape[1] if not block_mode
                                                                  else -(-lg.shape[1] // 8), 1) - 1))
        expect = torch.where(slots < n[:, None], slots, torch.full_like(slots, -1))
        if block_mode:
            expect = torch.where((slots < n[:, None]) & (jkeys == KEY_NEG_INF), torch.full_like(slots, -1), expect)
        short_bad = short & (o != expect).any(dim=1)
        # long rows
        minus = o == -1
        sel = ~minus
        out_of_range = sel & ((o < -1) | (o >= (lg.shape[1] if not block_mode else -(-lg.shape[1] // 8))))
        past = sel & ~out_of_range & (o >= n[:, None])
        valid = sel & (o >= 0) & (o < n[:, None])
        oc = torch.where(valid, o, torch.zeros_like(o))
        ko = keys_at(lg, ln, block_mode, oc)
        srt = torch.sort(torch.where(valid, o, -2 - slots), dim=1).values
        dup = (srt[:, 1:] == srt[:, :-1]) & (srt[:, 1:] >= 0)
        wrong_tie = valid & (ko < Kr[:, None])
        above_written = (valid & (ko > Kr[:, None])).sum(dim=1)
        # a duplicate above K could mask a miss; duplicates are reported anyway
        missed = above_written < Ar
        if block_mode:
            not_minus_one = valid & (ko == KEY_NEG_INF)
            allowed = torch.where(Kr == KEY_NEG_INF, k - Ar, torch.zeros_like(Ar))
        else:
            not_minus_one = torch.zeros_like(valid)
            allowed = torch.zeros_like(Ar)
        bad_minus = minus.sum(dim=1) != allowed
        long = ~short
        flags = {
            "out-of-range": long & out_of_range.any(dim=1),
            "past-length": long & past.any(dim=1),
            "duplicate": long & dup.any(dim=1),
            "wrong-tie": long & wrong_tie.any(dim=1),
            "missed-greater": long & missed,
            "not-minus-one": long & not_minus_one.any(dim=1),
            "bad-minus-one": long & bad_minus,
            "short-row": short_bad,
        }
        for reason, f in flags.items():
            counts[reason] += int(f.sum())
            bad_rows[s:s + chunk] |= f
    offenders = torch.nonzero(bad_rows).flatten()[:first].tolist()
    return counts, offenders


# ---------------------------------------------------------------------------------------
# GPU batch generators (random, indexer-like, adversarial), garbage and NaN past lengths
# ---------------------------------------------------------------------------------------
KINDS = ("random-bits", "indexer-rho0.9", "few-values", "plateau", "mostly-neg-inf", "monotone", "specials",
         "needles")


def _bf16_bits(x):
    return bits32(x.to(torch.bfloat16))


def boundary_lengths(width):
    base = [0, 1, 7, 8, 9, 511, 512, 513, 1023, 1024, 1025, 2047, 2048, 2049, 4095, 4096, 4097,
            16383, 16384, 16385, 32767, 32768, 32769, 65535, 65536, 65537, 262143, 262144]
    base += [8 * k + d for k in (512, 1024, 2048) for d in (-1, 0, 1)]
    return sorted({min(max(x, 0), width) for x in base} | {width - 1, width})


@torch.no_grad()
def make_batch(rows, width, seed=0, device="cuda", chunk=1024, heads=32, dim=64):
    """(logits bf16 [rows, width], lengths int32 [rows], kind int8 [rows]) on the GPU."""
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    bits = torch.empty((rows, width), dtype=torch.int16, device=device)
    kind = torch.randint(0, len(KINDS), (rows,), generator=g, device=device, dtype=torch.int64)
    kind[:len(KINDS)] = torch.arange(min(rows, len(KINDS)), device=device)  # each kind at least once
    keys = torch.randn(dim, generator=g, device=device) * math.sqrt(0.9) + \
        torch.randn(width, dim, generator=g, device=device) * math.sqrt(0.1)  # rho = 0.9
    specials = torch.tensor(SPECIALS, dtype=torch.int32, device=device)
    nans = torch.tensor(NAN_PATTERNS, dtype=torch.int32, device=device)
    pos = torch.arange(width, device=device)
    for s in range(0, rows, chunk):
        e = min(rows, s + chunk)
        r = e - s
        kd = kind[s:e]
        out = torch.randint(0, 1 << 16, (r, width), generator=g, device=device, dtype=torch.int32)  # random-bits
        normal = _bf16_bits(torch.randn(r, width, generator=g, device=device))
        # indexer-like: sum_h w_h relu(q_h . k_s) / sqrt(D), keys shared by the batch
        m = kd == 1
        if m.any():
            idx = torch.nonzero(m).flatten()
            q = torch.randn(idx.numel(), heads, dim, generator=g, device=device)
            w = (1 + 0.5 * torch.randn(idx.numel(), heads, generator=g, device=device)) / math.sqrt(heads)
            sc = torch.relu(torch.einsum("rhd,wd->rhw", q, keys))
            out[idx] = _bf16_bits(torch.einsum("rh,rhw->rw", w, sc) / math.sqrt(dim))
        # few values: 1..8 distinct values (ties everywhere), sometimes -inf / NaN among them
        vals = _bf16_bits(torch.randn(r, 8, generator=g, device=device))
        vals[:, 7] = torch.where(torch.rand(r, generator=g, device=device) < 0.3, 0xFF80, vals[:, 7])
        vals[:, 6] = torch.where(torch.rand(r, generator=g, device=device) < 0.1, 0x7FC0, vals[:, 6])
        nv = torch.randint(1, 9, (r, 1), generator=g, device=device)
        pick = torch.randint(0, 1 << 30, (r, width), generator=g, device=device) % nv
        few = torch.gather(vals, 1, pick)
        # plateau: one value, a step above it for a count near k
        step = torch.randint(0, 2 * 2048 + 2, (r, 1), generator=g, device=device)
        above = torch.rand(r, width, generator=g, device=device) < (step.float() / width)
        plateau = torch.where(above, 0x4000, 0x3F80)
        # mostly -inf: few finite logits
        finite = torch.rand(r, width, generator=g, device=device) < (torch.randint(
            0, 3000, (r, 1), generator=g, device=device).float() / width)
        neg_inf = torch.where(finite, normal, 0xFF80)
        # monotone: ascending or descending ramp of values (in runs)
        run = torch.randint(1, 64, (r, 1), generator=g, device=device)
        ramp = (pos[None, :] // run).float()
        ramp = torch.where(torch.rand(r, 1, generator=g, device=device) < 0.5, ramp, -ramp)
        mono = _bf16_bits(ramp / 64.0)
        # specials sprinkled into normal logits
        sp = torch.rand(r, width, generator=g, device=device) < 0.02
        spec = torch.where(sp, specials[torch.randint(0, len(SPECIALS), (r, width), generator=g, device=device)],
                           normal)
        # needles: a count near k of large values in a flat row
        cnt = torch.tensor([511, 512, 513, 1023, 1024, 1025, 2047, 2048, 2049], device=device)[
            torch.randint(0, 9, (r,), generator=g, device=device)]
        prio = torch.rand(r, width, generator=g, device=device)
        thresh = torch.sort(prio, dim=1, descending=True).values.gather(1, (cnt - 1).clamp(max=width - 1)[:, None])
        needles = torch.where(prio >= thresh, 0x4120, 0x3C00)
        for i, arr in ((2, few), (3, plateau), (4, neg_inf), (5, mono), (6, spec), (7, needles)):
            mm = kd == i
            out[mm] = arr[mm].to(torch.int32)
        bits[s:e] = torch.where(out >= 0x8000, out - 0x10000, out).to(torch.int16)
    # lengths: a third boundary values, a third uniform, a third full
    bl = torch.tensor(boundary_lengths(width), dtype=torch.int64, device=device)
    choice = torch.randint(0, 3, (rows,), generator=g, device=device)
    lengths = torch.where(choice == 0, bl[torch.randint(0, bl.numel(), (rows,), generator=g, device=device)],
                          torch.where(choice == 1, torch.randint(0, width + 1, (rows,), generator=g, device=device),
                                      torch.full((rows,), width, device=device)))
    # garbage and NaN past each length
    for s in range(0, rows, chunk):
        e = min(rows, s + chunk)
        past = pos[None, :] >= lengths[s:e, None]
        junk = torch.randint(0, 1 << 16, (e - s, width), generator=g, device=device, dtype=torch.int32)
        junk = torch.where(torch.rand(e - s, width, generator=g, device=device) < 0.25,
                           nans[torch.randint(0, len(NAN_PATTERNS), (e - s, width), generator=g, device=device)], junk)
        junk = torch.where(junk >= 0x8000, junk - 0x10000, junk).to(torch.int16)
        bits[s:e] = torch.where(past, junk, bits[s:e])
    return bits.view(torch.bfloat16), lengths.to(torch.int32), kind.to(torch.int8)
