"""Judge outputs made anywhere: `gen` writes the inputs, any subject computes the outputs,
`ver` checks them (Berkeley TestFloat's testfloat_gen | subject | testfloat_ver).

    python -m decode_topk.conformance gen --level ci [--case SUBSTR] --out cases.npz
    python -m decode_topk.conformance out cases.npz --impl NAME [--build CxTxV] --out outputs.npz
    python -m decode_topk.conformance ver cases.npz outputs.npz [--strict]

`out` is one subject: a registered implementation or pkg.module:attr run on every input.
`ver` judges with the suite's checker (suite.judge) and prints the suite's table, reasons
and repro lines; it exits 1 on any violation, 2 on a malformed file (the problem named).
It judges by the contract (any tie choice, any order), or with `--strict` against the
canonical answer of SPEC.md 1.4 (the outputs of a build that claims it, e.g. DecodeTopK
vendored into an engine).

cases.npz (numpy.savez_compressed; load with np.load(path) -- no pickles):
| key | dtype, shape | meaning |
| --- | --- | --- |
| `format` | str, () | 'decode_topk.cases/1' |
| `level`, `filter` | str, () | the level and the --case filter ('' for none) it was made with |
| `runs` | str, [R] | the run ids, '<case>.k<k>.<token or block>', e.g. 'needles.k512.token' |
| `run_case` | str, [R] | each run's case name |
| `run_seed` | int64, [R] | each run's case seed (the case regenerates from it) |
| `run_k` | int32, [R] | each run's k |
| `run_block_mode` | bool, [R] | each run's mode (True: block) |
| `logits_bits.<case>` | uint16, [rows, width] | the case's BF16 bit patterns (shared by its runs) |
| `lengths.<case>` | int32, [rows] | the case's row lengths |

outputs.npz (np.savez or np.savez_compressed): for every run id of cases.npz one int32
[rows, k] array keyed by the run id, nothing else. A subject in another language can write
it as a zip of .npy files named '<run id>.npy'. Making it from Python, e.g.:

    cases = np.load("cases.npz")
    outputs = {}
    for run, case, k, mode in zip(cases["runs"], cases["run_case"], cases["run_k"], cases["run_block_mode"]):
        outputs[run] = my_topk(cases["logits_bits." + case], cases["lengths." + case], int(k), bool(mode))
    np.savez("outputs.npz", **outputs)
"""

import sys
import time
from dataclasses import dataclass

import numpy as np

from decode_topk.kernel.policy import Build

from . import registry
from .suite import (SHOWN_VIOLATIONS, SuiteResult, Silent, case_runs, header, judge, print_summary, row_line,
                    select_cases)

FORMAT = "decode_topk.cases/1"
_RUN_FIELDS = ("runs", "run_case", "run_seed", "run_k", "run_block_mode")
_RUN_DTYPES = {"run_seed": np.int64, "run_k": np.int32, "run_block_mode": np.bool_}


class Malformed(ValueError):
    """A cases or outputs file that does not follow the layout (the message names the file
    and the problem); the CLI exits 2."""


def run_id(case_name, k, block_mode):
    """The key of one (case, k, mode) run in cases.npz and outputs.npz."""
    return f"{case_name}.k{k}.{'block' if block_mode else 'token'}"


@dataclass(frozen=True)
class Run:
    """One input of cases.npz."""

    id: str
    case: str
    seed: int
    k: int
    block_mode: bool
    logits_bits: np.ndarray
    lengths: np.ndarray


def gen(path, level="ci", case_filter=None):
    """Write every (case, k, mode) input of `level` whose case name contains `case_filter`
    to `path` (the layout of the module docstring); returns the number of runs."""
    selected = select_cases(level, case_filter)
    arrays = {"format": np.array(FORMAT), "level": np.array(level), "filter": np.array(case_filter or "")}
    runs = {name: [] for name in _RUN_FIELDS}
    for case in selected:
        arrays["logits_bits." + case.name], arrays["lengths." + case.name] = case.generate()
        for k, block_mode in case_runs(case):
            for name, value in zip(_RUN_FIELDS, (run_id(case.name, k, block_mode), case.name, case.seed, k,
                                                 block_mode)):
                runs[name].append(value)
    arrays.update({name: np.array(values, dtype=_RUN_DTYPES.get(name, str)) for name, values in runs.items()})
    with open(path, "wb") as f:  # a file object: savez would append .npz to a name without it
        np.savez_compressed(f, **arrays)
    return len(runs["runs"])


def _load(path, what):
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:  # missing, not a zip of .npy, or object arrays
        raise Malformed(f"{what} {path}: cannot be read as .npz: {exc}") from None


