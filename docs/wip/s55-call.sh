#!/usr/bin/env bash
# Session 55: one call that does what the GPU it lands on can. On an H200: the grid and the
# targets with the peers (three-cta-gate.sh grid; carry dist .aot_sol .aot_floor .peers).
# On an H100: one-release's A/B again, four rounds over the cluster builds' points
# (carry build/armsR.tar.xz too; its header). ~450 s either way.
set -u
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/device0.txt"
if grep -q H200 "$OUT/device0.txt"; then
    T=${T:-450} bash docs/wip/three-cta-gate.sh grid
    exit
fi
tar xJf build/armsR.tar.xz
pp() { (cd "$1" && bash .ci/pythonpath); }
PYTHONPATH=$(pp .) timeout 420 python3 bench/ab.py run --out "$OUT/ab" --rounds 4 main=. m2=. one=build/R -- \
    --rows 1 8 64 --lengths 32768 131072 524288 1048576 --ks 512 2048 --data rho0.9 \
    --no-l2 --budget 30 > "$OUT/ab.txt" 2>&1
echo "ab: exit $?"
tar czf "$OUT/ab.tgz" -C "$OUT" ab && rm -rf "$OUT/ab"
sed -n '/^| data/,$p' "$OUT/ab.txt" | tail -n 60
