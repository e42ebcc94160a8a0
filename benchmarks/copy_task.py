"""The paper's copy task (§4.1): steps to converge per attention variant, softmax trained the same way beside it.

Every model is trained with the recipe ``configs/paper/copy.yaml`` (its model, data, lr, warmup, cosine schedule
over the recipe's ``max_steps``, AdamW groups, betas, gradient clipping: the same as ``strandline fit`` with
that file); only the keys a variant names are overridden, and ``--set KEY=VALUE`` overrides the model of every
variant alike (softmax included), so a change of width or heads is a change for all, except the keys a variant
names itself (``delta-silu-1x64-conv8`` keeps its one head and width-8 conv, ``taylor-conv8`` its conv).
Held-out bits per copied symbol are measured on the recipe's held-out set every ``val_check_interval`` steps;
"steps" is the first such step below the recipe's stopping threshold (0.05), as the recipe's EarlyStopping reports it.

    python benchmarks/copy_task.py                                    # softmax and every linear variant
    python benchmarks/copy_task.py --variants softmax taylor --max-steps 900
    python benchmarks/copy_task.py --set n_heads=1 --variants softmax delta

The loop is plain torch (no Lightning Trainer) so that a table of several models fits one process; the order
of training batches differs from a Lightning run's (another shuffle), nothing else.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import torch
import yaml
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from strandline.data.copy_task import CopyDataset  # noqa: E402
from strandline.models import LinearTransformerLM, ModelConfig  # noqa: E402
from strandline.tasks.lm import LN2, lr_factor, nll_sum  # noqa: E402

RECIPE = Path(__file__).resolve().parents[1] / "configs/paper/copy.yaml"

# name -> model-config overrides of the recipe's model; everything else is the recipe
VARIANTS: dict[str, dict] = {
    "softmax": {"attention": "softmax", "position": "none"},  # the recipe header's baseline (RoPE)
    "elu1": {"feature_map": "elu1", "update": "additive", "normalizer": "z"},
    "taylor": {"feature_map": "taylor", "update": "additive", "normalizer": "z"},
    "delta": {"feature_map": "elu1", "update": "delta", "normalizer": "rmsnorm"},
    "gated-delta": {"feature_map": "elu1", "update": "delta", "gate": "scalar", "normalizer": "rmsnorm"},
    "taylor-delta": {"feature_map": "taylor", "update": "delta", "normalizer": "rmsnorm"},
    # DeltaNet's signed q, k (silu, then the delta rule's L2 norm): the MQAR winners (docs/results.md)
    "delta-silu": {"feature_map": "silu", "update": "delta", "normalizer": "rmsnorm"},
    "gated-delta-silu": {"feature_map": "silu", "update": "delta", "gate": "scalar", "normalizer": "rmsnorm"},
    # the best learned map at step 600 (0.100 bits): the recipe's taylor with keys from the last 8 tokens, not 4 (an 8-gram
    # rarely repeats inside a sequence; a 4-gram does), beside softmax with width 4 (the recipe's baseline)
    "taylor-conv8": {"feature_map": "taylor", "update": "additive", "normalizer": "z", "conv_width": 8},
    # one 64 x 64 delta-rule state (64-dim keys for up to 63 positions; 4 x 16 cannot tell them apart) and
    # keys built from the last 8 tokens
    "delta-silu-1x64-conv8": {
        "feature_map": "silu",
        "update": "delta",
        "normalizer": "rmsnorm",
        "n_heads": 1,
        "conv_width": 8,
    },
    # the recipe's taylor model plus the k-mer memory (models/ops/kmer.py) over SEP and the
    # 10 symbols: after the second SEP the k-mer "SEP x_1 .. x_j" was read once before, followed by x_(j+1)
    "taylor-kmer": {
        "feature_map": "taylor",
        "update": "additive",
        "normalizer": "z",
        "kmer_orders": [1, 2, 4, 8],
        "kmer_alphabet": list(range(1, 12)),
        "kmer_buckets": 4096,
    },
}


def load_recipe(path: Path = RECIPE) -> dict:
    """The parts of a copy recipe the loop uses: model config dict, data args, optimizer and schedule."""
    cfg = yaml.safe_load(Path(path).read_text())
    task, trainer = cfg["model"], cfg["trainer"]
    stop = next(c["init_args"] for c in trainer["callbacks"] if c["class_path"].endswith("EarlyStopping"))
    return {
        "model": dict(task["model"]),
        "data": dict(cfg["data"]["init_args"]),
        "lr": float(task.get("lr", 1e-3)),
        "weight_decay": float(task.get("weight_decay", 0.1)),  # LMTask's defaults where the recipe is silent
        "betas": tuple(task.get("betas", (0.9, 0.95))),
        "warmup_steps": int(task.get("warmup_steps", 100)),
        "min_lr_ratio": float(task.get("min_lr_ratio", 0.1)),
        "grad_clip": float(task.get("grad_clip", 1.0)),
        "max_steps": int(trainer["max_steps"]),
        "val_every": int(trainer["val_check_interval"]),
        "threshold": float(stop["stopping_threshold"]),
        "seed": int(cfg.get("seed_everything", 0)),
    }


def make_optimizer(model: torch.nn.Module, r: dict) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    """AdamW with LMTask's parameter groups (no decay on vectors) and its warmup + cosine schedule."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": r["weight_decay"]}, {"params": no_decay, "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=r["lr"], betas=r["betas"])
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: lr_factor(s, r["warmup_steps"], r["max_steps"], r["min_lr_ratio"])
    )
    return opt, sched


