#!/usr/bin/env bash
# Session 55: one-release-top.patch (after one-release.patch: B0's arrive on a token-mode
# direct row and a streamed build's row after staging's bar.sync, one release a CTA) timed
# beside main and one-release. Carry build/armsR.tar.xz (main's 0fcb0c3171cf library as
# kernel/aot/sm_90a, .aot_sol, build/R = one-release; one-release.sh's header) and
# build/armsT.tar.xz (build/T: a slim copy of main + both patches with its untraced sm_90a
# library and .aot_sol). ~100 s.
set -u
tar xJf build/armsR.tar.xz && tar xJf build/armsT.tar.xz
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/device.txt"
PYTHONPATH=$(bash .ci/pythonpath) timeout 300 python3 bench/ab.py run --out "$OUT/ab" --rounds 3 main=. one=build/R top=build/T -- \
    --rows 1 8 32 64 --lengths 16384 32768 131072 1048576 --ks 512 2048 --data rho0.9 \
    --no-l2 --budget 30 > "$OUT/ab.txt" 2>&1
echo "ab: exit $?"
tar czf "$OUT/ab.tgz" -C "$OUT" ab && rm -rf "$OUT/ab"
sed -n '/^| data/,$p' "$OUT/ab.txt" | tail -n 45
