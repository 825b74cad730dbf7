#!/usr/bin/env bash
# The H200 gate of one kernel source in three device runs of at most 10 minutes (SPEC.md
# part 2's "whole H200 gate"; what session 5 ran by hand, docs/evidence/463fb39c209c).
#
#   wheel: build here `python -m decode_topk.kernel.aot --arch sm_90a sm_100a && python -m
#          pip wheel . --no-deps -w dist`, then on the device (carry ["dist"]):
#          bash conformance/h200_gate.sh wheel
#          installs the wheel into an empty folder (no DSL) and runs, judged strict: the full
#          conformance on every build and on the policy's, the GPU tests and the soak
#          (>= 10^6 rows: its budget lets the plan's first six batches run at ten builds)
#          (~7 min at ten builds).
#   sanitizers: the same wheel, the three compute-sanitizer tools on every build (racecheck
#          alone is ~3 s a launch, ~100 launches at eight builds: its own run, ~6 min).
#   dsl:   run 1 (carry [".dsl/a"]): bash .dsl/a/stage.sh; within 30 s, run 2 (carry
#          [".dsl/b"]): bash conformance/h200_gate.sh dsl
#          the JIT's full conformance on every build, the invariance and PDL tests (~4 min).
#          The sanitizers may run beside it in the same device run (carry [".dsl/b", "dist"]):
#          bash conformance/h200_gate.sh sanitizers > $OUT/sanitizers_gate.txt 2>&1 &
#          GATE_AFTER=$! bash conformance/h200_gate.sh dsl; wait
#          (neither times anything; the wheel mode's soak has a time budget, so it runs alone).
#   checks, soak: the wheel mode in two parts (checks: its conformance runs and GPU tests;
#          soak: the soak alone; checks itself in two, aot: the conformance runs, gpu-tests: the
#          GPU tests); dsl-jit, dsl-tests: the dsl mode's two steps apart. So the
#          whole gate in two device runs (session 14), after staging the DSL; the first
#          (carry [".dsl/b", "dist"], ~560 s) runs the checks and the JIT conformance beside
#          the sanitizers, then the soak alone:
#          bash conformance/h200_gate.sh sanitizers > $OUT/sanitizers_gate.txt 2>&1 & S=$!
#          bash conformance/h200_gate.sh dsl-jit & J=$!
#          GATE_AFTER=$S bash conformance/h200_gate.sh checks; wait $J $S
#          bash conformance/h200_gate.sh soak
#          and the second (carry [".dsl/b"]) bash conformance/h200_gate.sh dsl-tests (its
#          invariance tests compile their variants: more than 85 s; session 13's ran beside
#          nothing in well under 250 s).
#
# GATE_BUILD=CxTxV (default all): the steps that force every build force that one only: the
# gate of a bundle that adds a build while every other compile's PTX is identical to a gated
# bundle's (kernel/resources.py --same-ptx-as), whose gate stands for those builds.
#
# Every log goes to $OUT/ev (it comes back); a table of the verdicts is printed last.
# Exit 1 if any step failed.
set -u
usage="usage: h200_gate.sh wheel|checks|soak|aot|gpu-tests|sanitizers|dsl|dsl-jit|dsl-tests"
mode=${1:?$usage}
build=${GATE_BUILD:-all}
ev=${OUT:-build/h200}/ev
mkdir -p "$ev"
status=0
rows=()
step() {  # step NAME SECONDS COMMAND...: run it with a time limit, log it, keep its last line
    local name=$1 limit=$2; shift 2
    local start=$(date +%s)
    timeout "$limit" "$@" > "$ev/$name.txt" 2>&1
    local rc=$?
    [ $rc -ne 0 ] && status=1
    rows+=("| $name | $rc | $(( $(date +%s) - start )) s | $(grep -v '^\s*$' "$ev/$name.txt" | tail -1 | cut -c1-150) |")
}
await_gate_after() {  # wait until the processes named in $GATE_AFTER have exited
    for pid in ${GATE_AFTER:-}; do while kill -0 "$pid" 2>/dev/null; do sleep 2; done; done
}
use_wheel() {  # the wheel of dist/ alone on PYTHONPATH, installed afresh (a warm runner keeps /tmp),
    # in a folder of this mode's own, so that two modes may run at once (sanitizers beside dsl)
    rm -rf "/tmp/site-$mode"
    python3 -m pip install -q --no-deps --no-index --target "/tmp/site-$mode" dist/*.whl
    export PYTHONPATH="/tmp/site-$mode"
    python3 -c "from decode_topk.kernel import aot_loader as a; print('kernel source', a.kernel_source_sha256()[:12])" \
        | tee "$ev/kernel_source.txt"
}
case "$mode" in
wheel|checks|soak|aot|gpu-tests)
    use_wheel
    if [ "$mode" = wheel ] || [ "$mode" = checks ] || [ "$mode" = aot ]; then
        step gpu_conformance_full_aot_wheel 360 python3 -m decode_topk.conformance --impl aot --level full --build "$build"
        step gpu_conformance_full_aot_wheel_policy_builds 60 python3 -m decode_topk.conformance --impl aot --level full
    fi
    if [ "$mode" = wheel ] || [ "$mode" = checks ] || [ "$mode" = gpu-tests ]; then
        # (the GPU tests time nothing but the PDL test's producer: in `checks` mode they wait
        # for the processes named in $GATE_AFTER, as the dsl mode's do)
        await_gate_after
        step pytest_gpu_aot_wheel 180 python3 -m pytest -q -m gpu tests -p no:cacheprovider
    fi
    if [ "$mode" = wheel ] || [ "$mode" = soak ]; then
        step soak 220 python3 -m decode_topk.conformance.soak --budget 170 --out "$ev"
    fi
    ;;
sanitizers)
    use_wheel
    step sanitizers 590 bash conformance/sanitizers.sh "$ev/san" 440 --builds "$build"
    ;;
dsl|dsl-jit|dsl-tests)
    # (DSL_INSTALL: the DSL's install script, .dsl/b's after the two-call staging, or
    # .dsl/one's, docs/wip/dsl-one.sh)
    source "${DSL_INSTALL:-.dsl/b/install.sh}" > /dev/null 2>&1
    export PYTHONPATH="$(bash .ci/pythonpath):${PYTHONPATH:-}" DECODE_TOPK_AOT_DIR=/nonexistent
    if [ "$mode" != dsl-tests ]; then
        step gpu_conformance_full_jit 420 python3 -m decode_topk.conformance --impl jit --level full --build "$build"
    fi
    if [ "$mode" != dsl-jit ]; then
        # The PDL test times its producer by the clock: it waits for the processes named in
        # $GATE_AFTER (the sanitizers run beside this mode) so that it has the GPU to itself.
        await_gate_after
        step pytest_gpu_dsl_pdl_invariance 200 python3 -m pytest -q -m gpu tests/test_pdl_gpu.py \
            tests/test_invariance.py -p no:cacheprovider
    fi
    ;;
*) echo "$usage" >&2; exit 2 ;;
esac
echo
echo "| step | exit | time | last line |"
echo "|---|---|---|---|"
printf '%s\n' "${rows[@]}"
exit $status