def _array(data, key, path, dtype, ndim):
    if key not in data.files:
        raise Malformed(f"cases {path}: no array {key!r}")
    try:
        value = data[key]
    except ValueError as exc:  # an object array (allow_pickle=False)
        raise Malformed(f"cases {path}: array {key!r}: {exc}") from None
    ok_dtype = value.dtype.kind == "U" if dtype is str else value.dtype == dtype
    if not ok_dtype or value.ndim != ndim:
        want = "str" if dtype is str else np.dtype(dtype).name
        raise Malformed(f"cases {path}: array {key!r} is {value.dtype} with {value.ndim} dimensions, "
                        f"expected {want} with {ndim}")
    return value


def load_cases(path):
    """(level, [Run]) of a cases file; Malformed names what is wrong."""
    data = _load(path, "cases")
    version = str(_array(data, "format", path, str, 0))
    if version != FORMAT:
        raise Malformed(f"cases {path}: format {version!r}, expected {FORMAT!r}")
    level = str(_array(data, "level", path, str, 0))
    columns = [_array(data, name, path, _RUN_DTYPES.get(name, str), 1) for name in _RUN_FIELDS]
    if len({c.size for c in columns}) != 1:
        raise Malformed(f"cases {path}: the run arrays {_RUN_FIELDS} differ in length")
    inputs, runs = {}, []
    for rid, case, seed, k, block_mode in zip(*columns):
        case = str(case)
        if case not in inputs:
            inputs[case] = (_array(data, "logits_bits." + case, path, np.uint16, 2),
                            _array(data, "lengths." + case, path, np.int32, 1))
        runs.append(Run(str(rid), case, int(seed), int(k), bool(block_mode), *inputs[case]))
    if len({run.id for run in runs}) != len(runs):
        raise Malformed(f"cases {path}: a run id appears twice")
    return level, runs


def load_outputs(path, runs):
    """{run id: out} of an outputs file, each checked to be int32 [rows, k] for its run;
    Malformed names a missing run, an unknown key, a wrong dtype or shape."""
    data = _load(path, "outputs")
    ids = {run.id for run in runs}
    unknown = sorted(set(data.files) - ids)
    if unknown:
        raise Malformed(f"outputs {path}: {len(unknown)} arrays are no run of the cases file, first {unknown[0]!r}")
    outputs = {}
    for run in runs:
        if run.id not in data.files:
            raise Malformed(f"outputs {path}: no array for run {run.id!r}")
        try:
            out = data[run.id]
        except ValueError as exc:  # an object array (allow_pickle=False)
            raise Malformed(f"outputs {path}: run {run.id!r}: {exc}") from None
        want = (run.logits_bits.shape[0], run.k)
        if out.dtype != np.int32 or out.shape != want:
            raise Malformed(f"outputs {path}: run {run.id!r} is {out.dtype} {list(out.shape)}, expected int32 "
                            f"{list(want)}")
        outputs[run.id] = out
    return outputs


def produce(cases_path, impl_name, out_path, build=None, stream=sys.stderr):
    """Run implementation `impl_name` on every input of `cases_path` and write its outputs
    to `out_path` (the outputs layout); a trace is dropped. A run the implementation fails
    on (an exception) is named on `stream` and left out, so `ver` reports it missing.
    Returns the number of runs left out."""
    _, runs = load_cases(cases_path)
    record = registry.record(impl_name)
    keyword = {}
    if build is not None:
        record.require_build()
        keyword["build"] = Build.parse(build)
    impl = registry.get(impl_name)
    outputs, failed = {}, 0
    for run in runs:
        try:
            result = impl(run.logits_bits.copy(), run.lengths.copy(), run.k, run.block_mode, **keyword)
        except Exception as exc:  # one failing run should not hide the others' outputs
            failed += 1
            print(f"run {run.id}: {type(exc).__name__}: {exc}", file=stream)
            continue
        outputs[run.id] = result[0] if record.returns_trace else result
    with open(out_path, "wb") as f:
        np.savez(f, **outputs)
    return failed


def verify(cases_path, outputs_path, stream=sys.stdout, shown=SHOWN_VIOLATIONS, strict=False):
    """Judge every output of `outputs_path` against its input in `cases_path` with the
    suite's checker (strict: against the canonical answer too); print the suite's table
    and summary to `stream` (None: silent) and return the SuiteResult. Raises Malformed
    (before judging anything) on a bad file."""
    stream = stream if stream is not None else Silent()
    level, runs = load_cases(cases_path)
    outputs = load_outputs(outputs_path, runs)
    result = SuiteResult(str(outputs_path), level, strict=bool(strict))
    start = time.perf_counter()
    print(header(False), file=stream)
    for run in runs:
        begin = time.perf_counter()
        judged = judge(run.case, run.seed, run.logits_bits, run.lengths, run.k, run.block_mode, outputs[run.id],
                       strict=strict)
        judged.seconds = time.perf_counter() - begin
        result.runs.append(judged)
        print(row_line(judged), file=stream, flush=True)
    result.seconds = time.perf_counter() - start
    print_summary(result, stream, shown)
    return result
