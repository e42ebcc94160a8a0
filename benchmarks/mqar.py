"""Multi-query associative recall (MQAR, Arora et al. 2023, "Zoology"): accuracy per attention variant vs softmax.

A sequence opens with ``n_pairs`` key-value pairs ``k_1 v_1 ... k_n v_n``; the rest is filler (id 0) in which the
keys reappear, each once, at random positions. At a reappearing key the model must output its value (the only
scored targets), so a model has to hold every pair it has read: exactly what a fixed-size state can run out of.
Every model here is the same ``LinearTransformerLM`` (same width, depth, MLP, short conv and optimizer, trained
the same number of steps on fresh random sequences at each length); only the mixer differs. Softmax is the SDPA +
RoPE + KV-cache baseline of the same class. "state" is the bytes one sequence's recurrent state takes after the
whole sequence (float32); for softmax it is the KV cache, which grows with the length.

    python benchmarks/mqar.py                                  # CPU default: d_model 64, lengths 256 1024
    python benchmarks/mqar.py --lengths 256 512 1024 2048 4096 --widths 64 128 --steps 2000   # the full grid
    python benchmarks/mqar.py --variants softmax "delta (silu)" --lengths 1024
    python benchmarks/mqar.py --variants "delta (silu)" --lengths 1024 --head-dim 64   # 1 x 64 at d_model 64

``--head-dim`` (default 32) sets the heads at each width (d_model / head-dim): at a fixed width one 64-dim head
has twice the 2 x 32 heads' state and room for 64 keys under the delta rule instead of 32 per head. "by pair
quarter" is the final held-out accuracy on the queries of the first, ..., last quarter of the pairs as they were
read: a memory that keeps only its latest writes scores on the last quarter alone.

The delta rule needs signed keys: with the default elu1 its L2-normalized keys share one orthant and it stalls
(length 64: 0.27); with DeltaNet's silu ("delta (silu)") it learns (0.99 at 64, 0.996 at 256; docs/results.md).
At 1024 (32 pairs) it learns with one 64-dim head at lr 1e-2 (0.996 at step 1,500; softmax 0.999 at 3e-3):

    python benchmarks/mqar.py --lengths 1024 --steps 2250 --lr 1e-2 --eval-every 250 --head-dim 64 --variants "delta (silu)"

    python benchmarks/mqar.py --lengths 64 --steps 1500 --batch 32    # what fits a loaded 2-core CPU

Weight decay is 0.1 on matrices (Zoology's); MQAR has a long plateau, then a sudden drop (softmax at length 256:
0.07 at step 400, 0.996 at step 800), so a few hundred steps can look like chance. Held-out accuracy is checked every ``--eval-every`` steps and a model stops once it reaches
``--stop-at``, so a model that has learned costs no more steps. Default run: a few hundred steps per model on
1 CPU thread; accuracy after so few steps is a ranking, not a converged number (Zoology trains each point for
tens of epochs): raise ``--steps`` when there is compute.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import fields
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from strandline.models import LinearTransformerLM, ModelConfig  # noqa: E402

IGNORE = -100
FILLER = 0
N_KEYS = 64  # key ids 1 .. 64
N_VALUES = 64  # value ids 65 .. 128
VOCAB = 1 + N_KEYS + N_VALUES

# name -> ModelConfig overrides; each is one mixer, everything else equal
VARIANTS: dict[str, dict] = {
    "softmax": {"attention": "softmax"},
    "linear (paper)": {},
    "linear + decay": {"decay": "retnet"},
    "gated": {"gate": "scalar", "normalizer": "rmsnorm"},
    "delta": {"update": "delta", "normalizer": "rmsnorm"},
    "gated-delta": {"update": "delta", "gate": "scalar", "normalizer": "rmsnorm"},
    "taylor (Based)": {"feature_map": "taylor", "feature_dim": 16},
    # signed q, k as DeltaNet / Gated DeltaNet (silu, then the delta rule's L2 norm) and GLA (identity, output norm)
    "delta (silu)": {"update": "delta", "normalizer": "rmsnorm", "feature_map": "silu"},
    "gated-delta (silu)": {"update": "delta", "gate": "scalar", "normalizer": "rmsnorm", "feature_map": "silu"},
    "gla (identity)": {"feature_map": "identity", "gate": "scalar", "normalizer": "rmsnorm"},
}


def available_variants() -> dict[str, dict]:
    """The variants this checkout can build and run (the others are skipped with a note)."""
    known = {f.name for f in fields(ModelConfig)}
    out = {}
    for name, over in VARIANTS.items():
        if set(over) <= known:
            try:
                make_model(over, 32, n_layers=1)(torch.zeros(1, 3, dtype=torch.long))
            except (ValueError, NotImplementedError):
                continue
            out[name] = over
    return out


def mqar_batch(rng: np.random.Generator, batch: int, seq_len: int, n_pairs: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs [B, T] and targets [B, T] (``-100`` except at the queries, whose targets are the values).

    Keys are distinct within a sequence; each pair's key is queried once, at a random position after the pairs.
    """
    if 3 * n_pairs > seq_len:
        raise ValueError(f"{n_pairs} pairs need at least {3 * n_pairs} tokens, got seq_len {seq_len}")
    x = np.full((batch, seq_len), FILLER, np.int64)
    y = np.full((batch, seq_len), IGNORE, np.int64)
    for b in range(batch):
        keys = rng.choice(N_KEYS, n_pairs, replace=False) + 1
        vals = rng.integers(0, N_VALUES, n_pairs) + 1 + N_KEYS
        x[b, 0 : 2 * n_pairs : 2], x[b, 1 : 2 * n_pairs : 2] = keys, vals
        pos = np.sort(rng.choice(np.arange(2 * n_pairs, seq_len), n_pairs, replace=False))
        order = rng.permutation(n_pairs)
        x[b, pos], y[b, pos] = keys[order], vals[order]
    return torch.from_numpy(x), torch.from_numpy(y)


