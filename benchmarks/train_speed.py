"""Training throughput on CPU: LMTask tokens/s at windows of 1k, 16k and 128k, linear vs the softmax baseline.

    python benchmarks/train_speed.py                    # ~3 min on 2 idle cores
    python benchmarks/train_speed.py --threads 1        # the most repeatable on a shared machine
    python benchmarks/train_speed.py --windows 1024 4096 --config configs/dna/tiny-cpu.yaml

One training step = ``LMTask``'s window loss (the model of the config, float32), backward and an AdamW
step, batch 1 (so a window's tokens are the step's tokens), timed as the best of a few steps after a
warm-up, in this process. The softmax baseline is the same config with ``attention: softmax`` (causal
SDPA with RoPE); its cost grows as T², so it stops at ``--softmax-max`` and the table says so.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from strandline.app.threads import set_openmp_defaults  # noqa: E402

set_openmp_defaults()  # as `strandline fit` runs: before torch loads OpenMP

import torch  # noqa: E402
import yaml  # noqa: E402


def make_task(config: str, attention: str, checkpoint: bool):
    from strandline.models import ModelConfig
    from strandline.tasks.lm import LMTask

    cfg = yaml.safe_load((ROOT / config).read_text())["model"]["model"]
    cfg = {**cfg, "attention": attention, "checkpoint_activations": checkpoint}
    return LMTask(model=ModelConfig(**cfg)).train()


def tokens_per_second(task, T: int, steps: int, budget_s: float) -> tuple[float, float]:
    """(tokens/s, seconds per step): best of ``steps`` after one warm-up step (fewer when a step is slow)."""
    opt = torch.optim.AdamW(task.parameters(), lr=1e-4)
    x = torch.randint(4, 8, (1, T + 1))
    batch = {"input": x[:, :-1], "target": x[:, 1:]}

    def step() -> float:
        t0 = time.perf_counter()
        loss, _ = task._window_loss(batch, "train")
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return time.perf_counter() - t0

    best = step()  # warm-up (its time counts only if it is the only run)
    for _ in range(steps):
        if best * (steps + 1) > budget_s:
            break
        best = min(best, step())
    return T / best, best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default="configs/dna/tiny-cpu.yaml", help="the model of this training config")
    ap.add_argument("--windows", type=int, nargs="+", default=[1024, 16384, 131072])
    ap.add_argument("--softmax-max", type=int, default=16384, help="longest window for the quadratic baseline")
    ap.add_argument("--checkpoint", action="store_true", help="activation checkpointing (as the GPU recipe)")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--steps", type=int, default=3)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"# torch {torch.__version__}, {torch.get_num_threads()} threads, model of {args.config}, batch 1, float32")
    print(
        f"# OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')!r} (app/threads.py: what strandline sets unless you do)"
    )
    print(f"# load average at start: {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} cores")
    print(f"{'window':>8}  {'attention':<10}{'tokens/s':>12}{'s/step':>10}  {'linear / softmax':>16}")
    torch.manual_seed(0)
    for T in args.windows:
        rates = {}
        for attention in ("linear", "softmax"):
            if attention == "softmax" and T > args.softmax_max:
                print(f"{T:>8}  {attention:<10}{'-':>12}{'-':>10}  (quadratic: beyond --softmax-max)", flush=True)
                continue
            task = make_task(args.config, attention, args.checkpoint)
            rate, secs = tokens_per_second(task, T, args.steps, budget_s=120)
            rates[attention] = rate
            ratio = f"{rates['linear'] / rate:.2f}x" if attention == "softmax" else ""
            print(f"{T:>8}  {attention:<10}{rate:>12,.0f}{secs:>10.3f}  {ratio:>16}", flush=True)
            del task


if __name__ == "__main__":
    main()
