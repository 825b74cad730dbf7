"""The case catalogue: one table (`CASES`) of named, seeded conformance cases.

Each case makes `(logits_bits uint16 [rows, width], lengths int32 [rows])` from
`np.random.default_rng(seed)` alone, so a case name and seed reproduce a failure. Level
`ci` is small and fast; level `full` is `ci` plus the big ones (widths up to 1,048,576).
Most rows are shorter than the width and carry garbage and NaN past their length, because
real callers leave those there and the contract says they never matter.

Every width is a multiple of 8, because the kernel reads rows as 16-byte vectors and needs
a row stride of a multiple of 8 logits.
"""

from dataclasses import dataclass
from functools import partial
from typing import Callable, Optional

import numpy as np

from decode_topk.kernel.policy import (
    BUILDS,
    LOGITS_PER_VECTOR,
    REG_FINE_SHIFT,
    REGISTER,
    SAMPLED_ASYNC_MIN_LENGTH,
    WRITE_QUEUE_VECTORS,
)
from decode_topk.reference.bits import (
    NEG_INF_BITS,
    POS_INF_BITS,
    bf16_bits_from_float32,
    bits_from_key,
)
from decode_topk.reference.topk import KS, validate_inputs

from . import algorithm_cases as algo

LEVELS = ("ci", "full")
MODES = (False, True)  # token mode, block mode

# Special bit patterns sprinkled into rows: NaNs of both signs and several payloads
# (quiet, signalling, canonical, all-ones), both zeros and both infinities.
NAN_PATTERNS = np.array([0x7FC0, 0xFFC0, 0x7F81, 0xFF81, 0x7FFF, 0xFFFF, 0x7FA5, 0xFFA5], np.uint16)
SPECIAL_PATTERNS = np.concatenate([NAN_PATTERNS, np.array([0x0000, 0x8000, POS_INF_BITS, NEG_INF_BITS], np.uint16)])

# Lengths where the kernel changes behaviour: the sampled-path thresholds D (SPEC 2.3),
# 16,384 on the streamed build 1x512x4 (2.12), 32,768 logits at 1 and 2 CTAs (2x512x4's
# stage too), 65,536 at 4 and 8, 131,072 at 16; 262144 = a cluster's capacity at 8 vectors a thread; 524288 the
# 8x512x16 capacity.
KERNEL_BOUNDARY_LENGTHS = (16384, 16385, 32767, 32768, 32769, 65536, 65537, 131072, 131073, 262143, 262144)


@dataclass(frozen=True)
class Case:
    """A named, seeded case: `make(rng)` returns (logits_bits, lengths).

    intent: for the algorithm cases whose rows steer SPEC.md part 2, `intent(build, k)`
    -> per row the (path, reason) of the trace in token mode on that build (reason None:
    any; algorithm_cases.intent_problems checks it), made next to `make` from the same
    specs so that the two cannot drift apart; None for the other cases."""

    name: str
    level: str
    seed: int
    make: Callable
    comment: str
    ks: tuple = KS
    modes: tuple = MODES
    intent: Optional[Callable] = None

    def generate(self):
        """The case's (logits_bits, lengths), the same on every call."""
        logits, lengths = self.make(np.random.default_rng(self.seed))
        lengths = np.asarray(lengths, dtype=np.int32)
        validate_inputs(logits, lengths, self.ks[0])
        if logits.shape[1] % 8:
            raise ValueError(f"case {self.name}: width {logits.shape[1]} is not a multiple of 8")
        return logits, lengths


# ----------------------------------------------------------------------------------------
# Building blocks
# ----------------------------------------------------------------------------------------

def garbage(rng, size):
    """Random bit patterns with one in four a NaN or other special: what lies past a
    row's length."""
    bits = rng.integers(0, 1 << 16, size=size, dtype=np.uint16)
    special = rng.random(size) < 0.25
    bits[special] = rng.choice(SPECIAL_PATTERNS, size=int(special.sum()))
    return bits


def fill_past_lengths(rng, logits, lengths):
    """Overwrite every row's logits at and past its length with garbage."""
    for r, length in enumerate(lengths):
        logits[r, length:] = garbage(rng, logits.shape[1] - int(length))
    return logits


def normal_bits(rng, shape, scale=1.0):
    return bf16_bits_from_float32(rng.standard_normal(shape, dtype=np.float32) * np.float32(scale))


