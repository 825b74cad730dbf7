"""Checks of the per-row trace of SPEC.md 2.11 (path, reason, q, cutoff, gt, eq, kth, above).

- `expected_trace(logits_bits, lengths, k, block_mode, build)`: the trace every correct
  implementation of SPEC.md part 2 must produce on that build, computed over whole rows
  with numpy (samples by position, q by formula, cutoff by sorting the samples, G and E
  by counting, K and A by sorting the row), independently of the cluster model.
- `trace_invariants(logits_bits, lengths, k, block_mode, trace, build=None)`: the problems
  of a trace: shape, -1 fields inconsistent with the path, q, G, kth and above against the
  row, the fallback reasons against gt and eq (underflow: gt + eq < k; an overflow needs a
  streamed queue's gt + min(eq, k) > STREAM_QUEUE, or a staged attempt's K >= cutoff +
  NARROW_SPAN with gt + eq >= k); with a build, also every field against
  `expected_trace` (which decides the overflow CTA by CTA from the vectors' tops).
- `compare_traces(expected, actual)`: field-by-field mismatches, naming row and field (a
  kernel's trace against the model's).
"""

import math

import numpy as np

from decode_topk.kernel import policy
# The element keys from the checker's own statement of the contract, not the reference's
# helpers, so a bug there cannot blind the reference and this oracle together.
from .contract import element_keys

FIELDS = tuple(policy.TRACE_FIELDS)
PATH, REASON, Q, CUTOFF, GT, EQ, KTH, ABOVE = range(8)
PATH_NAMES = {0: "short", 1: "sampled", 2: "direct"}
# overflow: a streamed queue's (SPEC.md 2.12), or a staged attempt's K NARROW_SPAN or more
# above its cutoff (SPEC.md 2.5)
REASON_NAMES = {0: "none", 1: "overflow", 2: "underflow"}
SAMPLES = policy.SAMPLES
STREAM_QUEUE = policy.STREAM_QUEUE  # vectors a streamed CTA's queue holds (SPEC.md 2.12)


def q_min(k):
    """SPEC.md 2.4's least sample rank, derived here from its rule rather than read from
    policy.Q_MIN: the least q with q - 2 sqrt(q) >= 2048 k / 1,048,576, (1 + sqrt(1 + k /
    512))^2 rounded up (5.83, 7.46 and 10.47 for the three k: no rounding is close)."""
    return int(np.ceil((1 + np.sqrt(1 + k / 512)) ** 2))


