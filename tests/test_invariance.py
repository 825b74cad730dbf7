"""Batch invariance (issue 16, item 4): a row's output is a pure function of (row, length, k,
mode), the same whatever batch it is in, its slot there, the build and the run, and it is
the canonical answer of SPEC.md 1.4 (every index above the k-th largest key K, then the
lowest indices equal to K, in ascending index order; a -inf block -1 in its slot).

The same rows, tie-heavy ones first (one value, few values, the k-th key tied thousands of
times, mostly -inf, NaN of both signs, signed zeros), short rows and rows at the path
boundaries, are embedded in batches of 1, 7, 64 and 128 in shuffled slots (a row may sit in
several slots of one batch), with garbage and NaN past each length, and run
- on the model (reference/model.py `simulate`), every build forced and the policy's choice
  (also with a residency that makes the policy change builds with the batch size), widths
  that take the sampled path (token rows over C * T * 8 logits: 32768 on 8x512x8, 4x1024x8,
  8x512x16; 65536 on 16x512x16) and the direct path (block mode, shorter token rows);
- on the GPU (marked gpu): the DSL (`decode_topk_cute.decode_topk`) and the AOT library
  (`aot_loader.decode_topk_aot`), where present, through decode_topk and
  decode_topk_seq_lens with next_n 1, 2 and 4, every build forced and the policy's, each
  batch launched 100 times with out poisoned before every launch.
Every row's output must equal its canonical answer (conformance.contract.canonical_answer,
the checker's own statement of it) bit for bit, in every batch, slot, build and run.

A planted arrival-order tie choice (the model's mutant `arrival_cta_order`: CTA prefixes in
an order rotated by the row's batch slot) must make the check fail.
"""

import numpy as np
import pytest

from decode_topk.conformance import contract
from decode_topk.kernel.policy import BUILDS, KS

NEG_INF = 0xFF80
POS_INF = 0x7F80
ONE = 0x3F80  # 1.0
TWO = 0x4000  # 2.0
BATCH_SIZES = (1, 7, 64, 128)
MUTANT = "arrival_cta_order"


# ---------------------------------------------------------------------------------------
# The rows
# ---------------------------------------------------------------------------------------
def _below_one(rng, size):
    """BF16 bits of positive values below 1.0 (0.0078 .. 0.98), so they rank under ONE."""
    return rng.integers(0x3C00, 0x3F7B, size=size, dtype=np.uint16)


def _normal(rng, size):
    values = rng.standard_normal(size).astype(np.float32)
    return (values.view(np.uint32) >> 16).astype(np.uint16)


def _sprinkle(rng, row, patterns, fraction):
    where = rng.random(row.size) < fraction
    row[where] = rng.choice(np.asarray(patterns, dtype=np.uint16), size=int(where.sum()))
    return row


