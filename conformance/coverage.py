"""Staged-vector slot coverage: which (build, mode, vector slot, path, fallback) a run reached.

Why: a kernel bug confined to one staged-vector slot (a wrong shared-memory address for
slot 7, a top computed from the wrong words of slot 12, a slot skipped by a filter) changes
only rows long enough to stage a vector there, and the widest ci row once stopped at slot 3.
This module says which slots each row reaches on each build, from the length alone, so the
suite can print what a level reached and fail when it misses a combination a correct
implementation can reach.

The staging rule (SPEC.md 2.2; kernel/decode_topk_cute.py `DecodeTopK.kernel`: `i = s * nt +
tid`, `g = start + i`, stored when `i < count`): a row has `nv = ceil(length / 8)` valid
vectors in both modes (in block mode one vector is one block, the pinned newest block
included: it is not loaded but it has a slot and a top). CTA `c` of `C` owns the global
vectors `[c nv // C, (c + 1) nv // C)`; its local vector `i` belongs to thread `i mod T` and
slot `s = i div T`, `0 <= s < V`. So CTA `c` stages slots `0 .. ceil(count_c / T) - 1`, and a
row reaches every slot below the largest of those (the slots are filled bottom up). This
is computed here from the rule itself, not from the model, so that a model whose chunks or
slots drift from the SPEC does not also move what coverage counts.

The streamed builds (1x512x4, 2x512x4, 4x512x4 and 8x512x4, SPEC.md 2.12) stage their rows of at
most their stage (16,384-131,072 logits; every block row) as above, in four slots. A longer token
row stages nothing: each thread loads its own vectors of each tile into registers and the
CTA keeps only its queue in shared memory, so such a row has no staged slot and its
combinations name the slot `STREAMED` instead. (One marker suffices: a thread's registers
hold STREAM_DEPTH - 1 tiles of STREAM_TILE vectors, and the widest chunk of a streamed row
holds more than the stage's T V vectors a CTA, so at least ceil((T V + 1) / (T U)) tiles,
which is every buffer's tile while V >= (STREAM_DEPTH - 2) U: each streamed row meets
every buffer and slot of every thread in some CTA. tests/test_coverage.py checks that
inequality.)

A *combination* is `(build, mode, slot, path, reason)`: build 'CxTxV', mode 'token' or
'block', slot `0 .. V-1`, `STREAMED` (a streamed row) or `NO_SLOT` (a row of length 0
stages nothing), path and reason the trace's codes (conformance/trace.py PATH_NAMES,
REASON_NAMES; SPEC.md 2.11). The mode is part of it because the kernel compiles token and
block mode as separate variants.
"""

from collections import Counter

import numpy as np

from decode_topk.kernel.policy import BUILDS, KEY_BLOCKS, KS, LOGITS_PER_VECTOR, MAX_WIDTH, Build, direct_max_length

from .trace import PATH_NAMES, REASON_NAMES, chunks

NO_SLOT = -1  # the slot "reached" by a row that stages no vector (length 0)
STREAMED = -2  # the "slot" of a streamed row (SPEC.md 2.12), whose vectors have none
MODE_NAMES = {False: "token", True: "block"}
SHORT, SAMPLED, DIRECT = 0, 1, 2  # trace path codes (SPEC.md 2.11)
NONE, OVERFLOW, UNDERFLOW = 0, 1, 2  # trace reason codes (overflow: a streamed queue's, SPEC.md 2.12, or a staged attempt's one pass, 2.5)


def normalize_build(build):
    """The Build of anything `Build.parse` takes (a Build, 'CxTxV', (cluster, vectors) or
    (cluster, threads, vectors))."""
    return Build.parse(build)


def build_label(build):
    return normalize_build(build).name


def vector_count(lengths):
    """Valid vectors of rows of these lengths, both modes: ceil(length / 8)."""
    return (np.asarray(lengths, dtype=np.int64) + LOGITS_PER_VECTOR - 1) // LOGITS_PER_VECTOR


def streamed_rows(build, lengths, block_mode=False):
    """bool [rows]: the rows that stream on build (SPEC.md 2.12): on a streamed build the
    token rows longer than its stage (block rows never stream: their stage of keys holds
    them, Build.capacity_in)."""
    build = normalize_build(build)
    lengths = np.asarray(lengths, dtype=np.int64)
    if build.streams and not block_mode:
        return lengths > build.stage
    return np.zeros(lengths.shape, bool)


