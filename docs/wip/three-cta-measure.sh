#!/usr/bin/env bash
# The 3x512x4 arm's measurement (docs/design/three_cta.md): the grid's own rows' fallbacks
# on 2x512x4 / 3x512x4 / 4x512x4 (docs/wip/three-cta-traces.py), then every build forced
# at 32-39 token rows (the rule's rows: past 4x512x4's 30 resident clusters, within
# 3x512x4's 39 on the H200). Build here, on branch three-cta: the arm's wheel in dist/
# (`python -m decode_topk.kernel.aot --arch sm_90a` and `pip wheel . --no-deps -w dist`)
# and .aot_sol with 3x512x4 (`python -m decode_topk.kernel.aot --module
# bench/speed_of_light.py --out .aot_sol --arch sm_90a`); carry dist, .aot_sol, .aot_floor.
# ROWS, LENGTHS, BUDGET (the environment) narrow the forced-build run (defaults: 32 36 39 rows,
# 196,608-1,048,576 logits, 170 s).
set -u
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/device.txt
mkdir -p $OUT/r
rm -rf /tmp/site-grid; python3 -m pip install -q --no-deps --no-index --target /tmp/site-grid dist/*.whl
export PYTHONPATH=/tmp/site-grid
timeout 45 python3 docs/wip/three-cta-traces.py > $OUT/r/traces.txt 2>&1; echo traces rc $?; cat $OUT/r/traces.txt | tail -40
timeout 200 python3 bench/grid.py run --builds --rows ${ROWS:-32 36 39} --lengths ${LENGTHS:-196608 262144 393216 524288 786432 1048576} --ks 512 2048 --data rho0.9 gaussian --no-l2 --passes 2 --budget ${BUDGET:-170} --out $OUT/r/b3 > $OUT/r/b3.log 2>&1; echo b3 rc $?
tar czf $OUT/r.tgz -C $OUT r
tail -n 2 $OUT/r/b3.log
python3 - "$OUT/r/b3/grid.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for p in d["points"]:
    if "dtk_us" not in p:
        print(p); continue
    b = dict(p.get("builds_us") or {}); b[p["build"]] = p["dtk_us"]
    best = min(b, key=b.get)
    keep = {n: v for n, v in sorted(b.items()) if n in ("2x512x4", "3x512x4", "4x512x4", "8x512x4", "4x1024x8", "8x512x16", "16x512x16", "1x512x4")}
    print(p["data"], p["rows"], p["length"], p["k"], p["mode"], p["build"], p["dtk_us"], "best", best, b[best], " ".join(f"{k}:{v}" for k, v in keep.items()))
PY