def row_set(width, seed=0):
    """(names, bits uint16 [R, width], lengths int32 [R]): the rows every batch is made of,
    past each length garbage and NaN (never counted, SPEC.md 1.1)."""
    rng = np.random.default_rng(seed + width)
    rows = []

    def add(name, values, length):
        row = rng.integers(0, 1 << 16, size=width, dtype=np.uint16)  # garbage past the length
        row[width - (width - length) // 2:] = 0x7FC0  # and NaN
        row[:length] = values[:length]
        rows.append((name, row, min(length, width)))

    full = width
    add("one-value", np.full(width, ONE, np.uint16), full)
    # one logit over C * T vectors: the sampled path's first length (8-vector builds and
    # 8x512x16: 32769; 16x512x16: 65537), and C * T vectors exactly: the direct path's last
    add("one-value-sampled-edge", np.full(width, ONE, np.uint16), 32769)
    add("direct-edge", rng.choice(np.array([ONE, TWO], np.uint16), size=width), 32768)
    if width > 65537:
        add("one-value-sampled-edge-16", np.full(width, ONE, np.uint16), 65537)
        add("direct-edge-16", rng.choice(np.array([ONE, TWO], np.uint16), size=width), 65536)
    add("few-values", rng.choice(np.array([ONE, TWO, 0x3F00], np.uint16), size=width), full)
    # 300 keys above K, K = 1.0 tied 6000 times, the rest below: every k ties at K thousands of times
    tied = _below_one(rng, width)
    spots = rng.permutation(width)
    tied[spots[:300]] = TWO
    tied[spots[300:6300]] = ONE
    add("kth-tied-6000", tied, full)
    add("kth-tied-6000-partial", tied, width - 3)
    # mostly -inf: 700 finite; K = -inf for k >= 1024 in token mode; in block mode a -inf
    # block is -1 in its slot (k - |{key > K}| of them)
    mostly = np.full(width, NEG_INF, np.uint16)
    mostly[rng.choice(width, 700, replace=False)] = _normal(rng, 700)
    add("mostly-neg-inf", mostly, full)
    # every other block -inf (block mode: -inf blocks among the selected ones, ties at the finite values)
    alternating = np.where((np.arange(width) // 8) % 2 == 0, ONE, NEG_INF).astype(np.uint16)
    add("alternating-neg-inf-blocks", alternating, full)
    add("nan-and-inf", _sprinkle(rng, _normal(rng, width), (0x7FC0, 0xFFC0, 0x7F81, 0xFFFF, POS_INF, NEG_INF),
                                 0.05), full)
    add("signed-zeros", rng.choice(np.array([0x0000, 0x8000], np.uint16), size=width), full)
    add("zeros-and-few-positives", _sprinkle(rng, rng.choice(np.array([0x0000, 0x8000], np.uint16), size=width),
                                             (ONE,), 0.01), full)
    add("random-bits", rng.integers(0, 1 << 16, size=width, dtype=np.uint16), full)
    add("k-plus-one", np.full(width, ONE, np.uint16), 2049)
    add("short-tied", np.full(width, ONE, np.uint16), 500)  # short in token and block mode
    add("block-short-neg-inf", np.where(np.arange(width) % 24 < 8, NEG_INF, TWO).astype(np.uint16), 4000)
    add("empty", np.zeros(width, np.uint16), 0)
    names = [name for name, _, _ in rows]
    bits = np.stack([row for _, row, _ in rows])
    lengths = np.array([length for _, _, length in rows], dtype=np.int32)
    return names, bits, lengths


def canonical(bits, lengths, k, block_mode):
    """int32 [R, k]: each row's canonical answer, as the checker's strict mode states it."""
    return np.stack([contract.canonical_answer(contract.element_keys(bits[r], lengths[r], block_mode), k, block_mode)
                     for r in range(bits.shape[0])])


def arrangement(count, batch, rng):
    """Batches of `batch` slots holding row ids 0 .. count-1, each at least once, in shuffled
    slots: max(count, batch) rounded up to a whole number of batches."""
    slots = -(-max(count, batch) // batch) * batch
    ids = np.concatenate([rng.permutation(count) for _ in range(-(-slots // count))])[:slots]
    ids = rng.permutation(ids)
    return [ids[i:i + batch] for i in range(0, slots, batch)]


def invariance_problems(run, names, bits, lengths, k, block_mode, batch_sizes=BATCH_SIZES, seed=0):
    """The ways `run(bits, lengths) -> out` breaks invariance on these rows (empty: none):
    a row whose output in some batch and slot differs from its output in its first batch
    ('differs across batches'), or from its canonical answer ('not canonical')."""
    rng = np.random.default_rng(seed)
    want = canonical(bits, lengths, k, block_mode)
    first = {}
    problems = []
    for size in batch_sizes:
        for batch in arrangement(len(names), size, rng):
            out = np.asarray(run(bits[batch], lengths[batch]))
            for slot, r in enumerate(batch):
                got = out[slot]
                where = f"batch of {size}, slot {slot}"
                if r not in first:
                    first[r] = (got.copy(), where)
                elif not np.array_equal(got, first[r][0]):
                    j = int(np.flatnonzero(got != first[r][0])[0])
                    problems.append(f"{names[r]} (length {lengths[r]}): differs across batches: {where} has "
                                    f"out[{j}] = {got[j]}, {first[r][1]} has {first[r][0][j]}")
                if not np.array_equal(got, want[r]):
                    j = int(np.flatnonzero(got != want[r])[0])
                    problems.append(f"{names[r]} (length {lengths[r]}): not canonical in {where}: out[{j}] = "
                                    f"{got[j]}, the canonical answer {want[r][j]}")
    return problems


def _report(problems, label, shown=8):
    return f"{label}: {len(problems)} problems; first: " + "\n  ".join(problems[:shown])


def test_the_rows_are_what_they_claim():
    """The row set's intent holds: ties at K thousands of times, -inf selected in block mode,
    short rows, and the canonical answer of the checker equals the reference's."""
    from decode_topk.reference.topk import decode_topk_reference

    names, bits, lengths = row_set(40960)
    assert len(set(names)) == len(names)
    keys = contract.element_keys(bits[names.index("kth-tied-6000")], lengths[names.index("kth-tied-6000")], False)
    for k in KS:
        kth = np.partition(keys, keys.size - k)[keys.size - k]
        assert np.count_nonzero(keys == kth) == 6000 and np.count_nonzero(keys > kth) == 300
    for block_mode in (False, True):
        for k in KS:
            want = canonical(bits, lengths, k, block_mode)
            np.testing.assert_array_equal(want, decode_topk_reference(bits, lengths, k, block_mode, canonical=True))
    blocks = canonical(bits, lengths, 1024, True)
    assert (blocks[names.index("mostly-neg-inf")] == -1).sum() > 0  # -inf blocks selected, written -1
    assert (blocks[names.index("alternating-neg-inf-blocks")] == -1).sum() == 0  # K finite: none selected


# ---------------------------------------------------------------------------------------
# The model (CPU)
# ---------------------------------------------------------------------------------------
def _model_runner(build, block_mode, k, mutant=0):
    """run(bits, lengths) -> out of reference.model.simulate on `build`: a build name, or
    'policy' (the policy's choice, every row resident: 8x512x8 up to 262144) or
    'policy-resident-32' (a device that keeps 32 clusters resident: the policy takes
    8x512x8 for up to 32 rows, 4x1024x8 above, so the build changes with the batch)."""
    from decode_topk.reference.model import simulate

    forced = None if build.startswith("policy") else build
    resident = (lambda b: 32) if build == "policy-resident-32" else None

    def run(bits, lengths):
        out, _ = simulate(bits, lengths, k, block_mode, build=forced, resident=resident, mutant=mutant)
        return out

    return run


def _builds_holding(width, block_mode=False):
    return [b.name for b in BUILDS if width <= b.capacity_in(block_mode)] + ["policy", "policy-resident-32"]


# 40960: token rows over 32768 take the sampled path on 8x512x8, 4x1024x8 and 8x512x16, the
# direct path on 16x512x16; 73728: over 65536, sampled on 16x512x16 too. Block rows and
# shorter token rows: the direct path.
CPU_WIDTHS = (40960, 73728)


@pytest.mark.parametrize("width, build, block_mode", [
    pytest.param(width, build, block_mode, id=f"{width}-{build}-{'block' if block_mode else 'token'}")
    for block_mode in (False, True) for build in _builds_holding(max(CPU_WIDTHS), block_mode) for width in CPU_WIDTHS])
def test_model_is_batch_invariant_and_canonical(width, build, block_mode):
    names, bits, lengths = row_set(width)
    problems = []
    for k in KS:
        run = _model_runner(build, block_mode, k)
        problems += [f"k={k}: {p}" for p in invariance_problems(run, names, bits, lengths, k, block_mode,
                                                                 seed=width + k)]
    assert not problems, _report(problems, f"model, build {build}, width {width}, "
                                           f"{'block' if block_mode else 'token'} mode")


@pytest.mark.slow
@pytest.mark.parametrize("block_mode", [False, True], ids=["token", "block"])
@pytest.mark.parametrize("width", [262144, 524288, 1048576])
def test_model_is_batch_invariant_and_canonical_wide(width, block_mode):
    """The widest rows of each build's capacity, on every build that holds them and the
    policy's."""
    names, bits, lengths = row_set(width)
    builds = [b.name for b in BUILDS if width <= b.capacity_in(block_mode)] + ["policy"]
    problems = []
    for build in builds:
        for k in KS:
            run = _model_runner(build, block_mode, k)
            problems += [f"{build} k={k}: {p}" for p in invariance_problems(run, names, bits, lengths, k, block_mode,
                                                                             seed=width + k)]
    assert not problems, _report(problems, f"model, width {width}, {'block' if block_mode else 'token'} mode")


def _mutants():
    from decode_topk.reference import model

    return model.MUTANTS


@pytest.mark.parametrize("block_mode", [False, True], ids=["token", "block"])
def test_an_arrival_order_tie_choice_is_caught(block_mode):
    """The model with CTA prefixes in an arrival order rotated by the row's batch slot: a
    row's output depends on where it sits, which the invariance check must report (as
    'differs across batches', not only as 'not canonical')."""
    if MUTANT not in _mutants():
        pytest.skip(f"reference.model.MUTANTS has no {MUTANT!r} yet (the model rewrite of issue 16 adds it)")
    names, bits, lengths = row_set(40960)
    for build in ("8x512x8", "16x512x16"):
        run = _model_runner(build, block_mode, 512, mutant=MUTANT)
        problems = invariance_problems(run, names, bits, lengths, 512, block_mode, batch_sizes=(1, 7, 64), seed=3)
        assert any("differs across batches" in p for p in problems), (build, problems[:3])
        # slot 0 is not rotated: alone in a batch of one, every row is still canonical
        alone = invariance_problems(run, names, bits, lengths, 512, block_mode, batch_sizes=(1,))
        assert alone == [], (build, alone[:3])


def test_the_check_sees_a_reordered_or_retied_row():
    """invariance_problems itself: an implementation right but for one row's slot order
    (descending key: the reference's default) or a tie choice depending on the slot is
    reported; the canonical reference passes."""
    from decode_topk.reference.topk import decode_topk_reference

    names, bits, lengths = row_set(40960)
    for block_mode in (False, True):
        ok = invariance_problems(lambda b, n: decode_topk_reference(b, n, 512, block_mode, canonical=True),
                                 names, bits, lengths, 512, block_mode, batch_sizes=(1, 7))
        assert ok == []
    default = invariance_problems(lambda b, n: decode_topk_reference(b, n, 512, False), names, bits, lengths, 512,
                                  False, batch_sizes=(1, 7))
    assert default and all("not canonical" in p for p in default)

    def slot_dependent(b, n):  # the highest-index ties in odd slots: a set that moves with the slot
        out = decode_topk_reference(b, n, 512, False, canonical=True)
        for slot in range(1, b.shape[0], 2):
            keys = contract.element_keys(b[slot], n[slot], False)
            if keys.size > 512:
                kth = np.partition(keys, keys.size - 512)[keys.size - 512]
                above = np.flatnonzero(keys > kth)
                tied = np.flatnonzero(keys == kth)
                out[slot] = np.sort(np.concatenate([above, tied[tied.size - (512 - above.size):]]))
        return out

    moved = invariance_problems(slot_dependent, names, bits, lengths, 512, False, batch_sizes=(1, 7, 64))
    assert any("differs across batches" in p for p in moved), moved[:3]


# ---------------------------------------------------------------------------------------
# The GPU (DSL and AOT library)
# ---------------------------------------------------------------------------------------
REPEATS = 100
GPU_WIDTH = 40960  # sampled token rows on every build but 16x512x16; direct in block mode
GPU_REQUESTS = (1, 7, 64)  # requests a batch (next_n rows each)


def _have_cuda():
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def _gpu_entries():
    """[(name, launch)] of the GPU entry points present: launch(logits, lengths, k, out,
    block_mode, build, next_n) with lengths one a row (next_n 1) or seq_lens."""
    if not _have_cuda():
        return []
    import _entries  # tests/_entries.py: how the GPU tests find the DSL and the library

    found = []
    if _entries._have_dsl():
        def dsl(logits, lengths, k, out, block_mode, build, next_n):
            from decode_topk.kernel import decode_topk_cute as dtk
            from decode_topk.kernel import policy

            if next_n == 1:
                return dtk.decode_topk(logits, lengths, k, out=out, block_mode=block_mode, build=build)
            if build is None:
                return dtk.decode_topk_seq_lens(logits, lengths, next_n, k, out=out, block_mode=block_mode)
            # decode_topk_seq_lens takes no build: its front end, policy.launch, does
            return policy.launch(dtk.JIT, logits, lengths, k, out, block_mode, None, build, next_n)

        found.append(("dsl", dsl))
    if _entries._have_aot():
        def aot(logits, lengths, k, out, block_mode, build, next_n):
            from decode_topk.kernel import aot_loader

            return aot_loader.decode_topk_aot(logits, lengths, k, out=out, block_mode=block_mode, build=build,
                                              next_n=next_n)

        found.append(("aot", aot))
    return found


def _gpu_params():
    found = _gpu_entries()
    if not found:
        return [pytest.param(None, id="none", marks=pytest.mark.skip(
            reason="no CUDA GPU with the DSL or the AOT library (built from this kernel source)"))]
    return [pytest.param(launch, id=name) for name, launch in found]


def _requests(names, bits, lengths, next_n):
    """Requests of next_n rows: request q's draft d holds row (q + d) mod R of the row set,
    and its seq_len makes its last draft's length that of row q (earlier drafts one shorter
    each, clamped at 0). Returns (bits [Q, next_n, width], seq_lens int64 [Q])."""
    count = len(names)
    rows = np.stack([bits[(np.arange(count) + d) % count] for d in range(next_n)], axis=1)
    return rows, lengths.astype(np.int64) + next_n - 1


@pytest.mark.gpu
@pytest.mark.parametrize("launch", _gpu_params())
@pytest.mark.parametrize("next_n", [1, 2, 4])
@pytest.mark.parametrize("block_mode", [False, True], ids=["token", "block"])
def test_gpu_is_batch_invariant_and_canonical_across_runs(launch, next_n, block_mode):
    import torch

    from decode_topk.conformance.gpu_impl import POISON, to_device_bf16
    from decode_topk.reference.topk import seq_lens_lengths

    names, bits, lengths = row_set(GPU_WIDTH)
    req_bits, seq = _requests(names, bits, lengths, next_n)
    count = len(names)
    builds = [None] + [b for b in BUILDS if GPU_WIDTH <= b.capacity_in(block_mode)]
    rng = np.random.default_rng(next_n + 10 * block_mode)
    batches = [batch for size in GPU_REQUESTS for batch in arrangement(count, size, rng)]
    all_lengths = seq_lens_lengths(seq, next_n, GPU_WIDTH).reshape(count, next_n)  # [request, draft]
    problems = []
    for k in KS:
        # The canonical answer of every (request, draft), once; then per batch its logits,
        # its lengths (next_n 1) or seq_lens, and the answers in its row order.
        answers = canonical(req_bits.reshape(count * next_n, GPU_WIDTH), all_lengths.reshape(-1), k,
                            block_mode).reshape(count, next_n, k)
        prepared = []
        for batch in batches:
            b = req_bits[batch].reshape(len(batch) * next_n, GPU_WIDTH)
            given = seq[batch] if next_n > 1 else all_lengths[batch, 0]
            want = answers[batch].reshape(len(batch) * next_n, k)
            prepared.append((batch, to_device_bf16(b), torch.tensor(given, dtype=torch.int32, device="cuda"),
                             torch.from_numpy(np.ascontiguousarray(want)).cuda()))
        for build in builds:
            label = f"k={k} build {'policy' if build is None else build.name} next_n={next_n}"
            first = {}
            for batch, logits, given, want in prepared:
                out = torch.empty_like(want)
                wrong = torch.zeros(want.shape[0], dtype=torch.bool, device="cuda")
                for _ in range(REPEATS):
                    out.fill_(POISON)
                    launch(logits, given, k, out, block_mode, build, next_n)
                    wrong |= (out != want).any(dim=1)
                last = out.cpu().numpy()
                for r in torch.nonzero(wrong).flatten().tolist():
                    q, d = batch[r // next_n], r % next_n
                    problems.append(f"{label}: request {q} ({names[q]}) draft {d} in a batch of {len(batch)} "
                                    f"requests, row {r}: not the canonical answer in some of {REPEATS} runs")
                for r in range(last.shape[0]):  # the last run of each row, across batches
                    key = (int(batch[r // next_n]), r % next_n)
                    if key not in first:
                        first[key] = last[r]
                    elif not np.array_equal(first[key], last[r]):
                        problems.append(f"{label}: request {key[0]} ({names[key[0]]}) draft {key[1]} differs "
                                        f"across batches (a batch of {len(batch)} requests, row {r})")
    assert not problems, _report(problems, f"{'block' if block_mode else 'token'} mode next_n={next_n}")
