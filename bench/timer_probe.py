"""Is a slow grid point the host's or the GPU's? One point's DecodeTopK replays timed as
bench/grid.py's Timer times them (evicted and L2-resident takes of --reps replays, one
after the other, for --seconds), with the host's time to enqueue each take's replays.

    python bench/timer_probe.py [--rows 8] [--width 32768] [--k 2048] [--seconds 12]
        [--head-start] [--out probe.json]

Prints, per kind of take, the median and largest take median, the host's enqueue time a
replay (median, and the longest single one) and the takes more than 1.5x the median
take. If the host's enqueue time a replay nears the GPU's time a replay before the timed
call (the eviction, ~85 us on an H100; the L2-resident sleep, L2_SLEEP_CYCLES), the GPU
waits for the host between the start event and the replay, and the time measured is the
host's (bench/NOTES.md session 37). Needs a GPU and main's AOT library.
"""

import argparse
import json
import statistics
import sys
import time
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import grid  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--width", type=int, default=32768)
    ap.add_argument("--k", type=int, default=2048)
    ap.add_argument("--seconds", type=float, default=12.0)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--head-start", action="store_true", help="as grid.py run --head-start")
    ap.add_argument("--out", default=None, help="every take's record, as JSON")
    args = ap.parse_args(argv)

    import torch
    from decode_topk.kernel import aot_loader

    logits = grid.make_logits(torch, "rho0.9", args.rows, args.width, 7)
    lengths = torch.full((args.rows,), args.width, dtype=torch.int32, device="cuda")
    out = torch.empty(args.rows, args.k, dtype=torch.int32, device="cuda")
    timer = grid.Timer(torch, 5, args.reps, args.head_start)
    graph = timer.graph(lambda: aot_loader.decode_topk_aot(logits, lengths, args.k, out=out))
    timer.warm_gpu()
    takes, t0 = [], time.perf_counter()
    while time.perf_counter() - t0 < args.seconds:
        for evict in (True, False):
            stamps = []

            def replay():  # the host's time between two replays is one replay's enqueue, eviction and events
                stamps.append(time.perf_counter())
                graph.replay()

            begun = time.perf_counter()
            ms = timer.replays(types.SimpleNamespace(replay=replay), evict)
            enqueue = [b - a for a, b in zip(stamps, stamps[1:])]
            takes.append({"t": round(begun - t0, 4), "evict": evict,
                          "median_us": round(statistics.median(ms) * 1e3, 2), "min_us": round(min(ms) * 1e3, 2),
                          "enqueue_us": round(statistics.median(enqueue) * 1e6, 1),
                          "max_enqueue_us": round(max(enqueue) * 1e6, 1)})
    if args.out:
        Path(args.out).write_text(json.dumps(takes))
    for evict in (True, False):
        mine = [t for t in takes if t["evict"] == evict]
        typical = statistics.median(t["median_us"] for t in mine)
        slow = [t for t in mine if t["median_us"] > 1.5 * typical]
        print(f"{'evicted' if evict else 'L2-resident'}: {len(mine)} takes, median {typical} us, largest "
              f"{max(t['median_us'] for t in mine)}; enqueue a replay median "
              f"{statistics.median(t['enqueue_us'] for t in mine)} us, longest "
              f"{max(t['max_enqueue_us'] for t in mine)}; slow takes {len(slow)}: {slow[:5]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