def mqar_accuracy(logits: torch.Tensor, target: torch.Tensor) -> tuple[int, int]:
    """(correct, scored) over the query positions: argmax over the value ids only."""
    ok = target != IGNORE
    pred = logits[..., 1 + N_KEYS : VOCAB].argmax(-1) + 1 + N_KEYS
    return int((pred[ok] == target[ok]).sum()), int(ok.sum())


def hits_by_pair(logits: torch.Tensor, x: torch.Tensor, target: torch.Tensor, n_pairs: int) -> np.ndarray:
    """Correct and scored queries [2, n_pairs] by the queried pair's place in the key-value block (0 = first read).

    A memory that keeps only its last writes (a decay, or a delta rule that overwrites) scores on the last pairs only.
    """
    out = np.zeros((2, n_pairs), np.int64)
    pred = logits[..., 1 + N_KEYS : VOCAB].argmax(-1) + 1 + N_KEYS
    for b, t in (target != IGNORE).nonzero().tolist():
        i = int((x[b, 0 : 2 * n_pairs : 2] == x[b, t]).nonzero()[0, 0])  # keys are distinct within a sequence
        out[:, i] += (int(pred[b, t] == target[b, t]), 1)
    return out


def make_model(over: dict, d_model: int, n_layers: int = 2, head_dim: int = 32) -> LinearTransformerLM:
    """The benchmark's model: ``d_model / head_dim`` heads (at least one), so a fixed head dim grows the state
    with the width and, at a fixed width, a larger head dim trades heads for a larger per-head key space (the
    delta rule stores at most ``head_dim`` keys per head exactly)."""
    heads = max(1, d_model // head_dim)
    cfg = ModelConfig(vocab_size=VOCAB, d_model=d_model, n_layers=n_layers, n_heads=heads, conv_width=4, **over)
    return LinearTransformerLM(cfg)


def held_out_accuracy(model: LinearTransformerLM, seq_len: int, n_pairs: int, batch: int, seed: int) -> tuple:
    """(accuracy over 8 fixed held-out batches, the last batch's final state, its batch size, hits_by_pair summed)."""
    model.eval()
    held = np.random.default_rng([seed, seq_len, 1])
    correct = total = 0
    by_pair = np.zeros((2, n_pairs), np.int64)
    with torch.no_grad():
        for _ in range(8):
            x, y = mqar_batch(held, batch, seq_len, n_pairs)
            logits, state = model(x)
            c, n = mqar_accuracy(logits, y)
            correct, total = correct + c, total + n
            by_pair += hits_by_pair(logits, x, y, n_pairs)
    model.train()
    return correct / max(total, 1), state, x.shape[0], by_pair


def train_eval(
    over: dict,
    d_model: int,
    seq_len: int,
    n_pairs: int,
    steps: int,
    batch: int = 16,
    lr: float = 3e-3,
    seed: int = 0,
    weight_decay: float = 0.0,
    eval_every: int = 0,
    stop_at: float = 0.99,
    head_dim: int = 32,
) -> dict:
    """Train one model on fresh MQAR batches (warmup then cosine over ``steps``), then score 8 held-out batches.

    With ``eval_every`` > 0 the held-out accuracy is also measured every ``eval_every`` steps and training stops
    once it reaches ``stop_at`` (the curve and the step are returned), so a learned model costs no further steps.
    """
    torch.manual_seed(seed)
    model = make_model(over, d_model, head_dim=head_dim)
    decay = [p for p in model.parameters() if p.dim() >= 2]  # Zoology: decay on matrices only
    rest = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": rest, "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.98))
    warm = max(1, steps // 10)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(1.0, s / steps)))
    )
    rng = np.random.default_rng([seed, seq_len])
    t0, curve, done = time.perf_counter(), [], None
    model.train()
    for step in range(1, steps + 1):
        x, y = mqar_batch(rng, batch, seq_len, n_pairs)
        logits, _ = model(x)
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1), ignore_index=IGNORE)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if eval_every and step % eval_every == 0 and step < steps:
            t1 = time.perf_counter()
            curve.append(held_out_accuracy(model, seq_len, n_pairs, batch, seed)[0])
            print(f"#   step {step}: accuracy {curve[-1]:.3f}", file=sys.stderr, flush=True)  # progress of long runs
            t0 += time.perf_counter() - t1  # evaluation time is not training time
            if curve[-1] >= stop_at:
                done = step
                break
    train_s = time.perf_counter() - t0
    acc, state, b, by_pair = held_out_accuracy(model, seq_len, n_pairs, batch, seed)
    quarters = [q.sum(1) for q in np.array_split(by_pair, 4, axis=1) if q.size]  # first .. last quarter of the pairs
    return {
        "acc": acc,
        "steps": done or steps,
        "curve": curve,
        "state_bytes": model.state_nbytes(state) // b,
        "params": model.num_params(),
        "heads": f"{model.config.n_heads}x{model.config.head_dim}",
        "by_quarter": [int(c) / max(int(n), 1) for c, n in quarters],
        "train_s": train_s,
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lengths", type=int, nargs="+", default=[256, 1024])
    ap.add_argument("--widths", type=int, nargs="+", default=[64], help="d_model values (see --head-dim)")
    ap.add_argument(
        "--head-dim", type=int, default=32, help="per-head dim: d_model / head-dim heads (default 32: 2 x 32 at 64)"
    )
    ap.add_argument(
        "--pairs", type=int, default=None, help="key-value pairs per sequence (default: length / 32, at most 64)"
    )
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--wd", type=float, default=0.1, help="AdamW weight decay on matrices (Zoology: 0.1)")
    ap.add_argument("--eval-every", type=int, default=100, help="held-out check every N steps (0: only at the end)")
    ap.add_argument("--stop-at", type=float, default=0.99, help="stop a model's training at this held-out accuracy")
    ap.add_argument("--variants", nargs="*", default=None, help=f"subset of: {list(VARIANTS)}")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    bad = [d for d in args.widths if args.head_dim < 1 or d % args.head_dim]
    if bad:
        ap.error(f"--head-dim {args.head_dim} does not divide d_model {bad[0]} (each width needs whole heads)")
    torch.set_num_threads(args.threads)
    avail = available_variants()
    names = args.variants or list(VARIANTS)
    missing = [n for n in names if n not in avail]
    if missing:
        print(f"# skipped (config keys not in this checkout, or unknown): {missing}")
    names = [n for n in names if n in avail]
    print(f"# MQAR: {N_KEYS} keys, {N_VALUES} values, {args.steps} steps x batch {args.batch}, lr {args.lr}, wd {args.wd}, "
          f"2 layers, head dim {args.head_dim}, {args.threads} thread(s); chance = {1 / N_VALUES:.3f}")  # fmt: skip
    print(f"{'variant':<18} {'d_model':>7} {'heads':>6} {'length':>6} {'pairs':>5} {'accuracy':>8} {'state KB':>9} "
          f"{'params':>8} {'steps':>6} {'train s':>8} {'by pair quarter':>19}  "
          f"held-out accuracy every {args.eval_every} steps")  # fmt: skip
    for d in args.widths:
        for T in args.lengths:
            n_pairs = args.pairs or min(N_KEYS, max(4, T // 32))
            for name in names:
                r = train_eval(avail[name], d, T, n_pairs, args.steps, args.batch, args.lr, 0, args.wd,
                               args.eval_every, args.stop_at, args.head_dim)  # fmt: skip
                curve = ", ".join(f"{a:.2f}" for a in r["curve"])
                quarters = " ".join(f"{a:.2f}" for a in r["by_quarter"])
                print(f"{name:<18} {d:>7} {r['heads']:>6} {T:>6} {n_pairs:>5} {r['acc']:>8.3f} {r['state_bytes'] / 1024:>9.1f} "
                      f"{r['params']:>8,} {r['steps']:>6} {r['train_s']:>8.0f} {quarters:>19}  {curve}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
