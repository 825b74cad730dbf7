"""The 3x512x4 arm (docs/wip/three-cta-measure.sh): per-row trace reasons of the grid's
own rows (bench/grid.py's make_logits, seed args.seed + length) on forced streamed
builds, to see which rows fall back."""
import sys
import torch
sys.path.insert(0, "bench")
import grid  # noqa: E402
from decode_topk.kernel import aot_loader as a, policy as p  # noqa: E402

ROWS = 48
for kind in ("rho0.9", "gaussian"):
    for width in (262144, 524288, 1048576):
        logits = grid.make_logits(torch, kind, ROWS, width, 6 + width)  # grid.py run --seed 6
        lengths = torch.full((ROWS,), width, dtype=torch.int32, device="cuda")
        for k in (512, 2048):
            for b in (p.STREAM_2, p.STREAM_3, p.STREAM_4):
                trace = torch.full((ROWS, 8), -7, dtype=torch.int32, device="cuda")
                a.decode_topk_aot(logits, lengths, k, trace=trace, build=b)
                t = trace.cpu()
                bad = [(r, int(t[r, 1]), int(t[r, 4] + t[r, 5])) for r in range(ROWS) if int(t[r, 1]) != 0]
                ge = (t[:, 4] + t[:, 5])
                print(kind, width, k, b.name, "q", int(t[0, 2]), "fallbacks", bad, "GE min", int(ge.min()), flush=True)
