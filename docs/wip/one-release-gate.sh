#!/usr/bin/env bash
# Session 55: the whole gate of one release a CTA (then docs/wip/one-release.patch on main,
# landed in session 56 as bundle 16d35fc01007; docs/evidence/16d35fc01007/) in parts, each
# on whatever GPU comes; every build forced (the PTX of every cluster build changed). A
# template for the next kernel change's gate.
#   1 (carry dist build/planted.tar.xz; ~430 s; bench/results and docs/evidence moved aside):
#     the sanitizers on every build beside the AOT conformance of every build and of the
#     policy's, and beside the two planted bugs' conformance (docs/wip/one-release-planted.patch:
#     no release at all; one-release-nosync-planted.patch: no CTA barrier before warp 0's
#     release), each on every build for at most 100 s.
#   2 (carry dist; ~370 s): the soak, alone; then the GPU tests.
#   dsl (carry .dsl/one, docs/wip/dsl-one.sh; bench/results, docs/evidence and
#     bench/NOTES.md moved aside; ~480 s): the JIT conformance of every build, then the PDL
#     and invariance tests.
# build/planted.tar.xz (1.9 MB): build/P and build/Q, slim copies (docs/wip/README.md's tar
# line) of two worktrees of main (one-release.patch then applied) with one-release-planted.patch
# (P) or one-release-nosync-planted.patch (Q) applied, each with its traced sm_90a library
# (`cd /tmp && PYTHONPATH=/tmp/pkgP python -m decode_topk.kernel.aot --arch sm_90a --work
# /tmp/build/aot_P`, /tmp/pkgP/decode_topk a link to the worktree): `tar cJf
# build/planted.tar.xz build/P build/Q`. Part 1a: part 1 cut down to a short device
# budget.
set -u
part=${1:?usage: one-release-gate.sh 1|1a|2|dsl}
nvidia-smi --query-gpu=name --format=csv,noheader > "$OUT/device.txt"
cat "$OUT/device.txt"
planted() {  # the two planted bugs' AOT conformance on every build, one after the other, $1 s each
    tar xJf build/planted.tar.xz
    for X in P Q; do
        (cd build/$X && PYTHONPATH=$(bash .ci/pythonpath) timeout "$1" python3 -m decode_topk.conformance \
            --impl aot --level full --build all) > "$OUT/planted_$X.txt" 2>&1
        echo "planted $X: exit $?" >> "$OUT/planted_$X.txt"
    done
}
case "$part" in
1)
    bash conformance/h200_gate.sh sanitizers > "$OUT/sanitizers_gate.txt" 2>&1 &
    planted 100 &
    bash conformance/h200_gate.sh aot > "$OUT/aot_gate.txt" 2>&1
    wait ;;
1a)  # part 1 less the sanitizers (a short device budget), bounded by T seconds (default 330)
    planted 100 &
    timeout "${T:-330}" bash conformance/h200_gate.sh aot > "$OUT/aot_gate.txt" 2>&1
    echo "aot: exit $?" >> "$OUT/aot_gate.txt"
    wait ;;
dsl)
    export DSL_INSTALL=.dsl/one/install.sh
    (source "$DSL_INSTALL" && python3 -c "import cutlass; print('DSL', cutlass.__file__)") \
        > "$OUT/dsl_install.txt" 2>&1
    bash conformance/h200_gate.sh dsl-jit > "$OUT/dsl_jit_gate.txt" 2>&1
    bash conformance/h200_gate.sh dsl-tests > "$OUT/dsl_tests_gate.txt" 2>&1 ;;
2)
    bash conformance/h200_gate.sh soak > "$OUT/soak_gate.txt" 2>&1
    bash conformance/h200_gate.sh gpu-tests > "$OUT/gpu_tests_gate.txt" 2>&1 ;;
esac
mkdir -p "$OUT/ev" && tar czf "$OUT/ev$part.tgz" -C "$OUT" ev && rm -rf "$OUT/ev"
for f in "$OUT"/planted_*.txt; do [ -f "$f" ] && { echo "== $(basename $f)"; echo "cases $(awk '$6 ~ /^[0-9]+$/' "$f" | wc -l), with violations $(awk '$6 ~ /^[0-9]+$/ && $6 > 0' "$f" | wc -l)"; grep -E "total:|FAIL|Error" "$f" | tail -n 3; tail -n 1 "$f"; }; done
for f in "$OUT"/*_gate.txt; do echo "== $(basename $f)"; tail -n 6 "$f"; done