def q_for(length, k):
    """The sample rank of a sampled row (SPEC.md 2.4): the aim at k + 2560 keys, at most
    Q_DEVIATIONS deviations (sqrt m) above m = ceil(2048 k / length), at least q_min(k)."""
    aim = -(-SAMPLES * (k + policy.SURVIVOR_AIM) // length)
    m = -(-SAMPLES * k // length)
    bound = m + math.isqrt(policy.Q_DEVIATIONS ** 2 * m - 1) + 1  # m + ceil(sqrt(25 m)), m >= 1
    return min(SAMPLES, max(q_min(k), min(aim, bound)))


def kth_and_above(keys, k):
    """(K, A): the k-th largest key and the count of keys above it."""
    kth = int(np.partition(keys, keys.size - k)[keys.size - k])
    return kth, int(np.count_nonzero(keys > kth))


def chunks(nv, cluster):
    """(start, end) int64 [C] of the chunks of a row of nv vectors (nv may be an array,
    e.g. [rows, 1], for every row at once): CTA c owns the global vectors
    [c nv // C, (c + 1) nv // C) (SPEC.md 2.2)."""
    c = np.arange(cluster, dtype=np.int64)
    return (c * nv) // cluster, ((c + 1) * nv) // cluster


def _chunks(nv, cluster):
    """The (start, end) int pairs of chunks(nv, cluster), CTA by CTA."""
    return [(int(start), int(end)) for start, end in zip(*chunks(nv, cluster))]


def sample_positions(length, cluster):
    """The 2048 sampled logit positions of a token row on C CTAs, in sample-array order:
    2048 / C from each CTA's chunk, or where C does not divide 2048 (3x512x4) 2048 from one
    chunk, the row (SPEC.md 2.4)."""
    nv = -(-length // 8)
    chunks_ = cluster if SAMPLES % cluster == 0 else 1
    per = SAMPLES // chunks_
    j = np.arange(per, dtype=np.int64)
    pos = []
    for start, end in _chunks(nv, chunks_):
        m = min(8 * end, length) - 8 * start
        middle = ((2 * j + 1) * m) // (2 * per)
        pos.append(8 * start + np.maximum(middle - ((middle - 2 * j) & (policy.SAMPLE_BANK_LOGITS - 1)), 0))
    return np.concatenate(pos)


def sampled_cutoff(keys, positions, length, k):
    """(q, cutoff) of a sampled row (SPEC.md 2.4): the cutoff is the q-th largest key at
    the sampled positions (sample_positions, or another layout under study)."""
    q = q_for(length, k)
    return q, int(np.sort(keys[positions])[positions.size - q])


def queue_bound(gt, eq, k):
    """An upper bound on any CTA's queue Q_c = GV_c + min(EV_c, k) of a streamed row
    (SPEC.md 2.12) from the row's counts alone: a vector of top > cutoff holds a key above
    it (GV_c <= G) and one of top == cutoff a key equal to it (EV_c <= E). An overflow needs
    it above STREAM_QUEUE."""
    return gt + min(eq, k)


def vector_tops(keys, length):
    """int64 [nv]: each vector's top, the largest key of its valid lanes (SPEC.md 2.2), of
    a token row's element keys."""
    nv = -(-length // 8)
    padded = np.full(8 * nv, -1, np.int64)
    padded[:keys.size] = keys
    return padded.reshape(nv, 8).max(axis=1)


def queue_lengths(keys, length, k, cutoff, cluster):
    """int64 [C]: Q_c = GV_c + min(EV_c, k) of a streamed token row on C CTAs (SPEC.md
    2.12 step 3), GV_c / EV_c the vectors of CTA c's chunk whose top is above / equal to
    the cutoff."""
    tops = vector_tops(keys, length)
    starts, ends = chunks(tops.size, cluster)
    return np.array([np.count_nonzero(tops[s:e] > cutoff) + min(int(np.count_nonzero(tops[s:e] == cutoff)), k)
                     for s, e in zip(starts.tolist(), ends.tolist())], np.int64)


def expected_row_trace(keys, length, k, block_mode, build, kth_above=None):
    """The trace of one row (keys: its element keys, contract.element_keys; kth_above:
    their kth_and_above, if known)."""
    build = policy.Build.parse(build)
    n = keys.size
    tr = [0, 0, -1, -1, -1, -1, -1, -1]
    if n <= k:
        return tr
    kth, above = kth_above or kth_and_above(keys, k)
    tr[PATH] = 2
    tr[KTH], tr[ABOVE] = kth, above
    if block_mode or length <= policy.direct_max_length(build.cluster, build.vectors):
        return tr
    q, cutoff = sampled_cutoff(keys, sample_positions(length, build.cluster), length, k)
    gt = int(np.count_nonzero(keys > cutoff))
    eq = int(np.count_nonzero(keys == cutoff))
    tr[Q], tr[CUTOFF], tr[GT], tr[EQ] = q, cutoff, gt, eq
    if build.streams and queue_lengths(keys, length, k, cutoff, build.cluster).max() > STREAM_QUEUE:
        tr[REASON] = 1  # some CTA's queue overflowed (SPEC.md 2.12 step 3: tested first)
    elif gt + eq < k:
        tr[REASON] = 2
    elif not build.streams and kth >= cutoff + policy.NARROW_SPAN:
        tr[REASON] = 1  # the staged attempt's one pass cannot place K (SPEC.md 2.5)
    else:
        tr[PATH] = 1
    return tr


def expected_trace(logits_bits, lengths, k, block_mode, build):
    """int32 [rows, 8]: the trace SPEC.md part 2 prescribes on build (cluster, threads,
    vectors)."""
    rows = logits_bits.shape[0]
    out = np.empty((rows, len(FIELDS)), dtype=np.int32)
    for r in range(rows):
        length = int(lengths[r])
        keys = element_keys(logits_bits[r], length, block_mode).astype(np.int64)
        out[r] = expected_row_trace(keys, length, int(k), bool(block_mode), build)
    return out


def trace_mismatches(expected, actual):
    """(row, message) of each field of actual that differs from expected; row -1 for a
    shape mismatch."""
    expected = np.asarray(expected)
    actual = np.asarray(actual)
    if actual.shape != expected.shape:
        return [(-1, f"trace shape {actual.shape}, expected {expected.shape}")]
    return [(int(r), f"field {FIELDS[f]}: expected {int(expected[r, f])}, got {int(actual[r, f])}")
            for r, f in zip(*np.nonzero(expected != actual))]


def compare_traces(expected, actual):
    """Field-by-field mismatches of actual against expected, as messages naming row and
    field."""
    return [m if r < 0 else f"row {r} {m}" for r, m in trace_mismatches(expected, actual)]


def _row_problems(keys, length, k, block_mode, tr, kth_above=None):
    """Build-independent checks of one row's trace (kth_above: the keys' kth_and_above,
    if known); a list of messages (no row prefix)."""
    p = []
    n = keys.size
    path, reason, q, cutoff, gt, eq, kth, above = (int(v) for v in tr)
    if n <= k:
        if list(tr) != [0, 0, -1, -1, -1, -1, -1, -1]:
            p.append(f"short row (n={n} <= k) has trace {list(map(int, tr))}, expected [0, 0, -1, ...]")
        return p
    if path not in (1, 2):
        p.append(f"path {path} for a row of n={n} > k (expected sampled 1 or direct 2)")
    K, A = kth_above or kth_and_above(keys, k)
    if kth != K:
        p.append(f"kth {kth}, the row's k-th largest key is {K}")
    if above != A:
        p.append(f"above {above}, the row has {A} keys above its k-th largest")
    attempted = path == 1 or reason in (1, 2)
    if reason not in REASON_NAMES:
        p.append(f"reason {reason} is not one of {sorted(REASON_NAMES)}")
    elif reason and path != 2:
        p.append(f"fallback reason {reason} on path {path} (a fallback takes the direct path 2)")
    if block_mode and attempted:
        p.append("block row with a sampled attempt")
    if not attempted:
        if (q, cutoff, gt, eq) != (-1, -1, -1, -1):
            p.append(f"direct row without a sampled attempt has q/cutoff/gt/eq {(q, cutoff, gt, eq)}, expected -1")
        return p
    if q != q_for(int(length), k):
        p.append(f"q {q}, expected {q_for(int(length), k)} for length {length}")
    if not 0 <= cutoff <= 0xFFFF:
        p.append(f"cutoff {cutoff} is not a 16-bit key")
        return p
    G = int(np.count_nonzero(keys > cutoff))
    if gt != G:
        p.append(f"gt {gt}, the row has {G} keys above the cutoff {cutoff}")
    E = int(np.count_nonzero(keys == cutoff))
    if eq != E:
        p.append(f"eq {eq}, the row has {E} keys equal to the cutoff {cutoff}")
    if reason == 2 and not gt + eq < k:
        p.append(f"underflow with gt + eq = {gt + eq} >= k")
    if reason == 1 and not queue_bound(gt, eq, k) > STREAM_QUEUE and not (
            K >= cutoff + policy.NARROW_SPAN and k <= gt + eq):
        p.append(f"overflow with gt + min(eq, k) = {queue_bound(gt, eq, k)} <= {STREAM_QUEUE} (no CTA's queue "
                 f"can hold more) and K {K} below cutoff + {policy.NARROW_SPAN} or gt + eq < k (a staged "
                 f"attempt's one pass places it)")
    if reason == 0 and path == 1:
        if not k <= gt + eq:
            p.append(f"sampled row with gt + eq = {gt + eq} < k")
        if K < cutoff:
            p.append(f"sampled row with K {K} below the cutoff {cutoff}")
    return p


def trace_problems(logits_bits, lengths, k, block_mode, trace, build=None):
    """(row, message) of each problem `trace_invariants` reports; row -1 for the whole
    trace (shape, dtype)."""
    rows = logits_bits.shape[0]
    trace = np.asarray(trace)
    if trace.shape != (rows, len(FIELDS)):
        return [(-1, f"trace shape {trace.shape}, expected {(rows, len(FIELDS))}")]
    if trace.dtype != np.int32:
        return [(-1, f"trace dtype {trace.dtype}, expected int32")]
    problems = []
    for r in range(rows):
        length = int(lengths[r])
        keys = element_keys(logits_bits[r], length, block_mode).astype(np.int64)
        kth_above = kth_and_above(keys, int(k)) if keys.size > k else None
        problems += [(r, m) for m in _row_problems(keys, length, int(k), bool(block_mode), trace[r], kth_above)]
        if build is not None:
            want = expected_row_trace(keys, length, int(k), bool(block_mode), build, kth_above)
            for f in range(len(FIELDS)):
                if int(trace[r, f]) != want[f]:
                    problems.append((r, f"field {FIELDS[f]}: expected {want[f]} on build "
                                        f"{policy.Build.parse(build).name}, got {int(trace[r, f])}"))
    return problems


def trace_invariants(logits_bits, lengths, k, block_mode, trace, build=None):
    """The problems of trace (int32 [rows, 8]) for these inputs, as messages naming the
    row; empty if none. With build (cluster, threads, vectors), every field must also equal
    `expected_trace` on that build."""
    return [m if r < 0 else f"row {r}: {m}"
            for r, m in trace_problems(logits_bits, lengths, k, block_mode, trace, build)]


def coverage(trace):
    """{'path:short': rows, ..., 'reason:overflow': rows, 'reason:underflow': rows} of a
    trace."""
    trace = np.asarray(trace)
    cov = {}
    for p, name in PATH_NAMES.items():
        cov[f"path:{name}"] = int(np.count_nonzero(trace[:, PATH] == p))
    for rcode, name in REASON_NAMES.items():
        if rcode:
            cov[f"reason:{name}"] = int(np.count_nonzero(trace[:, REASON] == rcode))
    return cov
