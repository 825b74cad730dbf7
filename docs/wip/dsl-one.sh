#!/usr/bin/env bash
# The DSL in one device call: .dsl/one from ../shared/gpu/stage-dsl's two halves (.dsl/a,
# .dsl/b), less the top-level profiler package `iket` (6.8 MB unpacked, ~1.2 MB packed),
# which no compile imports (session 49: a variant compiled on the CPU with `iket` made
# unimportable). 64.76 MB: with the checkout it fits one upload (64 MiB, 67.11 MB) only
# when bench/results, docs/evidence and bench/NOTES.md are moved aside for the call (the
# rest of the checkout ~2.0 MB, ~0.35 MB to spare). Worked on an H100 in session 50
# (docs/wip/three-cta-gate.sh's dsl part prints `import cutlass` first).
#   run here, at the repository's root: bash docs/wip/dsl-one.sh   (~5 min, 2 CPUs)
#   on the device (carry [".dsl/one"]): source .dsl/one/install.sh && <command>
#   or DSL_INSTALL=.dsl/one/install.sh bash conformance/h200_gate.sh dsl-jit|dsl-tests
set -euo pipefail
[ -s .dsl/a/part.aa ] && [ -s .dsl/b/part.ab ] || { echo "run ../shared/gpu/stage-dsl first" >&2; exit 1; }
work=$(mktemp -d)
cat .dsl/a/part.aa .dsl/b/part.ab | xz -d > "$work/dsl.tar"
tar --delete -f "$work/dsl.tar" ./nvidia_cutlass_dsl/dsl_packages/iket
mkdir -p .dsl/one
xz -9e -T2 -c "$work/dsl.tar" > .dsl/one/dsl.tar.xz
rm -rf "$work"
cat > .dsl/one/install.sh <<'EOS'
# The DSL in one upload (docs/wip/dsl-one.sh). Unpacks into /root/dsl once, sets PYTHONPATH.
if [[ ! -d /root/dsl/nvidia_cutlass_dsl ]]; then
  mkdir -p /root/dsl && tar -xJf .dsl/one/dsl.tar.xz -C /root/dsl || { rm -rf /root/dsl; return 1 2>/dev/null || exit 1; }
fi
export PYTHONPATH=/root/dsl/nvidia_cutlass_dsl/dsl_packages:/root/dsl${PYTHONPATH:+:$PYTHONPATH}
EOS
du -sb .dsl/one
