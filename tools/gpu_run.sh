#!/usr/bin/env bash
# GPU work on the H200 runner through the AOT library (no DSL there). Run at the repository
# root with .aot carried:   bash tools/gpu_run.sh [conformance|tests|bench|quick] [extra args]
#   conformance  tools/gpu_conformance.py: the 100,000-row batch on every build, the traced
#                variant against the model, then `python -m conformance --impl aot --level full
#                --build all` (about 9 minutes at most; --budget bounds it)
#   tests        pytest -m gpu (tests/test_aot_gpu.py: the ci suite through 'aot' + hand checks)
#   bench        bench/bench_decode_topk.py (the issue-4 table beside torch.topk)
#   quick        tests, then a 10,000-row batch without the suite
# Everything it writes goes to $OUT (default build/gpu); the last lines are a short table.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
OUT=${OUT:-build/gpu}
mkdir -p "$OUT"
what=${1:-conformance}
shift || true
"$PY" - <<'PY' 2>&1 | tee "$OUT/env.txt"
import torch, sys
print(sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda,
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else "NO GPU")
PY
case "$what" in
  conformance) "$PY" tools/gpu_conformance.py --out "$OUT" "$@" ;;
  tests) "$PY" -m pytest -q -m gpu tests/test_aot_gpu.py -rs "$@" 2>&1 | tee "$OUT/pytest_gpu.txt"; exit "${PIPESTATUS[0]}" ;;
  bench) "$PY" bench/bench_decode_topk.py --out "$OUT" "$@" ;;
  quick)
    "$PY" -m pytest -q -m gpu tests/test_aot_gpu.py -rs 2>&1 | tee "$OUT/pytest_gpu.txt"; rc=${PIPESTATUS[0]}
    "$PY" tools/gpu_conformance.py --out "$OUT" --rows 10000 --skip-suite "$@" || rc=1
    exit $rc ;;
  *) echo "unknown: $what (conformance|tests|bench|quick)"; exit 2 ;;
esac
