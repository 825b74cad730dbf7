"""Strict mode in the suite (SPEC.md 1.4, issue 16): an implementation whose record claims
'canonical' is judged against the canonical answer slot for slot (checker.check(...,
strict=True), reason 'not-canonical'), one claiming 'contract' by the contract alone;
run_suite(strict=...) and the CLI's --strict / --no-strict override the claim, and the
summary's `judged:` line says which mode the run was judged in."""

import io
import sys
import textwrap

import numpy as np
import pytest

from decode_topk.conformance import __main__ as cli
from decode_topk.conformance import registry, run_suite
from decode_topk.kernel.policy import BUILDS
from decode_topk.reference import decode_topk_reference

TIED_CASE = "four-values"  # ties at K in every row: the reference's default order is not canonical



def _run(name, **kwargs):
    stream = io.StringIO()
    result = run_suite(name, "ci", case_filter=kwargs.pop("case_filter", TIED_CASE), stream=stream, **kwargs)
    return result, stream.getvalue()


def _reasons(result):
    return {v.reason for run in result.runs for v in run.violations}


def test_claims_and_the_default_mode():
    assert registry.CLAIMS == ("contract", "canonical")
    claims = {name: registry.record(name).claims for name in registry.names()}
    assert claims == {"reference": "contract", "reference-canonical": "canonical", "model": "canonical",
                      "aot": "canonical", "jit": "canonical"}
    assert {name: registry.record(name).strict for name in claims} == {
        name: claim == "canonical" for name, claim in claims.items()}


def test_reference_canonical_passes_strict_mode():
    result, text = _run("reference-canonical")
    assert result.ok and result.strict and result.claims == "canonical", text[-2000:]
    assert ("judged: strict (the canonical answer of SPEC.md 1.4 slot for slot: ties by lowest index, ascending "
            "order); reference-canonical claims 'canonical'") in text


def test_reference_is_judged_by_the_contract_unless_told_otherwise():
    result, text = _run("reference")
    assert result.ok and not result.strict, text[-2000:]
    assert "judged: contract (SPEC.md 1.4: any tie choice, any order); reference claims 'contract'" in text
    strict, text = _run("reference", strict=True)
    assert not strict.ok and strict.strict and _reasons(strict) == {"not-canonical"}
    assert "reference claims 'contract'; overridden by --strict" in text
    assert "[not-canonical] slot " in text


def test_no_strict_overrides_a_canonical_claim(scratch):
    """An implementation that claims the canonical answer but writes the contract's any
    order fails strictly, and passes with strict=False."""
    registry.register("claims-canonical-for-test", lambda: decode_topk_reference, claims="canonical")
    scratch.append("claims-canonical-for-test")
    result, _ = _run("claims-canonical-for-test")
    assert not result.ok and _reasons(result) == {"not-canonical"}
    relaxed, text = _run("claims-canonical-for-test", strict=False)
    assert relaxed.ok and not relaxed.strict
    assert "claims-canonical-for-test claims 'canonical'; overridden by --no-strict" in text


def test_strict_mode_reaches_implementations_with_a_trace(scratch):
    """run_case's traced branch judges strictly too: the model with its long rows' slots
    reversed meets the contract and fails strict mode (and only that)."""
    from decode_topk.reference.model import simulate

    def reversed_model(logits_bits, lengths, k, block_mode, build=None):
        out, trace = simulate(logits_bits, lengths, k, block_mode, build=build)
        long = trace[:, 0] != 0  # path 0 is short
        out[long] = out[long, ::-1]
        return out, trace

    registry.register("reversed-for-test", lambda: reversed_model, returns_trace=True, takes_build=True,
                      trace_oracle="invariants", claims="canonical")
    scratch.append("reversed-for-test")
    result, _ = _run("reversed-for-test", builds=["8x512x8"])
    assert "not-canonical" in _reasons(result)
    assert _run("reversed-for-test", builds=["8x512x8"], strict=False)[0].ok


