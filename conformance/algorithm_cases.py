"""Case generators that steer SPEC.md part 2's algorithm: the underflow fallback and its
boundary, crowded survivors, ties at the cutoff, the path thresholds, the masked last
vector and the pinned block; on the streamed builds (1x512x4, 2x512x4 and 4x512x4, SPEC.md 2.12)
each CTA's queue of vectors at its capacity and one past it, its overflow (in one CTA, in
every CTA, over the row but in no CTA), the vectors of top == cutoff it truncates at k, and
the underflow.

The catalogue (`cases.py`) lists them, each with its *intent* (`controlled_intent`,
`hit_intent`, `threshold_intent` below): for the rows whose path the generator controls,
which path and fallback reason each build must take; the tests and `python -m
decode_topk.conformance --impl model` verify it with the trace.

A *controlled* token row fixes the sampled cutoff at the value 1.0 in every build: it puts
1.0 at q + 2 sample positions of every build (q for k = 2048, the largest) and every value
above 1.0 away from all sample positions, so no sample exceeds 1.0 and at least q equal
it. Then G (keys above the cutoff) is the number of values placed above 1.0 and E (keys
equal to it) the number of 1.0s: G + E, and so the fallback, are chosen by the generator.

A *vector-controlled* row (`controlled_vector_row`) steers the cutoff the same way on the
streamed builds' sample positions (1 and 2 CTAs, and 4 where asked) and places each value
above 1.0 and each 1.0 in a vector of its own, part by part (two parts: 2x512x4's chunks;
four: 4x512x4's), so that each CTA's vectors of top above and equal to the cutoff (GV_c,
EV_c: SPEC.md 2.12), and so its queue Q_c = GV_c + min(EV_c, k), are the generator's at
1, 2 (and, with four parts, 4) CTAs.
"""

import numpy as np

from decode_topk.reference.bits import NEG_INF_BITS, POS_INF_BITS, bf16_bits_from_float32

from .trace import q_for, sample_positions
from .coverage import top_slot_length, top_slot_vectors

from decode_topk.kernel.policy import (  # noqa: E402
    BUILDS, NARROW_SPAN, STREAM_QUEUE, TOP_SPAN, Build, direct_max_length)

CUTOFF_BITS = 0x3F80  # 1.0
POS_NAN = 0x7FC0
# Values above the cutoff 1.0: near, within NARROW_SPAN - 1 key steps (1.0078 .. 3.97), so
# that a staged attempt's one pass places K whenever it succeeds (SPEC.md 2.5), and far,
# NARROW_SPAN + 1 steps or more (4.0 .. 255), where it cannot (make_narrow_overflow). The
# keys of positive values are their bits plus 0x8000, so a bit step is a key step.
NEAR = (CUTOFF_BITS + 1, CUTOFF_BITS + NARROW_SPAN)  # [low, high) bits
FAR = (CUTOFF_BITS + NARROW_SPAN + 1, 0x4380)


def clusters_for(width):
    """The cluster sizes of the builds that hold token rows of `width` logits: the sample
    positions a row must steer (they depend on C; 1 and 2 at every width, the streamed
    builds')."""
    return tuple(sorted({build.cluster for build in BUILDS if build.capacity >= width}))


def _background(rng, size):
    """Values below 1.0 (many distinct, some repeated)."""
    return bf16_bits_from_float32(rng.uniform(-4.0, 0.99, size).astype(np.float32))


def _garbage(rng, size):
    """What lies past a row's length: large values and NaNs, so that reading it shows."""
    return rng.choice(np.array([POS_NAN, POS_INF_BITS, 0x7F00, 0xFFC0], np.uint16), size=size)


def controlled_row(rng, width, length, n_gt, n_eq, k_max=2048, above=None):
    """A token row whose sampled cutoff is 1.0 on every build that holds the width, with
    n_gt values above it (none at a sample position; `above`, their bits, or NEAR ones at
    random) and n_eq values equal to it."""
    row = _background(rng, width)
    row[length:] = _garbage(rng, width - length)
    q = q_for(length, k_max)
    sets = [np.unique(sample_positions(length, c)) for c in clusters_for(width)]
    union = np.unique(np.concatenate(sets))
    picks = set()
    for s in sets:
        have = len(picks.intersection(s.tolist()))
        if have < q + 2:
            free = np.setdiff1d(s, np.fromiter(picks, np.int64, len(picks)))
            picks.update(rng.choice(free, size=q + 2 - have, replace=False).tolist())
    picks = np.fromiter(picks, np.int64, len(picks))
    if picks.size > n_eq:
        raise ValueError(f"n_eq = {n_eq} is below the {picks.size} sample positions the cutoff needs")
    free_mask = np.ones(length, bool)  # np.setdiff1d(arange(length), union), without its sort
    free_mask[union] = False
    others = np.flatnonzero(free_mask)
    chosen = rng.choice(others, size=n_eq - picks.size + n_gt, replace=False)
    eq_pos = np.concatenate([picks, chosen[: n_eq - picks.size]])
    gt_pos = chosen[n_eq - picks.size:]
    row[eq_pos] = CUTOFF_BITS
    row[gt_pos] = rng.integers(*NEAR, size=gt_pos.size, dtype=np.uint16) if above is None else above
    return row


