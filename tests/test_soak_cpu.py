"""conformance/soak.py's CPU paths, without a GPU: its options (--strict / --no-strict, the
plan), the canonical answer it computes with torch (against the checker's
contract.canonical_answer and the reference's canonical=True), the count of rows that differ
from it, the totals and the exit status, and one whole batch (soak_batch) with a CPU
stand-in for the AOT library."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from decode_topk.conformance import contract, gpu_check, registry, soak  # noqa: E402
from decode_topk.conformance.gpu_impl import POISON  # noqa: E402
from decode_topk.kernel import policy  # noqa: E402
from decode_topk.reference.topk import decode_topk_reference  # noqa: E402


def _bits(logits):
    return logits.contiguous().view(torch.int16).numpy().view(np.uint16)


def test_options():
    args = soak.parse_args([])
    assert args.strict is True and registry.record("aot").claims == "canonical"  # the default: the claim
    assert args.plan == list(soak.DEFAULT_PLAN) and args.budget == 540.0
    assert soak.parse_args(["--no-strict"]).strict is False
    assert soak.parse_args(["--strict", "--plan", "4096:10x2"]).strict is True
    with pytest.raises(SystemExit) as exc:
        soak.parse_args(["--plan", "4096"])
    assert exc.value.code == 2


def test_the_default_follows_the_kernel_record(monkeypatch):
    contract_only = registry.Record("aot", lambda: None, claims="contract")
    monkeypatch.setattr(registry, "record", lambda name: contract_only)
    assert soak.parse_args([]).strict is False


def test_main_without_a_gpu_is_one_line_and_exit_2(capsys):
    from decode_topk.kernel import aot_loader

    if aot_loader.no_cuda_device_reason() is None:
        pytest.skip("a CUDA device is present")
    assert soak.main(["--no-strict", "--plan", "4096:10"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("decode_topk.conformance.soak runs on a CUDA GPU: ") and len(err.splitlines()) == 1


def test_main_with_a_stale_library_is_one_line_and_exit_2(capsys, monkeypatch):
    from decode_topk.kernel import aot_loader

    def stale():
        raise aot_loader.StaleLibraryError("library built from kernel source 000000000000, this is 111111111111")

    monkeypatch.setattr(aot_loader, "no_cuda_device_reason", lambda: None)  # pretend a GPU
    monkeypatch.setattr(aot_loader, "library_info", stale)
    assert soak.main(["--plan", "4096:10"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("decode_topk.conformance.soak needs the AOT library of this kernel source: ")
    assert "000000000000" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("width", [4136, 20000])
def test_canonical_answer_is_the_checkers(width):
    """Random, tied, -inf, NaN rows and every boundary length (gpu_check.make_batch), every
    k and mode, chunked: equal to contract.canonical_answer row by row and to the
    reference's canonical=True."""
    logits, lengths, _ = gpu_check.make_batch(40, width, seed=width, device="cpu", chunk=8)
    bits, lens = _bits(logits), lengths.numpy()
    for k in policy.KS:
        for block_mode in (False, True):
            got = soak.canonical_answer(logits, lengths, k, block_mode, chunk=7).numpy()
            want = np.stack([contract.canonical_answer(contract.element_keys(bits[r], lens[r], block_mode), k,
                                                       block_mode) for r in range(len(lens))])
            np.testing.assert_array_equal(got, want, err_msg=f"k={k} block={block_mode}")
            np.testing.assert_array_equal(got, decode_topk_reference(bits, lens, k, block_mode, canonical=True))


def test_canonical_answer_on_crafted_rows():
    """Every logit tied; K = -inf in block mode (-1 in its slot); an all -inf row; short
    rows, n = k and n = k + 1."""
    k, width = 512, 8 * 1024
    rows = np.full((6, width), 0x3F80, dtype=np.uint16)
    rows[1] = 0xFF80
    rows[1, :40] = 0x4000  # 5 finite blocks, then -inf blocks
    rows[2] = 0xFF80
    lengths = np.array([width, width, width, 511, 512, 513], dtype=np.int32)
    logits = torch.from_numpy(rows.view(np.int16)).view(torch.bfloat16)
    for block_mode in (False, True):
        got = soak.canonical_answer(logits, torch.from_numpy(lengths), k, block_mode).numpy()
        np.testing.assert_array_equal(got, decode_topk_reference(rows, lengths, k, block_mode, canonical=True))
    block = soak.canonical_answer(logits, torch.from_numpy(lengths), k, True).numpy()
    assert block[1, :5].tolist() == [0, 1, 2, 3, 4] and (block[1, 5:-1] == -1).all() and block[1, -1] == 1023
    assert (soak.canonical_answer(logits, torch.from_numpy(lengths), k, False).numpy()[0] == np.arange(k)).all()