# ---------------------------------------------------------------------------------------
# --impl pkg.module:attr declares its claim; the CLI's --strict / --no-strict
# ---------------------------------------------------------------------------------------
MODULE = '''
from decode_topk.reference import decode_topk_reference


def any_order(logits_bits, lengths, k, block_mode):
    return decode_topk_reference(logits_bits, lengths, k, block_mode)


def canonical(logits_bits, lengths, k, block_mode):
    return decode_topk_reference(logits_bits, lengths, k, block_mode, canonical=True)


canonical.claims = "canonical"


def overclaiming(logits_bits, lengths, k, block_mode):
    return any_order(logits_bits, lengths, k, block_mode)


overclaiming.claims = "canonical"


def misclaiming(logits_bits, lengths, k, block_mode):
    return any_order(logits_bits, lengths, k, block_mode)


misclaiming.claims = "sorted"
'''


@pytest.fixture
def vendored(tmp_path, monkeypatch):
    (tmp_path / "claiming_impls.py").write_text(textwrap.dedent(MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "claiming_impls"
    sys.modules.pop("claiming_impls", None)


def test_a_spec_defaults_to_the_contract_and_may_claim_canonical(scratch, vendored):
    assert registry.record(f"{vendored}:any_order").claims == "contract"
    assert registry.record(f"{vendored}:canonical").claims == "canonical"
    assert registry.record(f"{vendored}:overclaiming").strict


@pytest.mark.parametrize("attr, options, code, judged", [
    ("any_order", [], 0, "contract"),
    ("any_order", ["--strict"], 1, "strict"),
    ("canonical", [], 0, "strict"),
    ("overclaiming", [], 1, "strict"),
    ("overclaiming", ["--no-strict"], 0, "contract"),
])
def test_cli_judges_by_the_claim_or_the_option(scratch, vendored, capsys, attr, options, code, judged):
    assert cli.main(["--impl", f"{vendored}:{attr}", "--case", TIED_CASE] + options) == code
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if line.startswith("judged: "))
    assert line.startswith(f"judged: {judged} ") and f"{vendored}:{attr} claims" in line, line
    assert ("overridden" in line) == bool(options)
    if code:
        assert "[not-canonical]" in out


def test_a_bad_claim_is_one_line_and_exit_2(scratch, vendored, capsys):
    assert cli.main(["--impl", f"{vendored}:misclaiming"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "claims = 'sorted' is not one of ('contract', 'canonical')" in err


def test_strict_before_a_subcommand_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["--no-strict", "gen", "--out", str(tmp_path / "cases.npz")])
    assert exc.value.code == 2
    assert "--strict/--no-strict before `gen` belong to the suite run" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------
# Needs the canonical model (issue 16's model rewrite)
# ---------------------------------------------------------------------------------------
def test_the_model_is_judged_strictly_and_passes():
    """The model claims the canonical answer: on tied cases, every build, strict mode."""
    for case in ("four-values", "ties-across-ctas", "one-value", "mostly-neg-inf"):
        result, text = _run("model", case_filter=case, builds=list(BUILDS))
        assert result.strict and "judged: strict" in text
        assert result.ok, f"{case}: {text[-3000:]}"


def test_the_reference_canonical_answer_is_the_models():
    """Outputs equal bit for bit on a tied batch (the suite's judgement aside)."""
    from decode_topk.reference.model import simulate

    rng = np.random.default_rng(16)
    width = 40960
    bits = np.where(rng.random((6, width)) < 0.5, 0x3F80, 0x4000).astype(np.uint16)
    lengths = np.array([width, width - 1, 32769, 32768, 2049, 500], dtype=np.int32)
    for block_mode in (False, True):
        for build in (b for b in BUILDS if b.capacity_in(block_mode) >= width):
            out, _ = simulate(bits, lengths, 2048, block_mode, build=build)
            want = decode_topk_reference(bits, lengths, 2048, block_mode, canonical=True)
            np.testing.assert_array_equal(out, want, err_msg=f"{build.name} block={block_mode}")