def make_controlled(rng, width, specs):
    """Rows of controlled_row, one a (length, n_gt, n_eq) spec, or (length, n_gt, n_eq,
    True): the n_gt values FAR above the cutoff (a staged attempt's one pass overflows
    where k <= n_gt)."""
    logits = np.stack([controlled_row(rng, width, spec[0], spec[1], spec[2],
                                      above=rng.integers(*FAR, size=spec[1], dtype=np.uint16) if spec[3:] else None)
                       for spec in specs])
    return logits, np.array([s[0] for s in specs])


def narrow_values(rng, far, at_255, at_254, near):
    """The values above the cutoff of a make_narrow_overflow row: `far` FAR ones, `at_255`
    and `at_254` exactly NARROW_SPAN and NARROW_SPAN - 1 key steps above it, `near` NEAR
    ones below those."""
    return np.concatenate([rng.integers(*FAR, size=far, dtype=np.uint16),
                           np.full(at_255, CUTOFF_BITS + NARROW_SPAN, np.uint16),
                           np.full(at_254, CUTOFF_BITS + NARROW_SPAN - 1, np.uint16),
                           rng.integers(NEAR[0], NEAR[1] - 1, size=near, dtype=np.uint16)])


def make_narrow_overflow(rng, width, specs):
    """Controlled rows (cutoff 1.0) whose k-th largest key may lie NARROW_SPAN or more key
    steps above the cutoff, where a staged attempt's one pass cannot place it and the row
    takes the direct path (SPEC.md 2.5; narrow_intent): one a (length, far, at_255, at_254,
    near, n_eq) spec (narrow_values)."""
    logits = np.stack([controlled_row(rng, width, length, far + a255 + a254 + near, n_eq,
                                      above=narrow_values(rng, far, a255, a254, near))
                       for length, far, a255, a254, near, n_eq in specs])
    return logits, np.array([s[0] for s in specs])


STREAM_CLUSTERS = (1, 2)  # the CTAs a row whose sample positions vector rows steer by default
STREAM_CLUSTERS_3 = (1, 2, 3)  # and those of the three-part rows (3x512x4's too)
STREAM_CLUSTERS_4 = (1, 2, 4)  # and those of the four-part rows (4x512x4's too)
STREAM_CLUSTERS_8 = (1, 2, 4, 8)  # and those of the eight-part rows (8x512x4's too)


