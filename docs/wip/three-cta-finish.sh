#!/usr/bin/env bash
# The rest of the 3x512x4 arm's gate, and its grid, after session 49's call 1 of
# docs/wip/three-cta-gate.sh (docs/evidence/0fcb0c3171cf/ on branch three-cta). Two device
# calls, each on any machine and in either order (no warm machine needed between them).
# Build here on the branch first: `python -m decode_topk.kernel.aot --arch sm_90a` (traces,
# ~3.5 min), `pip wheel . --no-deps -w dist`, .dsl/one (docs/wip/dsl-one.sh), .peers
# (bench/NOTES.md, top).
#   soak (carry dist .aot_sol .aot_floor .peers; ~250 s, ~480 s on an H200):
#        bash docs/wip/three-cta-finish.sh soak
#        the soak on the wheel; then, on an H200 only, the grid and targets with the peers.
#   dsl  (carry .dsl/one; ~350 s; the upload holds 64 MiB, so move bench/results,
#        docs/evidence and bench/NOTES.md aside for the call): bash docs/wip/three-cta-finish.sh dsl
#        the DSL in one upload; the JIT conformance of 3x512x4, then the PDL and invariance tests.
# T (seconds, default 560) bounds each call's work so that its files are packed and come back.
set -u
part=${1:?usage: three-cta-finish.sh soak|dsl}
export GATE_BUILD=3x512x4 DSL_INSTALL=.dsl/one/install.sh
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/device_$part.txt
inner() {
    if [ "$part" = dsl ]; then
        (source $DSL_INSTALL && python3 -c "import cutlass; print('DSL', cutlass.__file__)") \
            > $OUT/dsl_install.txt 2>&1
        bash conformance/h200_gate.sh dsl-jit > $OUT/dsl_jit_gate.txt 2>&1
        bash conformance/h200_gate.sh dsl-tests > $OUT/dsl_tests_gate.txt 2>&1
        return
    fi
    bash conformance/h200_gate.sh soak > $OUT/soak_gate.txt 2>&1
    case "$(cat $OUT/device_$part.txt)" in *H200*) ;; *) return 0 ;; esac
    python3 -m pip install -q --no-deps --no-index --target /tmp/site-grid dist/*.whl
    PYTHONPATH=/tmp/site-grid python3 bench/grid.py run --peers .peers --passes 2 --budget 190 \
        --out $OUT/r/grid > $OUT/grid.txt 2>&1
    PYTHONPATH=/tmp/site-grid python3 bench/grid.py run --targets --data rho0.9 gaussian \
        --peers .peers --passes 2 --out $OUT/r/targets >> $OUT/grid.txt 2>&1
}
export -f inner; export part
timeout "${T:-560}" bash -c inner; echo "$part: exit $?"
# at most 8 files come back: everything but the summaries in one archive
mkdir -p $OUT/r $OUT/ev && tar czf $OUT/$part.tgz -C $OUT r ev && rm -rf $OUT/r $OUT/ev
cat $OUT/dsl_install.txt 2>/dev/null
for f in $OUT/*_gate.txt; do echo "== $(basename $f)"; tail -n 4 "$f"; done
[ -f $OUT/grid.txt ] && tail -n 6 $OUT/grid.txt