def slots_reached(build, lengths, block_mode=False):
    """int64 [rows]: how many staged-vector slots each row fills on build, i.e. the row
    reaches slots 0 .. result - 1 (0: it stages nothing). CTA by CTA from the chunk rule:
    CTA c stages its local vectors 0 .. count_c - 1 in slots i div T, so ceil(count_c / T)
    slots (block mode: a block's key a slot, up to KEY_BLOCKS V of them, SPEC.md 2.2); a
    streamed row (streamed_rows) stages nothing. The register build (SPEC.md 2.13)
    stages nothing either: thread t holds vectors V t .. V t + V - 1 in registers, so its
    "slot" is a vector's place among its thread's, i mod V, and a row of nv vectors reaches
    min(nv, V) of them."""
    build = normalize_build(build)
    nv = vector_count(lengths)
    if build.registers:
        return np.minimum(nv, build.vectors)
    start, end = chunks(nv[:, None], build.cluster)  # [rows, C]
    filled = (-(-(end - start) // build.threads)).max(axis=1, initial=0)
    return np.where(streamed_rows(build, lengths, block_mode), 0, filled)


def top_slot_vectors(build, length):
    """int64: the global vectors that the CTAs of build stage in the highest slot each of
    them reaches on a row of `length` (local vectors from (count_c - 1) div T * T on; on the
    register build, whose slot is g mod V, the vectors of slot min(nv, V) - 1)."""
    build = normalize_build(build)
    if build.registers:
        g = np.arange(int(vector_count([length])[0]), dtype=np.int64)
        return g[g % build.vectors == min(g.size, build.vectors) - 1]
    start, end = chunks(int(vector_count([length])[0]), build.cluster)
    parts = [np.arange(s + (e - s - 1) // build.threads * build.threads, e, dtype=np.int64)
             for s, e in zip(start.tolist(), end.tolist()) if e > s]
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)


def top_slot_length(builds):
    """The shortest length at which every CTA of every build of `builds` stages a vector in
    its top slot V - 1: nv = max over the builds of (V - 1) C T + C (each chunk then holds at
    least (V - 1) T + 1 vectors), the last vector holding one logit."""
    nv = max((b.vectors - 1) * b.cluster * b.threads + b.cluster for b in map(normalize_build, builds))
    return LOGITS_PER_VECTOR * (nv - 1) + 1


def run_combinations(build, lengths, block_mode, trace):
    """Counter {combination: rows} of one run (rows `lengths`, int32 [rows, 8] `trace` of
    SPEC.md 2.11, on build; an empty Counter when the build is not known). Path and reason
    are read from the trace, as the implementation reports them; the slots follow from the
    build and the lengths. ValueError for a trace of the wrong shape."""
    if build is None:
        return Counter()
    trace = np.asarray(trace)
    lengths = np.asarray(lengths)
    if trace.ndim != 2 or trace.shape[0] != lengths.shape[0] or trace.shape[1] < 2:
        raise ValueError(f"trace of shape {trace.shape} for {lengths.shape[0]} rows")
    label = build_label(build)
    mode = MODE_NAMES[bool(block_mode)]
    filled = slots_reached(build, lengths, block_mode)
    streamed = streamed_rows(build, lengths, block_mode)
    result = Counter()
    for count, stream, path, reason in zip(filled.tolist(), streamed.tolist(), trace[:, 0].tolist(),
                                           trace[:, 1].tolist()):
        for s in ((STREAMED,) if stream else range(count) if count else (NO_SLOT,)):
            result[(label, mode, s, int(path), int(reason))] += 1
    return result


def reachable(build):
    """The combinations some row of some length, k and content reaches on build
    (cluster C, threads T, vectors V; capacity 8 C T V logits, so nv <= C T V).

    Slot s is reached iff some chunk has more than s T vectors, i.e. iff
    ceil(nv / C) > s T, i.e. iff nv > s C T (chunks differ by at most one vector and the
    largest is ceil(nv / C)).

    Token mode (n = length, SPEC.md 2.3, 2.12):
    - short (n <= k <= 2048): nv <= 256 <= C T (C T >= 512 in every build), so slot 0 only,
      or no slot at length 0.
    - direct without a sampled attempt (k < n <= D, D = direct_max_length(C, V) = 8 C T d,
      d = 8 vectors a thread at C = 1, 4 at C = 2, 2 on the clusters of 4, 8 and 16, and
      the stage's V = 4 on the streamed builds): slots 0 .. min(d, V) - 1, since nv <= d C T
      puts at most d T vectors in every chunk; reachable because k + 1 <= 8 C T.
    - a sampled attempt (n > D, where D < capacity; not on 1x512x8, whose capacity is D)
      on a staged build:
      slots 0 .. ceil(nv / (C T)) - 1, so every slot up to V - 1 (at capacity). Each
      outcome, sampled (path 1, reason 0) and underflow (path 2, reason 2), is reachable at
      every such length, because the cutoff is the q-th largest of the 2048 sampled keys and
      the outcome is set by the other positions: the row's largest values at the sample
      positions and nothing else at or above the cutoff underflows when q < k (exactly q
      keys at or above it; q <= 576 < k = 2048, since every sampled row is longer than
      D >= 16,384 logits); k or more such keys succeed (conformance/algorithm_cases.py
      builds exactly such rows: make_controlled, make_samples_hit_top, make_one_cta_hits).
      So is the overflow of the attempt's one pass (path 2, reason 1: K at NARROW_SPAN or
      more above the cutoff, SPEC.md 2.5): k or more such keys placed far above it
      (make_narrow_overflow).
    - a streamed row (n > D, the stage, on a streamed build): slot STREAMED, with the
      sampled path and both fallbacks: underflow as above, and overflow (path 2, reason 1)
      once a chunk may hold more than STREAM_QUEUE vectors (nv > 8,192 C; e.g. the 2048
      samples one value, the cutoff, and every other vector's top above it: each CTA's
      GV_c is nearly its whole chunk).
    Block mode (n = nv, no sampled path; a block's key a slot, SPEC.md 2.2, so nv <=
    KEY_BLOCKS C T V and the slots are 0 .. KEY_BLOCKS V - 1):
    - short (nv <= k <= 2048): slots 0 .. ceil(ceil(2048 / C) / T) - 1 (slot 0 at C >= 4,
      where C T >= 4096; slots 0-1 at C = 2; slots 0-3 at C = 1), or no slot at length 0.
    - direct, reason 0, for k < nv <= KEY_BLOCKS C T V: every slot 0 .. KEY_BLOCKS V - 1,
      but no row is wider than MAX_WIDTH (131,072 blocks), so on the builds whose keys
      hold more only the slots up to ceil(ceil(131,072 / C) / T) - 1 (8x512x8, 4x1024x8
      and 8x512x16: 0-31; 16x512x16: 0-15).
    No other (path, reason) is possible: the sampled path and the fallbacks exist only in
    token mode for n > D, and a short row never falls back.
    The register build (SPEC.md 2.13: V vectors a thread in registers, token rows only):
    every slot 0 .. V - 1 short or direct, or no slot at length 0. 3x512x4 (token rows
    only, SPEC.md 2.1): no block combination.
    """
    label = build_label(build)
    cluster, threads, vectors = normalize_build(build)
    combos = set()
    modes = normalize_build(build).modes
    for mode in (MODE_NAMES[m] for m in modes):
        combos |= {(label, mode, NO_SLOT, SHORT, NONE), (label, mode, 0, SHORT, NONE)}
    if normalize_build(build).registers:  # token rows of at most 8,192 logits: short or direct (SPEC.md 2.13)
        return ({combo for combo in combos if combo[1] == "token" and combo[2] == NO_SLOT}
                | {(label, "token", s, path, NONE) for s in range(vectors) for path in (SHORT, DIRECT)})
    def block_slots(blocks):  # the slots a block row fills: its largest chunk, ceil(blocks / C), over T
        return -(-(-(-blocks // cluster)) // threads)
    if True in modes:
        combos |= {(label, "block", s, SHORT, NONE) for s in range(block_slots(max(KS)))}
        widest = block_slots(-(-MAX_WIDTH // LOGITS_PER_VECTOR))  # a MAX_WIDTH block row's
        combos |= {(label, "block", s, DIRECT, NONE) for s in range(min(KEY_BLOCKS * vectors, widest))}
    direct_vectors = direct_max_length(cluster, vectors) // (8 * cluster * threads)  # d
    combos |= {(label, "token", s, DIRECT, NONE) for s in range(min(vectors, direct_vectors))}
    attempts = [(SAMPLED, NONE), (DIRECT, UNDERFLOW), (DIRECT, OVERFLOW)]
    if normalize_build(build).streams:
        combos |= {(label, "token", STREAMED, path, reason) for path, reason in attempts}
    elif direct_vectors < vectors:
        combos |= {(label, "token", s, path, reason) for s in range(vectors) for path, reason in attempts}
    return combos


def reachable_all(builds=None):
    """The union of `reachable` over builds (default: every build of SPEC.md 2.1)."""
    result = set()
    for build in builds if builds is not None else BUILDS:
        result |= reachable(build)
    return result


def missing(reached, builds=None):
    """Sorted reachable combinations of builds (default: all) that `reached` (an iterable
    or Counter of combinations) lacks."""
    return sorted(reachable_all(builds) - set(reached))


def unreachable(reached, builds=None):
    """Sorted combinations of `reached` that `reachable` rules out on their build: each
    is an implementation trace that contradicts SPEC.md 2.3, or a mistake in `reachable`
    (the trace checks tell which)."""
    builds = builds if builds is not None else sorted({c[0] for c in reached})
    return sorted(set(reached) - reachable_all(builds))


def _path_name(path, reason):
    name = PATH_NAMES.get(path, f"path{path}")
    return name if reason == NONE else f"{name}:{REASON_NAMES.get(reason, f'reason{reason}')}"


def _slot_ranges(slots):
    """'-, 0, 4-7' of sorted slots: runs of consecutive slots as ranges."""
    parts, run = [], []
    for s in sorted(slots):
        if run and s == run[-1] + 1 and s > 0:
            run.append(s)
            continue
        if run:
            parts.append(run)
        run = [s]
    if run:
        parts.append(run)
    return ", ".join(_slot_name(r[0]) if len(r) == 1 else f"{_slot_name(r[0])}-{_slot_name(r[-1])}"
                     for r in parts)


def _slot_name(slot):
    return {NO_SLOT: "-", STREAMED: "s"}.get(slot, str(slot))


def describe(combos):
    """Every combination of `combos` on one line, grouped as 'build mode path: slots'
    ('-': no slot staged, 's': streamed), e.g. '8x512x8 token sampled: slots 4-7; ...'."""
    groups = {}
    for build, mode, slot, path, reason in sorted(combos, key=lambda c: (BUILDS.index(normalize_build(c[0])),) + c[1:]):
        groups.setdefault((build, mode, path, reason), []).append(slot)
    return "; ".join(f"{build} {mode} {_path_name(path, reason)}: slots {_slot_ranges(slots)}"
                     for (build, mode, path, reason), slots in groups.items())


def format_table(reached, builds=None):
    """The coverage table as lines: one line a (build, mode, path:reason), one column a
    slot ('-': no slot staged, 's': a streamed row), each cell the rows reaching it; '.' marks a combination
    `reachable` rules out, '!' one it allows that no row reached. builds: those to show
    (default: the builds in `reached`)."""
    reached = Counter(reached)
    labels = sorted({build_label(b) for b in builds} if builds is not None else {c[0] for c in reached},
                    key=lambda name: BUILDS.index(normalize_build(name)))
    if not labels:
        return []
    width = max(normalize_build(b).vectors for b in labels)
    slots = [NO_SLOT] + list(range(width)) + ([STREAMED] if any(normalize_build(b).streams for b in labels) else [])
    kinds = [(p, r) for p in (SHORT, DIRECT, SAMPLED) for r in (NONE, OVERFLOW, UNDERFLOW)]
    lines = ["staged-vector slot coverage (rows; 's' streamed; '.' unreachable, '!' reachable but not reached):",
             f"  {'build':<10} {'mode':<5} {'path':<16}" + "".join(f"{_slot_name(s):>5}" for s in slots)]
    for label in labels:
        can = reachable(label)
        for mode in MODE_NAMES.values():
            for path, reason in kinds:
                cells = []
                row_can = False
                for s in slots:
                    combo = (label, mode, s, path, reason)
                    count = reached.get(combo, 0)
                    row_can |= combo in can or count > 0
                    cells.append(str(count) if count else ("!" if combo in can else "."))
                if row_can:
                    lines.append(f"  {label:<10} {mode:<5} {_path_name(path, reason):<16}"
                                 + "".join(f"{c:>5}" for c in cells))
    return lines


def print_table(reached, stream, builds=None):
    for line in format_table(reached, builds):
        print(line, file=stream)


# ----------------------------------------------------------------------------------------
# The suite's use (conformance/suite.py): each RunResult carries `slots`, the
# run_combinations of its trace
# ----------------------------------------------------------------------------------------

def suite_combinations(runs):
    """Counter {combination: rows} over runs (their `slots`)."""
    total = Counter()
    for run in runs:
        total.update(getattr(run, "slots", None) or {})
    return total


def suite_problems(runs, builds):
    """Lines naming what a whole level's runs on `builds` (those forced) missed: reachable
    combinations no row reached, and reached ones `reachable` rules out; [] if none."""
    reached = suite_combinations(runs)
    problems = []
    lacking = missing(reached, builds)
    if lacking:
        problems.append(f"slot coverage: {len(lacking)} reachable (build, mode, slot, path) combinations "
                        f"not reached: {describe(lacking)}")
    extra = unreachable(reached, builds)
    if extra:
        problems.append(f"slot coverage: {len(extra)} combinations reached that SPEC.md 2.2-2.3 rule out: "
                        f"{describe(extra)}")
    return problems


def print_suite_table(runs, stream):
    """The table over runs that carry slots (none: nothing printed)."""
    print_table(suite_combinations(runs), stream)