@torch.no_grad()
def held_out_bits(model: LinearTransformerLM, loader: DataLoader) -> float:
    """Bits per copied symbol over the whole held-out set (token-weighted, as LMTask's val/bits_per_token)."""
    model.eval()
    total = count = 0.0
    for batch in loader:
        logits, _ = model(batch["input"])
        s, n = nll_sum(logits, batch["target"])
        total, count = total + float(s), count + int(n)
    model.train()
    return total / max(count, 1) / LN2


def train_copy(recipe: dict, over: dict, budget: int) -> dict:
    """Train one model with the recipe (model keys in ``over`` replaced) until converged or ``budget`` steps.

    Returns:
        {"steps": first evaluated step below the threshold or None, "bits": [held-out bits at each evaluation],
        "trained": optimizer steps taken, "params": parameter count, "heads": "H x head dim" of the model built,
        "train_s": seconds of training (evaluations excluded)}.
    """
    r, d = recipe, recipe["data"]
    torch.manual_seed(r["seed"])
    model = LinearTransformerLM(ModelConfig(**{**r["model"], **over}))
    opt, sched = make_optimizer(model, r)
    seed = d.get("seed", 0)
    train = CopyDataset(d.get("train_size", 100_000), d["n_symbols"], d["max_len"], d["min_len"], seed)
    val = CopyDataset(d["val_size"], d["n_symbols"], d["max_len"], d["min_len"], seed + 1_000_003)  # the module's
    gen = torch.Generator().manual_seed(r["seed"])
    loader = DataLoader(train, batch_size=d["batch_size"], shuffle=True, drop_last=True, generator=gen)
    val_loader = DataLoader(val, batch_size=d["batch_size"])
    bits, step, train_s, converged = [], 0, 0.0, None
    while step < budget and converged is None:
        for batch in loader:
            t0 = time.perf_counter()
            logits, _ = model(batch["input"])
            s, n = nll_sum(logits, batch["target"])
            opt.zero_grad(set_to_none=True)
            (s / n.clamp(min=1)).backward()
            if r["grad_clip"]:
                torch.nn.utils.clip_grad_norm_(model.parameters(), r["grad_clip"])
            opt.step()
            sched.step()
            step, train_s = step + 1, train_s + time.perf_counter() - t0
            if step % r["val_every"] == 0:
                bits.append(held_out_bits(model, val_loader))
                print(f"#   step {step}: {bits[-1]:.3f} bits", file=sys.stderr, flush=True)  # progress of long runs
                if not math.isfinite(bits[-1]) or bits[-1] < r["threshold"]:
                    converged = step if math.isfinite(bits[-1]) else None
                    break
            if step >= budget:
                break
        if bits and not math.isfinite(bits[-1]):
            break  # diverged: no point training on
    cfg = model.config
    heads = f"{cfg.n_heads}x{cfg.head_dim}"
    return {"steps": converged, "bits": bits, "trained": step, "params": model.num_params(), "heads": heads,
            "train_s": train_s}  # fmt: skip


def parse_set(items: list[str]) -> dict:
    """``KEY=VALUE`` strings -> model-config overrides (values parsed as YAML: 1, 0.5, null, [0.9, 0.99])."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--set wants KEY=VALUE, got {item!r}")
        out[key] = yaml.safe_load(value)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--recipe", type=Path, default=RECIPE)
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    ap.add_argument("--max-steps", type=int, default=900, help="training budget per model (the schedule keeps "
                    "the recipe's max_steps, so a capped run is the start of the recipe's run)")  # fmt: skip
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="model keys for every variant")
    ap.add_argument("--lr", type=float, default=None, help="peak lr for every variant (default: the recipe's)")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    recipe = load_recipe(args.recipe)
    recipe["model"].update(parse_set(args.set))
    if args.lr is not None:
        recipe["lr"] = args.lr
    m, d = recipe["model"], recipe["data"]
    print(f"# copy task ({args.recipe.name}): {d['n_symbols']} symbols, copy {d['min_len']}..{d['max_len']}, "
          f"{m['n_layers']} layers, d_model {m['d_model']}, {m['n_heads']} heads (or a variant's), "
          f"batch {d['batch_size']}, lr {recipe['lr']}, {args.threads} thread(s); "
          f"converged: held-out < {recipe['threshold']} bits/symbol")  # fmt: skip
    every = recipe["val_every"]
    w = max(16, *map(len, args.variants))  # the name column fits the longest name asked for
    cols = f"{'variant':<{w}} {'steps':>6} {'heads':>5} {'params':>8} {'s/step':>7}"
    print(f"{cols}  held-out bits at step {every}, {2 * every}, ...")
    for name in args.variants:
        res = train_copy(recipe, VARIANTS[name], args.max_steps)
        steps = res["steps"] if res["steps"] is not None else f">{len(res['bits']) * every}"
        per = res["train_s"] / max(1, res["trained"])
        curve = ", ".join(f"{b:.3f}" for b in res["bits"])
        print(f"{name:<{w}} {steps:>6} {res['heads']:>5} {res['params']:>8,} {per:>7.2f}  {curve}", flush=True)


if __name__ == "__main__":
    main()