def controlled_vector_row(rng, width, length, parts, k_max=2048, clusters=STREAM_CLUSTERS):
    """A token row whose sampled cutoff is 1.0 at each cluster size of `clusters` (the
    streamed builds' CTAs a row), with parts = ((gv_0, ev_0), (gv_1, ev_1), ...): part h
    of P (vectors [h nv // P, (h + 1) nv // P): 2x512x4's chunk h at P = 2, 4x512x4's at P
    = 4) holds exactly gv_h vectors whose top is above 1.0 (one value above it each, at no
    sample position) and ev_h whose top is 1.0 (one 1.0 each, the q + 2 sample positions
    of each cluster size that steer the cutoff among them); every other logit lies below
    1.0. So G is the sum of the gv_h and E of the ev_h."""
    row = _background(rng, width)
    row[length:] = _garbage(rng, width - length)
    nv = -(-length // 8)
    q = q_for(length, k_max)
    sets = [sample_positions(length, c) for c in clusters]
    sampled = np.zeros(8 * nv, bool)
    sampled[np.concatenate(sets)] = True
    picks = set()
    vectors = set()  # the vectors holding a pick: one pick each
    for s in sets:
        have = len(picks.intersection(s.tolist()))
        for p in rng.permutation(s).tolist():
            if have >= q + 2:
                break
            if p not in picks and p // 8 not in vectors:
                picks.add(p)
                vectors.add(p // 8)
                have += 1
        if have < q + 2:
            raise ValueError(f"length {length}: too few vectors for {q + 2} picks")
    row[np.fromiter(picks, np.int64, len(picks))] = CUTOFF_BITS
    # Each free vector's lanes that are valid and hold no sample: where a value is placed.
    lanes = ~sampled.reshape(nv, 8)
    lanes[nv - 1, length - 8 * (nv - 1):] = False
    free = lanes.any(axis=1)
    free[np.fromiter(vectors, np.int64, len(vectors))] = False
    picked = np.zeros(nv, bool)
    picked[np.fromiter(vectors, np.int64, len(vectors))] = True
    for h, (gv, ev) in enumerate(parts):
        lo, hi = h * nv // len(parts), (h + 1) * nv // len(parts)
        extra = ev - int(picked[lo:hi].sum())
        if extra < 0:
            raise ValueError(f"part {h}: ev = {ev} is below its {ev - extra} vectors of steering samples")
        candidates = lo + np.flatnonzero(free[lo:hi])
        if candidates.size < gv + extra:
            raise ValueError(f"part {h}: {candidates.size} free vectors for {gv + extra} values")
        chosen = rng.choice(candidates, size=gv + extra, replace=False)
        score = np.where(lanes[chosen], rng.random((chosen.size, 8)), -1.0)  # a random free lane each
        where = 8 * chosen + score.argmax(axis=1)
        row[where[:gv]] = rng.integers(*NEAR, size=gv, dtype=np.uint16)
        row[where[gv:]] = CUTOFF_BITS
    return row


def make_vector_controlled(rng, width, specs, clusters=STREAM_CLUSTERS):
    """Rows of controlled_vector_row, one a (length, (gv_0, ev_0), (gv_1, ev_1), ...) spec."""
    logits = np.stack([controlled_vector_row(rng, width, length, parts, clusters=clusters)
                       for length, *parts in specs])
    return logits, np.array([s[0] for s in specs])


def make_one_value_rows(rng, width, lengths):
    """Row r one value (1.0, +0, -0, +inf, -inf, +NaN, -NaN, the smallest subnormal, in
    turn) up to lengths[r], garbage past it: every vector's top is the cutoff, so a streamed
    CTA's queue takes its first k vectors and leaves out the rest (EV_c far above k)."""
    values = np.array([0x3F80, 0x0000, 0x8000, POS_INF_BITS, NEG_INF_BITS, 0x7FC0, 0xFFC0, 0x0001], np.uint16)
    logits = np.repeat(values[np.arange(len(lengths)) % values.size][:, None], width, axis=1)
    for r, length in enumerate(lengths):
        logits[r, length:] = _garbage(rng, width - length)
    return logits, np.array(lengths)


def make_samples_hit_top(rng, width, lengths, top=400):
    """Underflow by sampling: the row's `top` largest values sit exactly at the sample
    positions (the same in every build at these lengths), so the cutoff is the q-th of
    them and fewer than k keys are at or above it."""
    logits = np.empty((len(lengths), width), np.uint16)
    for r, length in enumerate(lengths):
        row = _background(rng, width)
        row[length:] = _garbage(rng, width - length)
        pos = np.unique(np.concatenate([sample_positions(length, c) for c in clusters_for(width)]))
        where = rng.choice(pos, size=top, replace=False)
        row[where] = rng.permutation(np.arange(0x4000, 0x4000 + top, dtype=np.uint16))
        logits[r] = row
    return logits, np.array(lengths)


def make_one_cta_hits(rng, width, lengths):
    """Underflow on the 1-CTA builds' sampled rows (longer than 32,768): the row's 2048
    largest values (distinct) sit exactly at the 1-CTA builds' 2048 sample positions, so
    the cutoff is the q-th largest value of the row and exactly q keys are at or above it:
    an underflow wherever q < k (one_cta_intent). Shorter rows take the direct path there,
    and a sampled attempt on them would underflow too, which their traces would show.
    At these short lengths the samples are a large share of the row, and the multi-CTA
    builds' other sample positions would dilute the steering (make_samples_hit_top)."""
    logits = np.empty((len(lengths), width), np.uint16)
    for r, length in enumerate(lengths):
        row = _background(rng, width)
        row[length:] = _garbage(rng, width - length)
        where = sample_positions(length, 1)
        row[where] = rng.permutation(np.arange(0x4000, 0x4000 + where.size, dtype=np.uint16))
        logits[r] = row
    return logits, np.array(lengths)


def make_cta_plateau(rng, width, specs):
    """A plateau of 1.0 spread evenly over the row, n_eq of them, and n_gt larger values:
    with n_eq / C > k a CTA holds more than k keys equal to the cutoff, which is K, so the
    lowest-index ties are spread over several CTAs and one CTA's share ends mid-chunk."""
    logits = np.empty((len(specs), width), np.uint16)
    for r, (length, n_gt, n_eq) in enumerate(specs):
        row = _background(rng, width)
        row[length:] = _garbage(rng, width - length)
        where = rng.choice(length, size=n_gt + n_eq, replace=False)
        row[where[:n_eq]] = CUTOFF_BITS
        row[where[n_eq:]] = rng.integers(CUTOFF_BITS + 1, 0x4380, size=n_gt, dtype=np.uint16)
        logits[r] = row
    return logits, np.array([s[0] for s in specs])


def make_tie_spread(rng, width, specs):
    """Rows of one value (1.0) with `above` larger values at random positions and a few
    smaller ones, one a (length, above) spec: K is 1.0, tied at almost every index, and
    the k - above lowest-index ties end inside CTA 0 (above near k), at a chunk boundary
    or inside the last CTA (length near k), in both modes. Garbage past the length."""
    logits = np.full((len(specs), width), CUTOFF_BITS, np.uint16)
    for r, (length, above) in enumerate(specs):
        where = rng.choice(length, size=min(length, above + 64), replace=False)
        logits[r, where[:above]] = rng.integers(CUTOFF_BITS + 1, 0x4380, size=above, dtype=np.uint16)
        logits[r, where[above:]] = 0x3F00  # 0.5: a few keys below K
        logits[r, length:] = _garbage(rng, width - length)
    return logits, np.array([s[0] for s in specs])


def make_vector_edges(rng, width, lengths):
    """Rows whose length is not a multiple of 8 (a masked last vector), each in two
    flavours: token (the row's largest value, +inf, is its last valid logit, NaN and
    +inf right past it) and block (the newest, partial block's valid logits and the block
    before it are -inf, so only the pin selects the newest block)."""
    rows = []
    for length in lengths:
        row = bf16_bits_from_float32(rng.standard_normal(width).astype(np.float32))
        row[length - 1] = POS_INF_BITS
        row[length:] = POS_NAN
        rows.append(row)
        row = bf16_bits_from_float32(rng.standard_normal(width).astype(np.float32))
        last = 8 * ((length - 1) // 8)
        row[last - 8: length] = NEG_INF_BITS
        row[length:] = POS_NAN
        rows.append(row)
    return np.stack(rows), np.repeat(np.array(lengths), 2)


def make_signed_zeros(rng, width, lengths, positive=300):
    """Rows of -0 with `positive` +0 near the end, one in each of the last `positive`
    blocks: K is -0 in both modes (positive < k), so every +0 must be chosen and -0 < +0
    decides which."""
    logits = np.full((len(lengths), width), 0x8000, np.uint16)
    for r, length in enumerate(lengths):
        first = 8 * ((length - 1) // 8) - 8 * positive
        where = first + 8 * np.arange(positive) + rng.integers(0, 8, size=positive)
        logits[r, where] = 0x0000
        logits[r, length:] = POS_NAN
    return logits, np.array(lengths)


def make_short_neg_inf(rng, width, lengths):
    """Short rows (n <= k) with -inf blocks and tokens: short block rows write -1 for
    -inf blocks; short token rows write every position."""
    logits = bf16_bits_from_float32(rng.standard_normal((len(lengths), width)).astype(np.float32))
    for r, length in enumerate(lengths):
        blocks = rng.random((width + 7) // 8) < 0.4
        mask = np.repeat(blocks, 8)[:width]
        logits[r, mask] = NEG_INF_BITS
        logits[r, length:] = POS_NAN
    return logits, np.array(lengths)


def make_normal_rows(rng, width, lengths):
    """Rows of normal values (thousands of distinct BF16 values), garbage past the
    length: the sampled path on distinct data, where moving a sample, a chunk boundary or
    q moves the cutoff."""
    logits = bf16_bits_from_float32(rng.standard_normal((len(lengths), width)).astype(np.float32))
    for r, length in enumerate(lengths):
        logits[r, length:] = _garbage(rng, width - length)
    return logits, np.array(lengths)


# ----------------------------------------------------------------------------------------
# The specs of the catalogue's algorithm cases, and their intents
# ----------------------------------------------------------------------------------------
W_SAMPLED = 131072  # sampled on every build that holds it but 16x512x16 (SPEC 2.3: D = 131,072 there)

# Crowded survivors: the rows that overflowed the retired 8192-survivor buffer (the
# rule before SPEC.md 2.4's selection spread over the CTAs) and its boundaries; every one
# now takes the sampled path, with thousands of keys above and at the cutoff in each CTA.
CROWDED_SPECS = (
    (W_SAMPLED, 12000, 300),  # G > 8192
    (W_SAMPLED, 8000, 193),  # G + E = 8193
    (W_SAMPLED, 7999, 193),  # G + E = 8192
    (W_SAMPLED, 7192, 1000),  # 8192 again, with more ties
    (W_SAMPLED, 7500, 1500),  # G + E = 9000
    (W_SAMPLED, 7168, 1025),
    (W_SAMPLED - 3, 9000, 500),  # masked last vector, other sample positions
)
UNDERFLOW_SPECS = (
    (W_SAMPLED, 200, 311),  # 511: underflow at every k
    (W_SAMPLED, 212, 300),  # 512: sampled at k = 512
    (W_SAMPLED, 700, 323),  # 1023
    (W_SAMPLED, 700, 324),  # 1024
    (W_SAMPLED, 1500, 547),  # 2047
    (W_SAMPLED, 1500, 548),  # 2048
    (W_SAMPLED - 5, 20, 400),  # 420: other sample positions at every C
)
CAPPED_SPECS = (
    (W_SAMPLED, 300, 6000),  # more than k keys equal to the cutoff in some CTAs
    (W_SAMPLED, 300, 30000),  # E past 8192: K is the cutoff, the lowest-index ties taken
    (W_SAMPLED - 1, 40, 3000),
)
WIDE_SPECS = (
    (524288, 12000, 300),  # crowded
    (524288, 7999, 193),  # 8192
    (524288, 8000, 193),  # 8193
    (524288, 200, 311),  # 511: underflow at every k
    (524288, 1500, 548),  # 2048
    (524288 - 7, 700, 324),  # 1024
    (524288, 7500, 1500),  # G + E past 8192
)
# Two rows 1,048,576 wide that 16x512x16 stages by copies (SPEC.md 2.2): crowded survivors,
# and underflow at every k past a partial last vector.
COPIES_SPECS = ((1048576, 12000, 300), (1048576 - 7, 200, 311))
# The staged attempt's one pass (SPEC.md 2.5): (length, far, at_255, at_254, near, n_eq)
# (make_narrow_overflow). K NARROW_SPAN - 1 and NARROW_SPAN steps above the cutoff at each
# k (the k - 1 largest FAR), K far at every k, and K near with most values far.
NARROW_SPECS = tuple((W_SAMPLED - 8 * i, k - 1, a255, 1 - a255, 300, 300)
                     for i, k in enumerate((512, 1024, 2048)) for a255 in (0, 1)) + (
    (W_SAMPLED, 2100, 0, 0, 0, 300),  # K far at every k
    (W_SAMPLED - 3, 400, 0, 0, 2000, 300),  # far above K at every k
)
# The same at the capacity of 1x512x16 and 2x512x8 (65,536 logits: their top slots).
NARROW_SPECS_65536 = ((65536, 2100, 0, 0, 0, 600), (65533, 1023, 1, 0, 300, 600), (65536 - 8, 1023, 0, 1, 300, 600))
SAMPLE_HIT_LENGTHS = (W_SAMPLED, 65536 + 8192)
# make_top_span: its six kinds at the widest row every build stages (1x512x4's 16,384),
# with a masked last vector, and shorter, each kind twice.
TOP_SPAN_LENGTHS = (16384, 16383, 12289, 16381, 9000, 16384, 16381, 16384, 16377, 12288, 16384, 10001)
# The register build's window from the top (SPEC.md 2.13): the same rows at 8,192 logits and
# below, its last thread's vector whole, partial and one lane short, and a row of 4,097.
REGISTER_TOP_SPAN_LENGTHS = (8192, 8191, 6145, 8185, 4097, 8192, 8184, 8192, 8177, 6144, 8192, 5001)
# The middle of each staged-vector slot s >= 1 of the 1-CTA builds (nv in (512 s, 512 (s+1)]).
ONE_CTA_LENGTHS_8 = tuple(2048 * (2 * s + 1) for s in range(1, 8))  # direct (<= 32,768)
ONE_CTA_LENGTHS_16 = tuple(2048 * (2 * s + 1) for s in range(8, 16))  # 1x512x16, sampled
# (length, above): ties at K that end inside the first chunk, mid-row, inside the last.
TIE_SPREAD_SPECS = ((600, 0), (1100, 100), (2100, 2000), (4100, 1), (4103, 511), (40000, 0), (40000, 2047),
                    (W_SAMPLED, 300), (W_SAMPLED - 7, 1500))
# D and D + 1 (SPEC 2.3): D = 32,768 at 1 and 2 CTAs, 65,536 at 4 and 8, 131,072 at 16; the
# first case (65,536 wide) runs on every build but 1x512x8, the second on the wide ones.
BOUNDARY_LENGTHS = (32768, 32769, 65535, 65536)
BOUNDARY_LENGTHS_WIDE = (65536, 65537, 131072, 131073)
VECTOR_EDGE_LENGTHS = (16381, 30001, W_SAMPLED - 3)
SIGNED_ZERO_LENGTHS = (16384, 30000, W_SAMPLED)
SHORT_NEG_INF_LENGTHS = (0, 1, 9, 500, 512, 4000, 4096, 8192, 16384)
# Sampled lengths whose chunks split unevenly (the shorter ones sampled only where D =
# direct_max_length(C) is 32,768: at 1 and 2 CTAs).
SAMPLED_LENGTHS = (131072, 131071, 100003, 70001, 40009, 33333)

# The streamed builds (SPEC.md 2.12): rows of W_STREAM logits stream on both (past their
# stages, 16,384 and 32,768 logits), and each chunk of 2x512x4 holds more than STREAM_QUEUE
# = 8,192 vectors (nv = 17,408), so each of its CTAs may overflow alone. A spec is (length,
# (gv_0, ev_0), (gv_1, ev_1)): the vectors of top above / equal to the cutoff in each half
# (controlled_vector_row); at one CTA a row the halves add up.
W_STREAM = 139272
L_STREAM = 139264
STREAM_SPECS = (
    # k = 2048: Q = 6,144 + 2,048 = STREAM_QUEUE at 1 CTA and in CTA 0 of 2: the full
    # queue is selected from (GV + EV above it: EV capped at k decides)
    (L_STREAM, (6144, 2100), (0, 100)),
    (L_STREAM, (6145, 2100), (0, 100)),  # k = 2048: Q = 8,193: overflow though GV alone fits
    (L_STREAM, (5000, 100), (5000, 100)),  # overflow at 1 CTA; at 2 each queue fits (the row's Q does not)
    (L_STREAM, (100, 100), (8300, 100)),  # at 2 CTAs the last CTA's queue alone overflows
    (L_STREAM - 5, (8400, 100), (8400, 100)),  # every queue overflows by GV; a masked last vector
    (L_STREAM, (0, 2100), (0, 100)),  # G = 0: K = cutoff, the k selected keys in the first k queued vectors
    (L_STREAM - 3, (300, 200), (300, 2000)),  # G < k <= G + E: K = cutoff, at 2 CTAs ties in both chunks
    (L_STREAM - 1, (100, 150), (100, 150)),  # G + E = 500: underflow at every k
    (L_STREAM, (100, 156), (100, 156)),  # G + E = 512: sampled at k = 512, underflow above
    (L_STREAM, (1000, 524), (0, 524)),  # G + E = 2048: sampled at every k
)
# 3x512x4 (SPEC.md 2.12): rows of W_STREAM_3 logits, whose three chunks (the parts) hold
# more than STREAM_QUEUE vectors each (nv = 26,112: 8,704 a CTA), so each CTA of 3x512x4
# may overflow alone; the cutoff is steered at 3 CTAs too (STREAM_CLUSTERS_3).
W_STREAM_3 = 208904
L_STREAM_3 = 208896
STREAM_3_SPECS = (
    # k = 2048: CTA 0's queue at STREAM_QUEUE (and at 1 CTA the row's)
    (L_STREAM_3, (6144, 2100), (0, 100), (0, 100)),
    (L_STREAM_3, (6145, 2100), (0, 100), (0, 100)),  # k = 2048: Q_0 = 8,193: overflow
    (L_STREAM_3 - 5, (100, 100), (100, 100), (8300, 100)),  # the last CTA's queue alone overflows
    (L_STREAM_3, (4500, 100), (4500, 100), (100, 100)),  # every queue of 3 fits; of 1 not
    (L_STREAM_3 - 3, (0, 2100), (300, 100), (0, 100)),  # G < k <= G + E at k = 2048: K = cutoff
    (L_STREAM_3 - 1, (100, 100), (0, 100), (0, 100)),  # G + E = 500: underflow at every k
)
# 4x512x4 (SPEC.md 2.12): rows of W_STREAM_4 logits, whose four chunks (the parts) hold
# more than STREAM_QUEUE vectors each (nv = 34,816: 8,704 a CTA), so each CTA of 4x512x4
# may overflow alone; the cutoff is steered at 4 CTAs too (STREAM_CLUSTERS_4).
W_STREAM_4 = 278536
L_STREAM_4 = 278528
STREAM_4_SPECS = (
    # k = 2048: CTA 0's queue at STREAM_QUEUE (and at 1 and 2 CTAs the row's and the half's)
    (L_STREAM_4, (6144, 2100), (0, 100), (0, 100), (0, 100)),
    (L_STREAM_4, (6145, 2100), (0, 100), (0, 100), (0, 100)),  # k = 2048: Q_0 = 8,193: overflow
    (L_STREAM_4 - 5, (100, 100), (100, 100), (100, 100), (8300, 100)),  # the last CTA's queue alone overflows
    (L_STREAM_4, (4500, 100), (4500, 100), (100, 100), (100, 100)),  # every queue of 4 fits; of 2 and 1 not
    (L_STREAM_4 - 3, (0, 2100), (0, 100), (300, 100), (0, 100)),  # G < k <= G + E at k = 2048: K = cutoff
    (L_STREAM_4 - 1, (100, 100), (0, 100), (0, 100), (0, 100)),  # G + E = 500: underflow at every k
)
# 8x512x4 (SPEC.md 2.12): rows of W_STREAM_8 logits, whose eight chunks (the parts) hold
# more than STREAM_QUEUE vectors each (nv = 69,632: 8,704 a CTA), so each CTA of 8x512x4
# may overflow alone; the cutoff is steered at 8 CTAs too (STREAM_CLUSTERS_8).
W_STREAM_8 = 557064
L_STREAM_8 = 557056
_REST_8 = ((0, 100),) * 6
STREAM_8_SPECS = (
    # k = 2048: CTA 0's queue at STREAM_QUEUE (and at 1, 2 and 4 CTAs the row's, half's, quarter's)
    (L_STREAM_8, (6144, 2100), (0, 100)) + _REST_8,
    (L_STREAM_8, (6145, 2100), (0, 100)) + _REST_8,  # k = 2048: Q_0 = 8,193: overflow
    (L_STREAM_8 - 5,) + ((100, 100),) * 7 + ((8300, 100),),  # the last CTA's queue alone overflows
    (L_STREAM_8, (4000, 100), (4000, 100)) + ((100, 100),) * 6,  # every queue of 8 fits; of 4, 2 and 1 not
    (L_STREAM_8 - 3, (0, 2100), (0, 100), (0, 100), (300, 100), (0, 100), (0, 100), (0, 100), (0, 100)),  # K = cutoff
    (L_STREAM_8 - 1, (100, 50)) + ((0, 50),) * 7,  # G + E = 500: underflow at every k
)
# The same at the widest row (full level).
W_STREAM_WIDE = 1048576
STREAM_WIDE_SPECS = (
    (W_STREAM_WIDE, (6144, 2100), (0, 100)),
    (W_STREAM_WIDE, (6145, 2100), (0, 100)),
    (W_STREAM_WIDE, (5000, 100), (5000, 100)),
    (W_STREAM_WIDE - 7, (300, 1000), (0, 2000)),
    (W_STREAM_WIDE, (200, 150), (0, 150)),
)
# Around each streamed build's stage D (16,384, 32,768, 49,152 and 65,536; 8x512x4's 131,072 in
# STREAM_BOUNDARY_LENGTHS_8, a case of its own whose width leaves out the builds of at most
# 131,072 logits): direct up to it, streamed past it, masked last vectors either side; the
# 1-CTA build's stage rows in both modes (a block row of 16,384 logits fills its four slots).
STREAM_BOUNDARY_LENGTHS = (16383, 16384, 16385, 16387, 16392, 16393, 32767, 32768, 32769, 32771, 32776, 32777,
                           49151, 49152, 49153, 49155, 49160, 49161, 65535, 65536, 65537, 65539, 65544, 65545)
STREAM_BOUNDARY_LENGTHS_8 = (131071, 131072, 131073, 131075, 131080, 131081)
STAGE_LENGTHS = (16384, 16383, 16377, 12289, 12296, 4097, 0)
# One value a row (make_one_value_rows): past both stages, each chunk of 2x512x4 more than
# STREAM_QUEUE vectors in most rows, whose queues nonetheless hold k vectors only.
ONE_VALUE_LENGTHS = (L_STREAM - 3, L_STREAM, 100001, 40000, 70003, L_STREAM - 8, 33000, L_STREAM - 1)


# The intents: for the cases made from the specs above, `intent(build, k)` -> per row the
# (path, reason) of token mode on that build (reason None: any). The catalogue sets each
# as its case's `intent`, built from the same specs or lengths as the case's rows.

def _direct_max(build):
    """D of a build (SPEC.md 2.3, 2.12)."""
    build = Build.parse(build)
    return direct_max_length(build.cluster, build.vectors)


def attempt_outcome(build, k, n_gt, n_eq, far=False):
    """(path, reason) of a sampled attempt with G = n_gt, E = n_eq on build, where the
    cutoff is steered: underflow (2, 2) when G + E < k; on the streamed builds, whose
    overflow depends on how the values share vectors (SPEC.md 2.12), any outcome of the
    attempt, (1, None), when some CTA's queue might exceed STREAM_QUEUE (G + min(E, k)
    does: trace.queue_bound); on the staged builds the one pass's overflow (2, 1) when the
    values above the cutoff are FAR and k <= G (K among them, SPEC.md 2.5); else sampled
    (1, 0)."""
    if n_gt + n_eq < k:
        return (2, 2)
    if Build.parse(build).streams:
        return (1, None) if n_gt + min(n_eq, k) > STREAM_QUEUE else (1, 0)
    return (2, 1) if far and k <= n_gt else (1, 0)


def controlled_intent(specs):
    """Rows of make_controlled: direct up to the build's direct_max_length, else
    attempt_outcome."""
    def intent(build, k):
        return [(2, 0) if spec[0] <= _direct_max(build) else attempt_outcome(build, k, *spec[1:]) for spec in specs]
    return intent


def queues_of(parts, cluster, k):
    """Q_c = GV_c + min(EV_c, k) of a vector-controlled row's CTAs at `cluster` CTAs a row
    (each CTA's chunk the union of len(parts) / cluster consecutive parts), or None where
    the parts do not split into the CTAs' chunks (more CTAs than parts)."""
    if len(parts) % cluster:
        return None
    per = len(parts) // cluster
    groups = [parts[c * per:(c + 1) * per] for c in range(cluster)]
    return [sum(gv for gv, _ in g) + min(sum(ev for _, ev in g), k) for g in groups]


def vector_intent(specs, clusters=STREAM_CLUSTERS):
    """Rows of make_vector_controlled (made with the same `clusters`): direct up to the
    build's direct_max_length; past it, where the build's CTAs a row are among `clusters`
    (the cutoff steered): on the streamed builds overflow (2, 1) when some CTA's Q_c
    exceeds STREAM_QUEUE (any outcome of the attempt where the parts do not give the
    CTAs' queues), else underflow (2, 2) when G + E < k, else sampled (1, 0); on another
    build (no queue) underflow or sampled; elsewhere a sampled attempt (any outcome)."""
    def intent(build, k):
        build = Build.parse(build)
        rows = []
        for length, *parts in specs:
            ge = sum(gv + ev for gv, ev in parts)
            queues = queues_of(parts, build.cluster, k)
            if length <= _direct_max(build):
                rows.append((2, 0))
            elif build.cluster not in clusters or (build.streams and queues is None):
                rows.append((1, None))
            elif build.streams and max(queues) > STREAM_QUEUE:
                rows.append((2, 1))
            else:
                rows.append((2, 2) if ge < k else (1, 0))
        return rows
    return intent


def hit_intent(lengths):
    """Rows of make_samples_hit_top: underflow wherever the build samples the row, direct
    where it does not (16x512x16 takes 131,072 logits direct)."""
    def intent(build, k):
        return [(2, 0) if length <= _direct_max(build) else (2, 2) for length in lengths]
    return intent


def one_cta_intent(lengths):
    """Rows of make_one_cta_hits: direct up to the build's direct_max_length; past it on a
    1-CTA build underflow where q < k, else (the 2048 values consecutive keys, so K lies q -
    k key steps above the cutoff) the one pass's overflow where q - k >= NARROW_SPAN, else
    sampled; on the others a sampled attempt (any outcome)."""
    def intent(build, k):
        rows = []
        for length in lengths:
            q = q_for(length, k)
            if length <= _direct_max(build):
                rows.append((2, 0))
            elif Build.parse(build).cluster == 1:
                rows.append((2, 2) if q < k else (2, 1) if q - k >= NARROW_SPAN else (1, 0))
            else:
                rows.append((1, None))
        return rows
    return intent


def make_top_span(rng, width, lengths):
    """Rows for the direct path's window from the top (SPEC.md 2.5): the row's largest key
    M (128.0) and, in turn, 2047 keys TOP_SPAN - 1 steps below it (K placed by the window,
    bin 1), 2047 keys TOP_SPAN steps below it (K in the window's bin 0: the two passes),
    511 keys 100 steps below it over a far background (placed at k = 512; above it K lies in
    the background, past the window: the two passes), 2047 keys equal to 64.0 with the
    row's three largest (above it) in its last valid lanes (K = 64.0 and A = 3: an M that
    missed the last vector would lump them into K's bin; on a cluster they lie in the last
    CTA's chunk, so an M of CTA 0's chunk alone misses them too), 2047 keys NARROW_SPAN
    steps below M (bin 256, the lowest of the upper 256) and 2047 keys NARROW_SPAN + 1
    below it (bin 255, the highest of the lower 256: a selection or a prefix over half the
    bins misses K or the keys above it); one row a length, the kinds in turn, garbage past
    the length."""
    top = 0x4300  # 128.0
    below = {0: TOP_SPAN - 1, 1: TOP_SPAN, 4: NARROW_SPAN, 5: NARROW_SPAN + 1}
    logits = np.empty((len(lengths), width), np.uint16)
    for r, length in enumerate(lengths):
        row = bf16_bits_from_float32(rng.uniform(-4.0, 1.0, width).astype(np.float32))  # far below M
        row[length:] = _garbage(rng, width - length)
        kind = r % 6
        if kind == 3:
            where = rng.choice(length - 8, size=2047, replace=False)
            row[where] = 0x4280  # 64.0
            row[length - 3:length] = (0x4281, 0x4290, 0x4300)
        else:
            where = rng.choice(length, size=2048, replace=False)
            row[where[0]] = top
            if kind == 2:
                row[where[1:512]] = top - 100
            else:
                row[where[1:]] = top - below[kind]
        logits[r] = row
    return logits, np.array(lengths)


def narrow_intent(specs):
    """Rows of make_narrow_overflow: direct up to the build's direct_max_length; past it
    underflow when G + E < k, else by the k-th largest key: FAR or NARROW_SPAN steps above
    the cutoff, the one pass's overflow (2, 1), nearer, sampled (1, 0). (On the streamed
    builds that overflow takes the two passes over the queues: sampled (1, 0).)"""
    def intent(build, k):
        build = Build.parse(build)
        rows = []
        for length, far, a255, a254, near, n_eq in specs:
            if length <= _direct_max(build):
                rows.append((2, 0))
            elif far + a255 + a254 + near + n_eq < k:
                rows.append((2, 2))
            else:
                rows.append((2, 1) if k <= far + a255 and not build.streams else (1, 0))
        return rows
    return intent


def threshold_intent(lengths):
    """Rows of make_normal_rows around D = direct_max_length(C, V): a sampled attempt (any
    outcome) past it, direct at or below it."""
    def intent(build, k):
        return [(1, None) if length > _direct_max(build) else (2, 0) for length in lengths]
    return intent


def intent_problems(intent, build, k, block_mode, trace):
    """Rows whose trace's (path, reason) differ from `intent` (a case's intent; None: the
    case intends nothing)."""
    if intent is None or block_mode:
        return []
    intents = intent(build, k)
    trace = np.asarray(trace)
    if trace.shape != (len(intents), 8):
        return []  # trace_problems reports the shape
    problems = []
    for r, (path, reason) in enumerate(intents):
        got_path, got_reason = int(trace[r, 0]), int(trace[r, 1])
        if path == 1 and reason is None:
            ok = got_path == 1 or got_reason in (1, 2)  # a sampled attempt
        else:
            ok = got_path == path and (reason is None or got_reason == reason)
        if not ok:
            problems.append(f"row {r}: intended path {path} reason {reason}, got path {got_path} "
                            f"reason {got_reason}")
    return problems


def top_slot_specs(builds):
    """Controlled specs at the shortest length whose every CTA of every build of `builds`
    stages its top slot (coverage.top_slot_length): crowded (G = 12000), underflow
    (G + E = 511 < k), sampled (G + E = 8192) and the one pass's overflow (G = 3000 FAR),
    at every k."""
    length = top_slot_length(builds)
    # The cutoff needs q + 2 copies of 1.0 at each build's sample positions (controlled_row):
    # at the 1-CTA builds' short top-slot lengths q is large, so more equal keys are placed.
    need = len(clusters_for(length + 7)) * (q_for(length, 2048) + 2)
    if need <= 193:
        return ((length, 12000, 300), (length, 200, 311), (length, 7999, 193), (length, 3000, 193, True))
    return ((length, 12000, need), (length, 200, need), (length, 3000, need), (length, 3000, need, True))


def make_top_slot_rows(rng, width, specs, builds):
    """make_controlled's rows, then the row's largest values swapped into the vectors the
    CTAs of `builds` stage in their highest slot (coverage.top_slot_vectors), every lane that
    is valid, no sample position of any build and not 1.0 (from the values above 1.0 outside
    those lanes, so a large value already in a lane is not swapped out of it).

    Why: reaching a slot is not enough; a slot whose vectors hold only unselected logits
    hides a kernel bug confined to it (a wrong address, a dropped top). With the row's
    largest keys there, such a bug drops selected indices in both modes. The swap keeps what
    the steering needs: no value above 1.0 lands on a sample position and the 1.0s stay, so
    G, each CTA's E and the intended fallback are unchanged."""
    logits, lengths = make_controlled(rng, width, specs)
    for row, length in zip(logits, lengths.tolist()):
        lanes = np.arange(8, dtype=np.int64)
        vectors = np.concatenate([top_slot_vectors(b, length) for b in builds])
        targets = np.unique((8 * vectors[:, None] + lanes).ravel())
        samples = np.concatenate([sample_positions(length, c) for c in clusters_for(width)])
        targets = np.setdiff1d(targets[targets < length], samples)
        # controlled_row's values: above 1.0 in NEAR or FAR, the background below 1.0
        # (positive bits under 0x3F80, or negative).
        above = (row[:length] > CUTOFF_BITS) & (row[:length] < 0x8000)
        targets = targets[row[targets] != CUTOFF_BITS]
        above[targets] = False
        largest = np.flatnonzero(above)[np.argsort(row[:length][above], kind="stable")[::-1]]
        n = min(targets.size, largest.size)
        row[targets[:n]], row[largest[:n]] = row[largest[:n]], row[targets[:n]].copy()
    return logits, lengths