def mixed_lengths(rng, rows, width, full_rows=1):
    """Lengths between width/2 and width, the first `full_rows` of them exactly width."""
    lengths = rng.integers(width // 2, width + 1, size=rows)
    lengths[:full_rows] = width
    return lengths


def indexer_keys(rng, width, rho, dim):
    """Keys k_s = sqrt(rho) kbar + sqrt(1 - rho) eps_s, all N(0, I_D), float32 [width, D]:
    rho sets how alike the keys are, hence how few distinct logits a row holds."""
    kbar = rng.standard_normal(dim, dtype=np.float32)
    eps = rng.standard_normal((width, dim), dtype=np.float32)
    return np.float32(np.sqrt(rho)) * kbar + np.float32(np.sqrt(1.0 - rho)) * eps


def indexer_logits(rng, keys, heads):
    """One row of indexer-like logits over `keys` as BF16 bits:
    logit_s = sum_h w_h relu(q_h . k_s) / sqrt(D), w_h = (1 + 0.5 z_h) / sqrt(H)."""
    dim = keys.shape[1]
    q = rng.standard_normal((heads, dim), dtype=np.float32)
    w = ((1.0 + 0.5 * rng.standard_normal(heads, dtype=np.float32)) / np.sqrt(heads)).astype(np.float32)
    scores = q @ keys.T
    np.maximum(scores, 0.0, out=scores)
    return bf16_bits_from_float32((w @ scores) / np.float32(np.sqrt(dim)))


def indexer_row(rng, width, rho, heads=32, dim=64):
    """A single indexer-like row (fresh keys)."""
    return indexer_logits(rng, indexer_keys(rng, width, rho, dim), heads)


# ----------------------------------------------------------------------------------------
# Generators, one a kind of case
# ----------------------------------------------------------------------------------------

def indexer_rows(rng, rows, width, rho, heads, dim):
    """Rows of indexer-like logits over one shared key matrix (one sequence, several
    queries), because a fresh [width, D] key matrix a row would dominate the generation
    time; every logit is valid data (no garbage)."""
    keys = indexer_keys(rng, width, rho, dim)
    return np.stack([indexer_logits(rng, keys, heads) for _ in range(rows)])


def make_indexer(rng, rows, width, rho, heads, dim):
    """indexer_rows at mixed lengths, garbage and NaN past each length."""
    logits = indexer_rows(rng, rows, width, rho, heads, dim)
    lengths = mixed_lengths(rng, rows, width)
    return fill_past_lengths(rng, logits, lengths), lengths


def make_one_value(rng, width):
    """Each row a single value, so K is that value and every choice is a tie."""
    values = np.array([0x3F80, 0x0000, 0x8000, POS_INF_BITS, NEG_INF_BITS, 0x7FC0, 0xFFC0, 0x0001], np.uint16)
    logits = np.repeat(values[:, None], width, axis=1)
    lengths = rng.integers(width // 2, width + 1, size=values.size)
    return fill_past_lengths(rng, logits, lengths), lengths


def make_four_values(rng, rows, width):
    """Values drawn from four, in proportions that put K in each of them across rows."""
    values = bf16_bits_from_float32(np.array([-1.0, 0.0, 0.5, 2.0], np.float32))
    logits = np.empty((rows, width), np.uint16)
    for r in range(rows):
        p = rng.dirichlet(np.full(4, 0.3 + r))
        logits[r] = rng.choice(values, size=width, p=p)
    lengths = mixed_lengths(rng, rows, width)
    return fill_past_lengths(rng, logits, lengths), lengths


def make_specials(rng, rows, width, rate=0.02):
    """Normal logits with NaNs of both signs, +-0 and +-inf sprinkled in at `rate`."""
    logits = normal_bits(rng, (rows, width))
    hit = rng.random((rows, width)) < rate
    logits[hit] = rng.choice(SPECIAL_PATTERNS, size=int(hit.sum()))
    lengths = mixed_lengths(rng, rows, width)
    return fill_past_lengths(rng, logits, lengths), lengths


def make_mostly_neg_inf(rng, width, finite_blocks):
    """Rows of -inf with `finite_blocks[r]` blocks holding one finite logit (fewer than k
    for most), so in block mode K is -inf and the -1 rule decides the output."""
    rows = len(finite_blocks)
    logits = np.full((rows, width), NEG_INF_BITS, np.uint16)
    lengths = mixed_lengths(rng, rows, width)
    for r, count in enumerate(finite_blocks):
        blocks = (int(lengths[r]) + 7) // 8
        chosen = rng.choice(blocks, size=min(count, blocks), replace=False)
        logits[r, 8 * chosen + rng.integers(0, 8, size=chosen.size)] = normal_bits(rng, chosen.size)
    return fill_past_lengths(rng, logits, lengths), lengths


def make_key_stage(rng, width):
    """Block rows as wide as a build's stage of keys (SPEC.md 2.2: KEY_BLOCKS keys a
    vector): at the width (every CTA of a build of that capacity fills its top slot) and
    one logit short (the pinned newest block partial), specials sprinkled in; every block
    one value (K tied at every block, taken by lowest index across key vectors and CTAs),
    the chunks uneven; -inf with 1,000 finite blocks (k = 2048: K = -inf, -1 for the
    chosen -inf blocks in every lane of a key vector); Gaussian at half the width and a key
    vector's worth of blocks past it."""
    logits = normal_bits(rng, (5, width))
    lengths = np.array([width, width - 1, width - 8 * 13 - 5, width - 8 * 5 - 2, width // 2 + 8 * 3 + 1])
    hit = rng.random((2, width)) < 0.02
    logits[:2][hit] = rng.choice(SPECIAL_PATTERNS, size=int(hit.sum()))
    logits[2] = bf16_bits_from_float32(np.float32(1.0))
    logits[3] = NEG_INF_BITS
    chosen = rng.choice(int(lengths[3]) // 8, size=1000, replace=False)
    logits[3, 8 * chosen + rng.integers(0, 8, size=chosen.size)] = normal_bits(rng, chosen.size)
    return fill_past_lengths(rng, logits, lengths), lengths


def make_monotone(rng, width):
    """Ascending and descending rows: over evenly spread keys (distinct up to 65,279
    elements) and over a smooth ramp (BF16 rounding gives runs of equal values)."""
    # Keys spread evenly over -max finite .. +max finite (0x0080 .. 0xFF7F): distinct while
    # the width allows, else runs.
    strict = bits_from_key(0x0080 + (np.arange(width, dtype=np.int64) * 0xFEFF) // width)
    ramp = bf16_bits_from_float32(np.linspace(-4.0, 4.0, width, dtype=np.float32))
    logits = np.stack([strict, strict[::-1], ramp, ramp[::-1]]).astype(np.uint16)
    lengths = mixed_lengths(rng, 4, width, full_rows=2)
    return fill_past_lengths(rng, logits, lengths), lengths


def make_plateau(rng, width, plateau, above_counts):
    """Rows with `above_counts[r]` distinct values above a plateau of `plateau` equal
    values, the rest one BF16 step below the plateau and lower: K is the plateau value
    for every k > above, and the ties must be taken from tens of thousands."""
    value = 0x3F80  # 1.0; 0x3F7F is the next value below
    rows = len(above_counts)
    logits = np.empty((rows, width), np.uint16)
    for r, above in enumerate(above_counts):
        row = np.where(rng.random(width) < 0.5, np.uint16(value - 1), normal_bits(rng, width, 0.1))
        row[:above] = 0x4000 + rng.permutation(0x0F00)[:above]  # distinct values in [2, 2^31)
        row[above:above + plateau] = value
        logits[r] = rng.permutation(row)
    lengths = np.full(rows, width)
    lengths[rows // 2:] = rng.integers(above_counts[-1] + plateau, width + 1, size=rows - rows // 2)
    return fill_past_lengths(rng, logits, lengths), lengths


def make_needles(rng, width, needle_counts):
    """A flat row with `needle_counts[r]` larger needles: with exactly k needles the
    answer is exactly the needles; one fewer or more shifts K onto or off the flat value."""
    rows = len(needle_counts)
    logits = np.full((rows, width), 0x3F00, np.uint16)  # 0.5
    lengths = np.full(rows, width)
    lengths[1::2] = width - 8 * rng.integers(1, 64, size=lengths[1::2].size) - 3
    for r, count in enumerate(needle_counts):
        where = rng.choice(int(lengths[r]), size=count, replace=False)
        logits[r, where] = bf16_bits_from_float32(1.0 + rng.random(count, dtype=np.float32) * 100)
    return fill_past_lengths(rng, logits, lengths), lengths


def boundary_lengths():
    """Small lengths and those around k (tokens) and 8k (blocks) for every k, and around
    each build's first row whose direct write runs over a queue (SPEC.md 2.7: a chunk of
    more than WRITE_QUEUE_VECTORS vectors a thread) up to 16,384 logits (the longer ones
    are KERNEL_BOUNDARY_LENGTHS)."""
    lengths = {0, 1, 7, 8, 9}
    for k in KS:
        lengths |= {k - 1, k, k + 1, 8 * k - 1, 8 * k, 8 * k + 1, 8 * k + 7, 8 * k + 8, 8 * k + 9}
    for build in BUILDS:
        first = LOGITS_PER_VECTOR * WRITE_QUEUE_VECTORS * build.threads * build.cluster
        if first <= 16384:
            lengths |= {first, first + 1, first + 8, first + 9}
    return sorted(lengths)


def register_lengths():
    """The register build's rows (SPEC.md 2.13: at most 8,192 logits, thread t holding
    vectors Vt .. Vt + V - 1): 0, the short and first long lengths around each k, each
    vector of the first thread partial, whole and one lane past, the first 1, 32 (a warp)
    and 33 threads' logits, half the CTA, and its last thread's first and second vector
    partial, whole and one lane short."""
    cap = REGISTER.stage
    per = REGISTER.vectors * LOGITS_PER_VECTOR  # a thread's logits
    lengths = {0, 1, cap // 2, cap // 2 + 1, cap - per - 1, cap - per + 1}
    for first in (8, per, 32 * per, 33 * per, cap - per + 8, cap):  # vector, thread, warp ends
        lengths |= {first - 1, first, first + 1}
    lengths.discard(cap + 1)  # (past the width)
    for k in KS:
        lengths |= {k - 1, k, k + 1, k + 7, k + 8, k + 9}
    return sorted(lengths)


def make_fine_bins(rng, rows, width):
    """Keys drawn from a few adjacent bins of the register build's first pass (key >>
    REG_FINE_SHIFT, SPEC.md 2.13), every low value of each, so K's bin, the bins beside it
    and the low bits of K all hold hundreds of keys: a second pass over the wrong keys, or
    the wrong rank in it, moves K."""
    logits = np.empty((rows, width), np.uint16)
    for r in range(rows):
        first = (0x3F80 >> REG_FINE_SHIFT) - 2 + r  # around 1.0 (key 0xBF80), a bin further a row
        keys = (first << REG_FINE_SHIFT) + rng.integers(0, (3 + r) << REG_FINE_SHIFT, size=width)
        logits[r] = bits_from_key(keys | 0x8000)
    lengths = mixed_lengths(rng, rows, width)
    return fill_past_lengths(rng, logits, lengths), lengths


def make_lengths(rng, lengths, width):
    """One row per given length, each row wider than its length (garbage past it)."""
    logits = normal_bits(rng, (len(lengths), width))
    return fill_past_lengths(rng, logits, np.array(lengths)), np.array(lengths)


def make_random_bits(rng, rows, width):
    """Uniformly random bit patterns: every value class, NaNs about 0.4% of them."""
    logits = rng.integers(0, 1 << 16, size=(rows, width), dtype=np.uint16)
    lengths = rng.integers(0, width + 1, size=rows)
    lengths[0] = width
    return fill_past_lengths(rng, logits, lengths), lengths


# ----------------------------------------------------------------------------------------
# The table
# ----------------------------------------------------------------------------------------

def _top_slot_case(name, seed, builds):
    """A ci case of algorithm_cases.make_top_slot_rows on `builds` (names): rows of the
    shortest length at which every CTA of those builds stages its top slot, 7 logits of
    garbage past it (so the last vector is masked), each fallback and the sampled path."""
    specs = algo.top_slot_specs(builds)
    return Case(name, "ci", seed,
                partial(algo.make_top_slot_rows, width=specs[0][0] + 7, specs=specs, builds=builds),
                f"length {specs[0][0]}: every CTA of {', '.join(builds)} stages a vector in its top slot, "
                "the row's largest values there; crowded survivors, underflow, sampled",
                intent=algo.controlled_intent(specs))


def _vector_case(name, level, seed, width, specs, description, clusters=algo.STREAM_CLUSTERS):
    """A token-mode case of algorithm_cases.make_vector_controlled rows (`specs`, the cutoff
    steered at each cluster size of `clusters`), its intent from the same specs and
    clusters (vector_intent), so that the two cannot drift apart."""
    return Case(name, level, seed, partial(algo.make_vector_controlled, width=width, specs=specs, clusters=clusters),
                description, modes=(False,), intent=algo.vector_intent(specs, clusters))


_KS_BOUNDARY_PLATEAU = (0, 300, 511, 1023, 2047, 2048)
_KS_NEEDLES = (511, 512, 513, 1023, 1024, 1025, 2047, 2048, 2049)
_FEW_FINITE = (0, 1, 100, 511, 1023, 2047, 3000)

CASES = (
    # --- ci: small and fast --------------------------------------------------------------
    Case("indexer-rho0", "ci", 101, partial(make_indexer, rows=4, width=16384, rho=0.0, heads=32, dim=64),
         "indexer-like logits, independent keys: several hundred distinct values"),
    Case("indexer-rho0.9", "ci", 102, partial(make_indexer, rows=4, width=32768, rho=0.9, heads=64, dim=128),
         "indexer-like logits, correlated keys: ~150 distinct values, heavy ties"),
    Case("indexer-rho0.999", "ci", 103, partial(make_indexer, rows=4, width=16384, rho=0.999, heads=32, dim=128),
         "indexer-like logits, nearly equal keys: ~15 distinct values"),
    Case("one-value", "ci", 104, partial(make_one_value, width=20480),
         "each row one value (1.0, +0, -0, +-inf, +-NaN, smallest subnormal)"),
    Case("four-values", "ci", 105, partial(make_four_values, rows=6, width=24576),
         "values from four, K falls on each"),
    Case("specials", "ci", 106, partial(make_specials, rows=4, width=24576),
         "NaN of both signs, +-0, +-inf sprinkled into normal logits"),
    Case("mostly-neg-inf", "ci", 107, partial(make_mostly_neg_inf, width=32768, finite_blocks=_FEW_FINITE),
         "-inf rows with few finite blocks: block mode writes -1 for the -inf ties"),
    Case("monotone", "ci", 108, partial(make_monotone, width=20480),
         "ascending and descending rows, strict and in runs"),
    Case("plateau", "ci", 109, partial(make_plateau, width=65536, plateau=30000, above_counts=_KS_BOUNDARY_PLATEAU),
         "30,000 equal values holding K, a step above the bulk"),
    Case("needles", "ci", 110, partial(make_needles, width=32768, needle_counts=_KS_NEEDLES),
         "k needles (and k +- 1) in a flat row"),
    Case("lengths", "ci", 111, partial(make_lengths, lengths=boundary_lengths(), width=16448),
         "lengths 0, 1, 7, 8, 9, k-1, k, k+1, 8k-1, 8k, 8k+1, ... under a wider row"),
    Case("random-bits", "ci", 112, partial(make_random_bits, rows=8, width=8192),
         "uniformly random bit patterns, random lengths"),
    # --- ci: the register build's rows (SPEC.md 2.13: at most 8,192 logits) ---------------------
    Case("register-boundaries", "ci", 113, partial(make_lengths, lengths=register_lengths(), width=REGISTER.stage),
         "lengths 0, 1, 7-9, k-1 .. k+9, 255-264, 4096, 4097, 8183-8185, 8191, 8192 under 8,192 logits"),
    Case("register-four", "ci", 114, partial(make_four_values, rows=6, width=REGISTER.stage),
         "8,192 logits from four values, K falls on each"),
    Case("register-uniform", "ci", 115, partial(make_one_value, width=REGISTER.stage),
         "each row of 8,192 logits one value (1.0, +0, -0, +-inf, +-NaN, smallest subnormal)"),
    Case("register-nan-inf", "ci", 116, partial(make_specials, rows=4, width=REGISTER.stage),
         "NaN of both signs, +-0, +-inf in rows of 8,192 logits"),
    Case("register-tied-k", "ci", 117, partial(make_plateau, width=REGISTER.stage, plateau=3000,
                                                 above_counts=_KS_BOUNDARY_PLATEAU),
         "3,000 equal values holding K in rows of 8,192 logits"),
    Case("register-spikes", "ci", 118, partial(make_needles, width=REGISTER.stage, needle_counts=_KS_NEEDLES),
         "k needles (and k +- 1) in a flat row of 8,192 logits"),
    Case("register-fine-bins", "ci", 119, partial(make_fine_bins, rows=4, width=REGISTER.stage),
         "keys from 3-6 adjacent bins of the register build's first pass, every low value of each"),
    Case("register-indexer", "ci", 120, partial(make_indexer, rows=4, width=REGISTER.stage, rho=0.999, heads=32,
                                                 dim=128),
         "indexer-like rows of 8,192 logits at rho 0.999: ~15 distinct values"),
    Case("register-top-span", "ci", 121, partial(algo.make_top_span, width=REGISTER.stage,
                                                  lengths=algo.REGISTER_TOP_SPAN_LENGTHS),
         "the register build's window from the top: K 255, 256, 510 and 511 steps below the row's largest key, "
         "100 steps below it at k = 512 only, and the three largest keys in the row's last vector (the last warp's)",
         modes=(False,)),
    # --- ci: the model's algorithm (SPEC.md part 2): each path and fallback in every build,
    # verified by the trace (each case's intent) ------------------------------------------------
    Case("sampled-crowded", "ci", 301, partial(algo.make_controlled, width=algo.W_SAMPLED, specs=algo.CROWDED_SPECS),
         "sampled rows with G + E = 8192, 8193 and more survivors: large values hidden between the samples",
         modes=(False,), intent=algo.controlled_intent(algo.CROWDED_SPECS)),
    Case("sampled-underflow", "ci", 302,
         partial(algo.make_controlled, width=algo.W_SAMPLED, specs=algo.UNDERFLOW_SPECS),
         "sampled rows with G + E = k - 1 and k for every k: underflow and its boundary", modes=(False,),
         intent=algo.controlled_intent(algo.UNDERFLOW_SPECS)),
    Case("sampled-narrow-overflow", "ci", 325,
         partial(algo.make_narrow_overflow, width=algo.W_SAMPLED, specs=algo.NARROW_SPECS),
         "K 254 and 255 key steps above the cutoff at each k, and far above it: the staged attempt's one pass "
         "places it, or the row takes the direct path", modes=(False,), intent=algo.narrow_intent(algo.NARROW_SPECS)),
    Case("sampled-narrow-overflow-65536", "ci", 326,
         partial(algo.make_narrow_overflow, width=65536, specs=algo.NARROW_SPECS_65536),
         "the same at 65,536 logits: the top slots of 1x512x16 and 2x512x8", modes=(False,),
         intent=algo.narrow_intent(algo.NARROW_SPECS_65536)),
    Case("direct-top-span", "ci", 327, partial(algo.make_top_span, width=16384, lengths=algo.TOP_SPAN_LENGTHS),
         "the direct path's window from the top: K 255, 256, 510 and 511 steps below the row's largest key, 100 "
         "steps below it at k = 512 only, and the three largest keys in the row's last vector (the last CTA's "
         "chunk)",
         modes=(False,)),
    Case("sampled-hits-top", "ci", 303,
         partial(algo.make_samples_hit_top, width=algo.W_SAMPLED, lengths=algo.SAMPLE_HIT_LENGTHS),
         "the row's largest values sit at the sample positions: underflow", modes=(False,),
         intent=algo.hit_intent(algo.SAMPLE_HIT_LENGTHS)),
    Case("sampled-eq-capped", "ci", 304, partial(algo.make_cta_plateau, width=algo.W_SAMPLED, specs=algo.CAPPED_SPECS),
         "plateaus of more than k keys equal to the cutoff a CTA: ties taken by lowest index", modes=(False,)),
    Case("ties-across-ctas", "ci", 313, partial(algo.make_tie_spread, width=algo.W_SAMPLED, specs=algo.TIE_SPREAD_SPECS),
         "K tied at almost every index: the lowest-index ties end in CTA 0, mid-row, in the last CTA"),
    Case("sampled-threshold", "ci", 305, partial(algo.make_normal_rows, width=65536, lengths=algo.BOUNDARY_LENGTHS),
         "lengths D and D + 1 at D = 32,768 (the direct path's last length at 1 and 2 CTAs), and 65,536",
         intent=algo.threshold_intent(algo.BOUNDARY_LENGTHS)),
    Case("sampled-threshold-wide", "ci", 318,
         partial(algo.make_normal_rows, width=131080, lengths=algo.BOUNDARY_LENGTHS_WIDE),
         "lengths D and D + 1 at D = 65,536 (4 and 8 CTAs) and 131,072 (16 CTAs)",
         intent=algo.threshold_intent(algo.BOUNDARY_LENGTHS_WIDE)),
    Case("sampled-lengths", "ci", 306,
         partial(algo.make_normal_rows, width=algo.W_SAMPLED, lengths=algo.SAMPLED_LENGTHS),
         "sampled rows of distinct values, chunks split unevenly"),
    Case("vector-edges", "ci", 307,
         partial(algo.make_vector_edges, width=algo.W_SAMPLED, lengths=algo.VECTOR_EDGE_LENGTHS),
         "masked last vectors: the largest logit last, NaN past it; -inf before the pinned block"),
    Case("signed-zeros", "ci", 308,
         partial(algo.make_signed_zeros, width=algo.W_SAMPLED, lengths=algo.SIGNED_ZERO_LENGTHS),
         "-0 rows with 300 +0 near the end: K = -0, so -0 < +0 decides"),
    Case("short-neg-inf", "ci", 309, partial(algo.make_short_neg_inf, width=16384, lengths=algo.SHORT_NEG_INF_LENGTHS),
         "short rows with -inf blocks"),
    # --- ci: every staged-vector slot of every build (conformance/coverage.py): the shortest
    # rows whose every CTA stages a vector in a build's top slot, crowded, underflow and the
    # sampled path steered, the row's largest values in those vectors -------------------------
    _top_slot_case("top-slot-8-vectors", 310, ("8x512x8", "4x1024x8")),  # C T = 4096: one row for both
    _top_slot_case("top-slot-8x512x16", 311, ("8x512x16",)),
    _top_slot_case("top-slot-16x512x16", 312, ("16x512x16",)),
    # (2x512x16's top slot, 122,881 logits and up, is reached by the ci cases of 131,072
    # logits, e.g. sampled-lengths and sampled-underflow, so it needs no top-slot case; nor
    # does 4x512x4's, 49,177 logits and up, whose staged rows are direct only (SPEC.md 2.12)
    # and which the ci rows of 65,536 logits reach in both modes.)
    # (The 1-CTA builds' top slots are reached by the cases below and by the ci cases up to
    # 65,536 logits wide, so they need no top-slot case of their own.)
    Case("one-cta-direct", "ci", 316,
         partial(algo.make_one_cta_hits, width=32768, lengths=algo.ONE_CTA_LENGTHS_8),
         "1x512x8's direct rows at slots 1-7, the 2048 largest values at the 1-CTA sample positions "
         "(a sampled attempt, which SPEC 2.3 rules out there, would underflow)",
         modes=(False,), intent=algo.one_cta_intent(algo.ONE_CTA_LENGTHS_8)),
    Case("one-cta-underflow-wide", "ci", 317,
         partial(algo.make_one_cta_hits, width=65536, lengths=algo.ONE_CTA_LENGTHS_16),
         "the 2048 largest values at the 1-CTA sample positions: 1x512x16's sampled rows underflow (q < k), "
         "slots 8-15", modes=(False,), intent=algo.one_cta_intent(algo.ONE_CTA_LENGTHS_16)),
    # --- ci: the streamed builds 1x512x4 to 8x512x4 (SPEC.md 2.12): their stages' boundaries,
    # each CTA's queue at its capacity and one past it, overflow (in one CTA, in every CTA,
    # over the row but in none), the vectors of top == cutoff a queue truncates at k, underflow,
    # each fallback to the direct path from global memory (the ci cases of more than 16,384
    # and 32,768 logits stream there too) ------------------------------------------------------
    Case("stream-threshold", "ci", 319,
         partial(algo.make_normal_rows, width=65552, lengths=algo.STREAM_BOUNDARY_LENGTHS),
         "lengths D - 1, D, D + 1, D + 3, D + 8, D + 9 at D = 16,384, 32,768, 49,152 and 65,536 (the stages of "
         "1x512x4, 2x512x4, 3x512x4 and 4x512x4, past which their rows stream): masked last vectors either side",
         intent=algo.threshold_intent(algo.STREAM_BOUNDARY_LENGTHS)),
    Case("stream-threshold-8", "ci", 224,
         partial(algo.make_normal_rows, width=131088, lengths=algo.STREAM_BOUNDARY_LENGTHS_8),
         "lengths D - 1, D, D + 1, D + 3, D + 8, D + 9 at D = 131,072 (8x512x4's stage, past which its rows "
         "stream): masked last vectors either side",
         intent=algo.threshold_intent(algo.STREAM_BOUNDARY_LENGTHS_8)),
    Case("stage-16384", "ci", 320, partial(algo.make_normal_rows, width=16384, lengths=algo.STAGE_LENGTHS),
         "1x512x4's own rows of at most 16,384 logits, both modes: its four staged slots, short and direct"),
    Case("mostly-neg-inf-16384", "ci", 321, partial(make_mostly_neg_inf, width=16384, finite_blocks=_FEW_FINITE),
         "-inf rows with few finite blocks as wide as 1x512x4's block rows: its direct path writes -1 for the "
         "-inf ties"),
    Case("streamed-single-value", "ci", 322,
         partial(algo.make_one_value_rows, width=algo.W_STREAM, lengths=algo.ONE_VALUE_LENGTHS),
         "each row one value (1.0, +-0, +-inf, +-NaN, a subnormal) at 33,000-139,264 logits: streamed, each "
         "queue truncated at k vectors of top == cutoff out of thousands (EV_c > STREAM_QUEUE), K the cutoff",
         modes=(False,)),
    _vector_case("streamed-queue", "ci", 323, algo.W_STREAM, algo.STREAM_SPECS,
                 "streamed rows whose vectors of top above / equal to the cutoff are placed half by half: a queue "
                 "at STREAM_QUEUE and one past it, overflow in one CTA, in every CTA and over the row only, K = "
                 "cutoff with the queue truncated at k, ties in both chunks, underflow and its boundary"),
    _vector_case("streamed-queue-3", "ci", 233, algo.W_STREAM_3, algo.STREAM_3_SPECS,
                 "3x512x4's streamed rows (its chunks past STREAM_QUEUE vectors), the cutoff steered at 1, 2 and 3 "
                 "CTAs: CTA 0's queue at STREAM_QUEUE and one past it, the last CTA's alone overflowing, every "
                 "queue of 3 fitting where 1 overflows, K = cutoff, underflow",
                 clusters=algo.STREAM_CLUSTERS_3),
    _vector_case("streamed-queue-4", "ci", 337, algo.W_STREAM_4, algo.STREAM_4_SPECS,
                 "4x512x4's streamed rows (its chunks past STREAM_QUEUE vectors), the cutoff steered at 1, 2 and 4 "
                 "CTAs: CTA 0's queue at STREAM_QUEUE and one past it, the last CTA's alone overflowing, every "
                 "queue of 4 fitting where 2 and 1 overflow, K = cutoff, underflow",
                 clusters=algo.STREAM_CLUSTERS_4),
    _vector_case("streamed-queue-8", "ci", 225, algo.W_STREAM_8, algo.STREAM_8_SPECS,
                 "8x512x4's streamed rows (its chunks past STREAM_QUEUE vectors), the cutoff steered at 1, 2, 4 "
                 "and 8 CTAs: CTA 0's queue at STREAM_QUEUE and one past it, the last CTA's alone overflowing, "
                 "every queue of 8 fitting where 4, 2 and 1 overflow, K = cutoff, underflow",
                 clusters=algo.STREAM_CLUSTERS_8),
    Case("specials-65536", "ci", 324, partial(make_specials, rows=3, width=65536),
         "NaN of both signs, +-0, +-inf sprinkled into rows that stream on 1x512x4 and 2x512x4"),
    # --- ci: block rows at each capacity of the stage of keys (SPEC.md 2.2: KEY_BLOCKS keys a
    # vector), so every build's every key slot, 0 .. KEY_BLOCKS V - 1 (conformance/coverage.py)
    Case("key-stage-131072", "ci", 227, partial(make_key_stage, width=131072),
         "block rows at 1x512x4's capacity of keys (16,384 blocks): its top key slot, specials, one value, "
         "-inf with 1,000 finite blocks", modes=(True,)),
    Case("key-stage-262144", "ci", 228, partial(make_key_stage, width=262144),
         "block rows at the capacity of keys of 1x512x8 and 2x512x4: their top key slots", modes=(True,)),
    Case("key-stage-524288", "ci", 229, partial(make_key_stage, width=524288),
         "block rows at the capacity of keys of 1x512x16, 2x512x8 and 4x512x4: their top key slots",
         modes=(True,)),
    Case("key-stage-1048576", "ci", 230, partial(make_key_stage, width=1048576),
         "block rows at the capacity of keys of 2x512x16, 4x1024x8, 8x512x4 and 8x512x8 (1,048,576 logits; "
         "8x512x8 holds twice that): their top key slots", modes=(True,)),
    # --- full: ci plus the big ones ---------------------------------------------------------
    Case("indexer-64x131072", "full", 201, partial(make_indexer, rows=64, width=131072, rho=0.9, heads=32, dim=64),
         "a decode batch of indexer-like rows at rho 0.9"),
    Case("indexer-rho0.9-262144", "full", 202,
         partial(make_indexer, rows=8, width=262144, rho=0.9, heads=64, dim=128),
         "indexer-like rows at a cluster's capacity"),
    Case("indexer-rho0-262144", "full", 203, partial(make_indexer, rows=8, width=262144, rho=0.0, heads=32, dim=64),
         "indexer-like rows, independent keys, full width"),
    Case("indexer-rho0.999-262144", "full", 204,
         partial(make_indexer, rows=8, width=262144, rho=0.999, heads=32, dim=64),
         "indexer-like rows, nearly equal keys, full width"),
    Case("kernel-boundaries", "full", 205, partial(make_lengths, lengths=KERNEL_BOUNDARY_LENGTHS, width=262144),
         "lengths D, D + 1 at each sampled-path threshold D, and 262143/262144 (capacity)"),
    Case("plateau-262144", "full", 206,
         partial(make_plateau, width=262144, plateau=60000, above_counts=_KS_BOUNDARY_PLATEAU),
         "60,000 equal values holding K in full-width rows"),
    Case("specials-262144", "full", 207, partial(make_specials, rows=8, width=262144),
         "specials sprinkled into full-width rows"),
    Case("mostly-neg-inf-262144", "full", 208,
         partial(make_mostly_neg_inf, width=262144, finite_blocks=_FEW_FINITE),
         "-inf full-width rows with few finite blocks"),
    Case("monotone-262144", "full", 209, partial(make_monotone, width=262144),
         "ascending and descending full-width rows"),
    Case("random-bits-262144", "full", 210, partial(make_random_bits, rows=8, width=262144),
         "random bits, full width"),
    Case("needles-262144", "full", 211, partial(make_needles, width=262144, needle_counts=_KS_NEEDLES),
         "k needles (and k +- 1) in flat full-width rows"),
    Case("wide-1048576", "full", 212,
         partial(make_lengths, lengths=(524287, 524288, 524289, 1048575, 1048576), width=1048576),
         "the widest rows, around the 8x512x16 capacity and at the maximum width"),
    Case("sampled-fallbacks-524288", "full", 213,
         partial(algo.make_controlled, width=524288, specs=algo.WIDE_SPECS),
         "crowded survivors, underflow and its boundary in rows 524,288 wide (8x512x16, 16x512x16)", modes=(False,),
         intent=algo.controlled_intent(algo.WIDE_SPECS)),
    Case("waves-524288", "full", 214, partial(make_indexer, rows=16, width=524288, rho=0.9, heads=32, dim=64),
         "more rows than resident clusters (H200: 15 of 8x512x16, 7 of 16x512x16): later waves"),
    Case("waves-1048576", "full", 215, partial(make_indexer, rows=10, width=1048576, rho=0.9, heads=32, dim=64),
         "more rows of the widest width than resident 16x512x16 clusters (H100 and H200: 7): two waves of it "
         "where it is forced; the policy streams the token rows on 8x512x4 and stages the block rows' keys on "
         "8x512x8 (SPEC.md 2.1)"),
    Case("stream4-600000", "full", 220, partial(make_indexer, rows=16, width=600000, rho=0.9, heads=32, dim=64),
         "16 rows past 8x512x16's width and the 16-CTA build's two waves (H100 and H200: 7 resident), within "
         "the resident 4x512x4 clusters (30): the policy streams them on 4x512x4 (SPEC.md 2.1); their block "
         "rows stage keys on 8x512x8 (30 resident)"),
    Case("block-two16-1048576", "full", 231,
         partial(make_indexer, rows=64, width=1048576, rho=0.9, heads=8, dim=32),
         "64 block rows of the widest width: past twice 8x512x8's resident clusters (30) within 2x512x16's "
         "(66), so the policy takes one wave of 2x512x16 (SPEC.md 2.1, session 46)", modes=(True,)),
    Case("block-waves-1048576", "full", 232,
         partial(make_indexer, rows=72, width=1048576, rho=0.9, heads=8, dim=32),
         "72 block rows of the widest width: past 2x512x16's resident clusters (66), so the policy takes "
         "8x512x8 in three waves (SPEC.md 2.1, session 46)", modes=(True,)),
    Case("stream3-393216", "full", 234, partial(make_indexer, rows=32, width=393216, rho=0.9, heads=32, dim=64),
         "32 rows past STREAM_WIDTH, past the resident 4x512x4 clusters (H100 and H200: 30), within the resident "
         "3x512x4 clusters: the policy streams them on 3x512x4 (SPEC.md 2.1); token mode only", modes=(False,)),
    Case("stream8-786432", "full", 226, partial(make_indexer, rows=12, width=786432, rho=0.9, heads=32, dim=64),
         "12 rows past 8x512x16's width and the 16-CTA build's one wave (H100 and H200: 7 resident), within the "
         "resident 8x512x4 clusters (15): the policy streams them on 8x512x4 (SPEC.md 2.1); token mode only",
         modes=(False,)),
    _vector_case("streamed-fallbacks-1048576", "full", 216, algo.W_STREAM_WIDE, algo.STREAM_WIDE_SPECS,
                 "a streamed queue at STREAM_QUEUE and one past it, overflow over the row only, ties at K = cutoff "
                 "in both chunks and underflow in rows 1,048,576 wide (1x512x4, 2x512x4, 16x512x16)"),
    # 16x512x16's sampled rows staged by copies (SPEC.md 2.2, Copies: rows of at least
    # SAMPLED_ASYNC_MIN_LENGTH logits in launches of at most SAMPLED_ASYNC_ROWS = 2 rows; the
    # wider cases above have more rows a launch, so they stage as every other build does).
    Case("copies-1048576", "full", 217,
         partial(make_lengths, lengths=(SAMPLED_ASYNC_MIN_LENGTH - 1, SAMPLED_ASYNC_MIN_LENGTH), width=1048576),
         "two rows either side of the least length that 16x512x16 stages by copies"),
    Case("copies-partial-1048576", "full", 218, partial(make_lengths, lengths=(1048575, 1048569), width=1048576),
         "two rows staged by copies whose last vector is partial (7 and 1 valid logits)"),
    Case("copies-fallbacks-1048576", "full", 219,
         partial(algo.make_controlled, width=1048576, specs=algo.COPIES_SPECS),
         "two rows staged by copies: crowded survivors, and underflow at every k (16x512x16)", modes=(False,),
         intent=algo.controlled_intent(algo.COPIES_SPECS)),
    Case("copies-ragged-1048576", "full", 336, partial(make_lengths, lengths=(1000001, 917511), width=1048576),
         "two rows staged by copies whose chunks end inside a slot: 1,000,001 logits (chunks of 7,812 and 7,813 "
         "vectors, so 132-133 of a CTA's 512 threads copy its slot 15) and 917,511 (the last chunk one vector "
         "longer than the rest, its last vector 7 logits)"),
)


def cases(level="ci"):
    """The cases of a level: `ci`, or `full` (= ci plus the big ones)."""
    if level not in LEVELS:
        raise ValueError(f"level = {level!r} is not one of {LEVELS}")
    return tuple(c for c in CASES if level == "full" or c.level == "ci")
