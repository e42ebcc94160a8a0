"""Per-token ``step`` cost of converted models by process CPU time, at several positions, with no KV cache alive.

``benchmarks/convert.py`` times the RNN's step by wall clock right after allocating the softmax peer's KV
cache of that length (up to 1.5 GB): on a loaded shared machine that reads up to 3x apart between positions.
This script times only the RNN: a real prefill to each position (64k-token calls, constant memory), then the
median of ``--steps`` single-token steps from the same state, by CPU time (the work) and wall clock.

    OMP_NUM_THREADS=1 python benchmarks/convert_step.py runs/convert-bench/hybrid-dna/dna/lolcats-w128-80/checkpoints/last.ckpt
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from strandline.models import load  # noqa: E402


def step_costs(model, positions: list[int], steps: int) -> list[dict]:
    """[{position, cpu_ms, wall_ms, state_bytes}] for each position (increasing), one prefill throughout."""
    g = torch.Generator().manual_seed(0)
    rows, state, done, tok = [], None, 0, torch.tensor([5])
    with torch.inference_mode():
        for pos in positions:
            while done < pos:
                n = min(1 << 16, pos - done)
                _, state = model.hidden(torch.randint(4, 8, (1, n), generator=g), state)
                done += n
            model.step(tok, state)  # warm-up
            cpu, wall = [], []
            for _ in range(steps):
                t0, w0 = time.process_time(), time.perf_counter()
                model.step(tok, state)  # always from the same state: the position stays fixed
                cpu.append(time.process_time() - t0)
                wall.append(time.perf_counter() - w0)
            rows.append({"position": pos, "cpu_ms": 1e3 * statistics.median(cpu),
                         "wall_ms": 1e3 * statistics.median(wall), "state_bytes": model.state_nbytes(state)})  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("models", nargs="+", help="model directories or checkpoints (e.g. a conversion's last.ckpt)")
    ap.add_argument("--positions", type=int, nargs="+", default=[1_000, 100_000, 1_000_000])
    ap.add_argument("--steps", type=int, default=200)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    print(f"{'model':<60} {'position':>10} {'CPU ms':>8} {'wall ms':>8} {'state':>10}")
    for path in args.models:
        model = load(path).eval()
        for r in step_costs(model, sorted(args.positions), args.steps):
            print(
                f"{path[-60:]:<60} {r['position']:>10,} {r['cpu_ms']:>8.2f} {r['wall_ms']:>8.2f} {r['state_bytes']:>10,}"
            )


if __name__ == "__main__":
    main()