def test_count_not_canonical():
    logits, lengths, _ = gpu_check.make_batch(30, 8192, seed=5, device="cpu", chunk=8)
    bits, lens = _bits(logits), lengths.numpy()
    want = soak.canonical_answer(logits, lengths, 512, False)
    assert soak.count_not_canonical(want.clone(), want) == (0, [])
    default = torch.from_numpy(decode_topk_reference(bits, lens, 512, False))  # descending key: not canonical
    differ = np.flatnonzero((default.numpy() != want.numpy()).any(axis=1))
    assert differ.size
    count, first = soak.count_not_canonical(default, want, chunk=4, first=3)
    assert count == differ.size and first == differ[:3].tolist()
    poisoned = want.clone()
    poisoned[7, 100] = POISON
    assert soak.count_not_canonical(poisoned, want) == (1, [7])


def test_totals_and_exit_status():
    def results(violating, differ, error=False):
        batch = {"rows": 10, "runs": {"a": {}, "b": {}}, "violating_rows": violating, "not_canonical_rows": differ}
        batches = [batch] + ([{"rows": 5, "error": "boom"}] if error else [])
        return {"batches": batches, "seconds": 1.0}

    for strict, (violating, differ, error), status in [
            (True, (0, 0, False), 0), (True, (0, 3, False), 1), (False, (0, 3, False), 0),
            (False, (1, 0, False), 1), (False, (0, 0, True), 1)]:
        r = results(violating, differ, error)
        assert soak.summarize(r, strict) == status, (strict, violating, differ, error)
        assert (r["rows"], r["row_runs"], r["not_canonical_rows"], r["strict"]) == (10, 20, differ, strict)
        line = soak.summary_line(r)
        assert f"rows differing from canonical: {differ} ({'strict' if strict else 'not strict'}" in line


def _reference_launch(canonical):
    """A launch_all stand-in on CPU tensors: the reference (canonical or its default
    order) writes out."""
    def launch(logits, lengths, k, out, block_mode, build):
        o = decode_topk_reference(_bits(logits), lengths.numpy(), k, block_mode, canonical=canonical)
        out.copy_(torch.from_numpy(o))

    return launch


def test_soak_batch_counts_rows_differing_from_canonical():
    runs = soak.soak_batch(4136, 24, seed=3, device="cpu", launch=_reference_launch(True))
    # the policy's build and every build that holds the width, in each mode (the register
    # build: token rows only)
    assert len(runs) == len(policy.KS) * sum(1 + sum(4136 <= b.capacity_in(m) for b in policy.BUILDS)
                                             for m in (False, True))
    assert all(r["violating_rows"] == 0 and r["not_canonical_rows"] == 0 for r in runs.values()), runs
    runs = soak.soak_batch(4136, 24, seed=3, device="cpu", launch=_reference_launch(False))
    assert all(r["violating_rows"] == 0 for r in runs.values())  # the contract holds
    assert sum(r["not_canonical_rows"] for r in runs.values()) > 0
    assert all(len(r["first_not_canonical"]) == min(5, r["not_canonical_rows"]) for r in runs.values())


def test_soak_batch_on_the_model_is_canonical():
    """Needs the canonical model (issue 16): the model stands in for the kernel, on the build
    the soak forces (the policy's for None)."""
    from decode_topk.reference.model import simulate

    def launch(logits, lengths, k, out, block_mode, build):
        o, _ = simulate(_bits(logits), lengths.numpy(), k, block_mode, build=build)
        out.copy_(torch.from_numpy(o))

    runs = soak.soak_batch(33024, 16, seed=4, device="cpu", launch=launch)
    bad = {label: r for label, r in runs.items() if r["violating_rows"] or r["not_canonical_rows"]}
    assert not bad, bad
