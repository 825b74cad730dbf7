"""Case generators that steer SPEC.md part 2's algorithm: the underflow fallback and its
boundary, crowded survivors, ties at the cutoff, the path thresholds, the masked last
vector and the pinned block.

The catalogue (`cases.py`) lists them, each with its *intent* (`controlled_intent`,
`hit_intent`, `threshold_intent` below): for the rows whose path the generator controls,
which path and fallback reason each build must take; the tests and `python -m
decode_topk.conformance --impl model` verify it with the trace.

A *controlled* token row fixes the sampled cutoff at the value 1.0 in every build: it puts
1.0 at q + 2 sample positions of every build (q for k = 2048, the largest) and every value
above 1.0 away from all sample positions, so no sample exceeds 1.0 and at least q equal
it. Then G (keys above the cutoff) is the number of values placed above 1.0 and E (keys
equal to it) the number of 1.0s: G + E, and so the fallback, are chosen by the generator.
"""

import numpy as np

from decode_topk.reference.bits import NEG_INF_BITS, POS_INF_BITS, bf16_bits_from_float32

from .trace import q_for, sample_positions
from .coverage import top_slot_length, top_slot_vectors

CUTOFF_BITS = 0x3F80  # 1.0
from decode_topk.kernel.policy import BUILDS, direct_max_length  # noqa: E402

def clusters_for(width):
    """The cluster sizes of the builds that hold rows of `width` logits: the sample
    positions a row must steer (they depend on C)."""
    return tuple(sorted({build.cluster for build in BUILDS if build.capacity >= width}))
POS_NAN = 0x7FC0


def _background(rng, size):
    """Values below 1.0 (many distinct, some repeated)."""
    return bf16_bits_from_float32(rng.uniform(-4.0, 0.99, size).astype(np.float32))


def _garbage(rng, size):
    """What lies past a row's length: large values and NaNs, so that reading it shows."""
    return rng.choice(np.array([POS_NAN, POS_INF_BITS, 0x7F00, 0xFFC0], np.uint16), size=size)


def controlled_row(rng, width, length, n_gt, n_eq, k_max=2048):
    """A token row whose sampled cutoff is 1.0 on every build, with n_gt values above it
    (none at a sample position) and n_eq values equal to it."""
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
    row[gt_pos] = rng.integers(CUTOFF_BITS + 1, 0x4380, size=gt_pos.size, dtype=np.uint16)  # (1, 256)
    return row


def make_controlled(rng, width, specs):
    """Rows of controlled_row, one a (length, n_gt, n_eq) spec."""
    logits = np.stack([controlled_row(rng, width, length, g, e) for length, g, e in specs])
    return logits, np.array([s[0] for s in specs])


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
    (W_SAMPLED - 5, 100, 150),  # 250
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
SAMPLE_HIT_LENGTHS = (W_SAMPLED, 65536 + 8192)
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


# The intents: for the cases made from the specs above, `intent(build, k)` -> per row the
# (path, reason) of token mode on that build (reason None: any). The catalogue sets each
# as its case's `intent`, built from the same specs or lengths as the case's rows.

def controlled_intent(specs):
    """Rows of make_controlled: direct up to the build's direct_max_length, else underflow
    below k, sampled otherwise."""
    def intent(build, k):
        cluster, threads, _ = build
        rows = []
        for length, n_gt, n_eq in specs:
            if length <= direct_max_length(cluster):
                rows.append((2, 0))
            elif n_gt + n_eq < k:
                rows.append((2, 2))
            else:
                rows.append((1, 0))
        return rows
    return intent


def hit_intent(lengths):
    """Rows of make_samples_hit_top: underflow wherever the build samples the row, direct
    where it does not (16x512x16 takes 131,072 logits direct)."""
    def intent(build, k):
        cluster, threads, _ = build
        return [(2, 0) if length <= direct_max_length(cluster) else (2, 2) for length in lengths]
    return intent


def one_cta_intent(lengths):
    """Rows of make_one_cta_hits: direct up to the build's direct_max_length; past it on a
    1-CTA build underflow where q < k, else sampled, and on the others a sampled attempt
    (any outcome)."""
    def intent(build, k):
        cluster, threads, _ = build
        rows = []
        for length in lengths:
            if length <= direct_max_length(cluster):
                rows.append((2, 0))
            elif cluster == 1:
                rows.append((2, 2) if q_for(length, k) < k else (1, 0))
            else:
                rows.append((1, None))
        return rows
    return intent


def threshold_intent(lengths):
    """Rows of make_normal_rows around D = direct_max_length(C): a sampled attempt (any
    outcome) past it, direct at or below it."""
    def intent(build, k):
        cluster, threads, _ = build
        return [(1, None) if length > direct_max_length(cluster) else (2, 0) for length in lengths]
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
            ok = got_path == 1 or got_reason == 2  # a sampled attempt
        else:
            ok = got_path == path and (reason is None or got_reason == reason)
        if not ok:
            problems.append(f"row {r}: intended path {path} reason {reason}, got path {got_path} "
                            f"reason {got_reason}")
    return problems


def top_slot_specs(builds):
    """Controlled specs at the shortest length whose every CTA of every build of `builds`
    stages its top slot (coverage.top_slot_length): crowded (G = 12000), underflow
    (G + E = 511 < k) and sampled (G + E = 8192), at every k."""
    length = top_slot_length(builds)
    # The cutoff needs q + 2 copies of 1.0 at each build's sample positions (controlled_row):
    # at the 1-CTA builds' short top-slot lengths q is large, so more equal keys are placed.
    need = len(clusters_for(length + 7)) * (q_for(length, 2048) + 2)
    if need <= 193:
        return ((length, 12000, 300), (length, 200, 311), (length, 7999, 193))
    return ((length, 12000, need), (length, 200, need), (length, 3000, need))


def make_top_slot_rows(rng, width, specs, builds):
    """make_controlled's rows, then the row's largest values swapped into the vectors the
    CTAs of `builds` stage in their highest slot (coverage.top_slot_vectors), every lane that
    is valid, no sample position of any build and holds a value below 1.0.

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
        # controlled_row's values: above 1.0 in (0x3F80, 0x4380), the background below 1.0
        # (positive bits under 0x3F80, or negative).
        above = (row[:length] > CUTOFF_BITS) & (row[:length] < 0x8000)
        targets = targets[~above[targets] & (row[targets] != CUTOFF_BITS)]
        largest = np.flatnonzero(above)[np.argsort(row[:length][above], kind="stable")[::-1]]
        n = min(targets.size, largest.size)
        row[targets[:n]], row[largest[:n]] = row[largest[:n]], row[targets[:n]].copy()
    return logits, lengths

