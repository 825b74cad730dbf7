"""Time several checkouts' AOT libraries against each other, in alternation, on the same
grid points: the A/B of a kernel change before its gate.

    python bench/ab.py run --out $OUT LABEL=DIR [LABEL=DIR ...] [--rounds 2] -- GRID_RUN_ARGS...
    python bench/ab.py compare FILE.json [FILE.json ...]

`run` (the GPU machine): for each round, for each checkout DIR in the order given (the
order turns each round, so no library always runs first), `bench/grid.py run` of that
checkout with that checkout on PYTHONPATH (`.ci/pythonpath`), so each times its own
`kernel/aot/<arch>` library with its own policy; every point's output is checked exactly
before it is timed (grid.py). Each run writes `OUT/grid_<LABEL>_<round>.json`; `run` then
prints the comparison. Each checkout needs its library and the floors' (`.aot_sol`,
`.aot_floor`): a `git worktree` of the base commit with its own build, carried to the
device beside this one (docs/wip/README.md).

`compare`: per point (data, mode, rows, length, k), each label's median DecodeTopK time over
its rounds, its build, and its ratio to the first label; then per label the median and the
range of those ratios and the points where it is 3% or more slower or faster. Exits 1 if
any run recorded a violation.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path


def point_key(p):
    return (p["data"], p["mode"], p["rows"], p["length"], p["k"])


def load(files):
    """{label: {point: [records]}} from grid_<LABEL>_<round>.json files."""
    runs, gpus = {}, {}
    for f in files:
        stem = Path(f).stem  # grid_<label>_<round>
        label = stem[len("grid_"):].rsplit("_", 1)[0]
        data = json.loads(Path(f).read_text())
        gpus.setdefault(data.get("gpu"), f)
        for p in data["points"]:
            runs.setdefault(label, {}).setdefault(point_key(p), []).append(p)
    if len(gpus) > 1:  # an A/B compares arms timed on one GPU, never an H100's times with an H200's
        raise ValueError("ab.py compare: runs from different GPUs: "
                         + ", ".join(f"{gpu!r} ({f})" for gpu, f in gpus.items()))
    return runs


def compare(files, out=None):
    out = out or sys.stdout
    runs = load(files)
    labels = list(runs)
    base = labels[0]
    violations = sum(p.get("violations", 0) for label in runs for recs in runs[label].values() for p in recs)
    ratios = {label: [] for label in labels[1:]}
    print("| data | mode | rows | length | k | " + " | ".join(f"{label} build | {label} us" for label in labels)
          + " | " + " | ".join(f"{label} / {base}" for label in labels[1:]) + " |", file=out)
    print("|---" * (5 + 2 * len(labels) + len(labels) - 1) + "|", file=out)
    for key in sorted(runs[base], key=lambda k: (k[1], k[0], k[3], k[2], k[4])):
        cells, times = [], {}
        for label in labels:
            recs = [p for p in runs[label].get(key, []) if p.get("dtk_us") is not None]
            if not recs:
                cells += ["-", "-"]
                continue
            times[label] = statistics.median(p["dtk_us"] for p in recs)
            cells += [recs[0].get("build", "?"), f"{times[label]:.2f}"]
        row = []
        for label in labels[1:]:
            if label in times and base in times:
                r = times[label] / times[base]
                ratios[label].append((r, key))
                row.append(f"{r:.3f}")
            else:
                row.append("-")
        print("| " + " | ".join(str(x) for x in key) + " | " + " | ".join(cells) + " | " + " | ".join(row) + " |",
              file=out)
    for label, rs in ratios.items():
        if not rs:
            continue
        values = sorted(r for r, _ in rs)
        slower = [f"{k[0]} {k[1]} {k[2]}x{k[3]} k{k[4]} {r:.3f}" for r, k in rs if r >= 1.03]
        faster = sum(1 for r, _ in rs if r <= 0.97)
        print(f"\n{label} / {base}: median {statistics.median(values):.3f}, best {values[0]:.3f}, worst "
              f"{values[-1]:.3f} over {len(values)} points; {faster} points 3% or more faster, {len(slower)} 3% or "
              f"more slower{': ' + ', '.join(slower) if slower else ''}", file=out)
    print(f"\nviolations recorded: {violations}", file=out)
    return 1 if violations else 0


def run(args, grid_args):
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    pairs = [spec.split("=", 1) for spec in args.checkouts]
    if any(len(p) != 2 or not p[0] or "_" in p[0] for p in pairs):
        raise SystemExit("ab.py run: each checkout is LABEL=DIR, the label without '_'")
    files = []
    for r in range(args.rounds):
        order = pairs[r % len(pairs):] + pairs[:r % len(pairs)]
        for label, folder in order:
            root = Path(folder).resolve()
            path = subprocess.run(["bash", str(root / ".ci" / "pythonpath")], check=True, capture_output=True,
                                  text=True).stdout.strip()
            tag = f"_{label}_{r}"
            cmd = [sys.executable, str(root / "bench" / "grid.py"), "run", "--out", str(out), "--tag", tag,
                   *grid_args]
            print(f"== round {r}: {label} ({root})", flush=True)
            subprocess.run(cmd, check=False, cwd=root, env={**os.environ, "PYTHONPATH": path})
            f = out / f"grid{tag}.json"
            if f.exists():
                files.append(f)
    return compare(files)


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    grid_args = []
    if "--" in argv:
        at = argv.index("--")
        argv, grid_args = argv[:at], argv[at + 1:]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="time each checkout's library in alternation (GPU)")
    r.add_argument("--out", required=True)
    r.add_argument("--rounds", type=int, default=2)
    r.add_argument("checkouts", nargs="+", metavar="LABEL=DIR")
    c = sub.add_parser("compare", help="the comparison of run's JSON files (any machine)")
    c.add_argument("files", nargs="+")
    args = parser.parse_args(argv)
    if args.command == "run":
        return run(args, grid_args)
    return compare(args.files)


if __name__ == "__main__":
    sys.exit(main())
