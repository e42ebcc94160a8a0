"""Peak CPU memory of one training step (forward + backward, batch 1) against context length.

Each point runs in a fresh subprocess so the peak RSS (``ru_maxrss``) belongs to that step alone; the table shows
the step's own peak (peak RSS minus the RSS after building the model and the batch) and the total. Model sizes come
from the training configs (``model.model`` of configs/dna/tiny-cpu.yaml and configs/dna/131k-gpu.yaml), run in
float32 on the CPU, with and without activation checkpointing. The longest context that fits in ``--budget-gb``
is extrapolated from a least-squares line through the measured points (memory is linear in T for linear
attention: the table lets you check that) and is marked as an extrapolation when it exceeds the longest run.

    python benchmarks/train_memory.py                       # default lengths, both sizes
    python benchmarks/train_memory.py --sizes tiny --lengths 1024 131072
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
SIZES = {"tiny": "configs/dna/tiny-cpu.yaml", "131k-gpu": "configs/dna/131k-gpu.yaml"}


def model_config(size: str, checkpoint: bool) -> dict:
    cfg = yaml.safe_load((REPO / SIZES[size]).read_text())["model"]["model"]
    return {**cfg, "checkpoint_activations": checkpoint}


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def one_step(size: str, T: int, checkpoint: bool) -> dict:
    """Build the model and a [1, T] batch, run forward + backward once; peak RSS before/after (MiB)."""
    import torch

    sys.path.insert(0, str(REPO))
    from strandline.models import LinearTransformerLM, ModelConfig
    from strandline.tasks.lm import nll_sum

    torch.manual_seed(0)
    model = LinearTransformerLM(ModelConfig(**model_config(size, checkpoint))).train()
    x = torch.randint(4, 8, (1, T + 1))
    base = _rss_mb()
    t0 = time.perf_counter()
    logits, _ = model(x[:, :-1])
    total, count = nll_sum(logits, x[:, 1:])
    (total / count).backward()
    secs = time.perf_counter() - t0
    return {"size": size, "T": T, "checkpoint": checkpoint, "base_mb": base, "peak_mb": _rss_mb(), "secs": secs,
            "params": model.num_params()}  # fmt: skip


def measure(size: str, T: int, checkpoint: bool, timeout: float) -> dict | None:
    cmd = [sys.executable, __file__, "--one", size, str(T), str(int(checkpoint))]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=True)
    except subprocess.TimeoutExpired:
        return None
    except subprocess.CalledProcessError as e:  # e.g. killed for memory
        print(f"# {size} T={T}: failed ({e.returncode}): {e.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
        return None
    return json.loads(out.stdout.strip().splitlines()[-1])


def fit_line(points: list[tuple[int, float]]) -> tuple[float, float]:
    """Least squares ``mb = a + b * T``."""
    n = len(points)
    mx = sum(t for t, _ in points) / n
    my = sum(m for _, m in points) / n
    var = sum((t - mx) ** 2 for t, _ in points) or 1.0
    b = sum((t - mx) * (m - my) for t, m in points) / var
    return my - b * mx, b


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", nargs="*", default=list(SIZES), choices=list(SIZES))
    ap.add_argument("--lengths", nargs="*", type=int, default=[1024, 4096, 16384, 65536, 131072])
    ap.add_argument("--max-gpu-size-len", type=int, default=32768, help="longest T run for the 131k-gpu size")
    ap.add_argument("--budget-gb", type=float, default=24.0)
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per point")
    ap.add_argument("--one", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        size, T, ck = args.one
        print(json.dumps(one_step(size, int(T), bool(int(ck)))))
        return
    print(f"{'size':<9} {'params':>10} {'ckpt':>5} {'T':>8} {'step peak MiB':>14} {'total MiB':>10} {'secs':>7}")
    summary = []
    for size in args.sizes:
        for ck in (True, False):
            pts = []
            for T in args.lengths:
                if size != "tiny" and args.max_gpu_size_len < T:
                    continue
                r = measure(size, T, ck, args.timeout)
                if r is None:
                    print(f"{size:<9} {'':>10} {ck!s:>5} {T:>8} {'(failed/timeout)':>14}")
                    continue
                step = r["peak_mb"] - r["base_mb"]
                pts.append((T, r["peak_mb"]))
                print(f"{size:<9} {r['params']:>10,} {ck!s:>5} {T:>8} {step:>14.0f} {r['peak_mb']:>10.0f} {r['secs']:>7.1f}",
                      flush=True)  # fmt: skip
            if len(pts) >= 2:
                a, b = fit_line(pts)
                t_max = int((args.budget_gb * 1024 - a) / b) if b > 0 else None
                longest = max(t for t, _ in pts)
                note = "measured range" if t_max and t_max <= longest else f"EXTRAPOLATED beyond T={longest}"
                summary.append(f"{size} ckpt={ck}: {b * 1024:.1f} MiB per 1k tokens, ~{t_max:,} tokens fit in "
                               f"{args.budget_gb:g} GB ({note})")  # fmt: skip
    print()
    for line in summary:
        print("# " + line)


if __name__ == "__main__":
    main()
