"""Speed of every attention variant's chunked op (fwd+bwd) and of the LM's per-token step vs position.

    OMP_NUM_THREADS=1 python benchmarks/variants_speed.py --lengths 4096,16384 --head-dim 32
    python benchmarks/variants_speed.py --steps-only      # table 2 alone (every LM variant, ~1 min)
    PYTHONPATH=. python benchmarks/variants_speed.py --rev 324bf2b --lengths 16384,65536 --head-dim 64  # A/B

Table 1: one op call, B=1, H=4, K=V=head dim, float32, fwd+bwd seconds (best of 3 after a warm-up), the
paper's op (``models/ops/linear/__init__.py``) in the same run as the peers: every variant, φ (elu+1) applied inside the
additive ops as the model does, and FLA's pure-torch chunked references when ``fla-core`` is installed. Table 2: ``model.step`` latency (median of
280 steps, the two positions alternating) with the carried state at position 1k and at 1M, per variant: the counter of the position
options is O(1), so the two columns should agree. Times are process CPU time (``time.process_time``), one
thread: on a machine shared with other jobs wall time measures the scheduler, CPU time the work.
``--rev`` prints instead one A/B table: every variant's op at that git revision (``op_ab.old_models``)
and in this tree, the two alternating call by call on the same inputs.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from strandline.models import (
    LinearTransformerLM,
    LMState,
    ModelConfig,
    delta_rule_attention,
    gated_linear_attention,
    linear_attention,
)

PHI = "elu1"  # applied inside the additive ops, as the model's layer does (models/layers.py)


def make_ops(linear_attention, gated_linear_attention, delta_rule_attention) -> dict:
    """The variants' op calls, from these three functions (this tree's, or an older revision's with ``--rev``)."""
    return {
        "paper (ops.linear_attention)": lambda q, k, v, g, C: linear_attention(q, k, v, chunk_size=C, feature_map=PHI),
        "paper + fixed γ = 0.99": lambda q, k, v, g, C: linear_attention(
            q, k, v, chunk_size=C, decay=0.99, feature_map=PHI
        ),
        "gated, z": lambda q, k, v, g, C: gated_linear_attention(
            q, k, v, F.logsigmoid(g) / 16, chunk_size=C, feature_map=PHI
        ),
        "gated, no z": lambda q, k, v, g, C: gated_linear_attention(
            q, k, v, F.logsigmoid(g) / 16, chunk_size=C, normalize=False, feature_map=PHI
        ),
        "delta": lambda q, k, v, g, C: delta_rule_attention(
            F.normalize(q, dim=-1), F.normalize(k, dim=-1), v, torch.sigmoid(g), chunk_size=C
        ),
        "gated delta": lambda q, k, v, g, C: delta_rule_attention(
            F.normalize(q, dim=-1), F.normalize(k, dim=-1), v, torch.sigmoid(g), F.logsigmoid(g) / 16, chunk_size=C
        ),
    }


OPS = make_ops(linear_attention, gated_linear_attention, delta_rule_attention)


def fla_references() -> dict:
    """FLA's pure-torch chunked references (plain autograd, float32), the peers of "gated, no z" and
    "gated delta" (same φ, gate and β; scale 1), when ``fla-core`` is installed."""
    try:
        from fla.ops.gated_delta_rule.naive import naive_chunk_gated_delta_rule
        from fla.ops.simple_gla.naive import naive_chunk_simple_gla
    except ImportError:
        return {}
    return {
        "FLA naive_chunk_simple_gla (peer of gated, no z)": lambda q, k, v, g, C: naive_chunk_simple_gla(
            F.elu(q) + 1, F.elu(k) + 1, v, F.logsigmoid(g) / 16, chunk_size=C, scale=1.0, output_final_state=True
        ),
        "FLA naive_chunk_gated_delta_rule (peer of gated delta)": lambda q, k, v, g, C: naive_chunk_gated_delta_rule(
            F.normalize(q, dim=-1),
            F.normalize(k, dim=-1),
            v,
            F.logsigmoid(g) / 16,
            torch.sigmoid(g),
            chunk_size=C,
            scale=1.0,
            output_final_state=True,
        ),  # fmt: skip
    }


LM_VARIANTS = {
    "paper": {},
    "rope": {"position": "rope"},
    "sinusoidal": {"position": "sinusoidal"},
    "gate": {"gate": "scalar"},
    "delta": {"update": "delta", "normalizer": "rmsnorm"},
    "gated delta + rope": {"update": "delta", "gate": "scalar", "normalizer": "rmsnorm", "position": "rope"},
    "taylor d=16": {"feature_map": "taylor", "feature_dim": 16},
    "delta + silu": {"update": "delta", "normalizer": "rmsnorm", "feature_map": "silu"},
    "gated delta + silu": {"update": "delta", "gate": "scalar", "normalizer": "rmsnorm", "feature_map": "silu"},
    "gla (identity, gate, rmsnorm)": {"feature_map": "identity", "gate": "scalar", "normalizer": "rmsnorm"},
    "taylor + delta": {"feature_map": "taylor", "feature_dim": 16, "update": "delta", "normalizer": "rmsnorm"},
    "hybrid window 64 + rope": {"window": 64, "position": "rope"},
    "softmax window 64": {"attention": "softmax", "window": 64},
    # the k-mer memory of configs/dna/recall-cpu.yaml (three 2^19-row tables; a step writes a log, folded every 256)
    "gate + k-mer memory 8,12,20": {
        "gate": "scalar",
        "normalizer": "rmsnorm",
        "kmer_orders": [8, 12, 20],
        "kmer_buckets": 1 << 19,
        "kmer_decay": 1 - 2**-16,
    },
}


def time_op(fn, T: int, D: int, C: int, H: int = 4) -> float:
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, T, H, D, requires_grad=True) for _ in range(3))
    g = torch.randn(1, T, H, requires_grad=True)
    times = []
    for _ in range(4):  # the first is a warm-up
        t = time.process_time()
        out, _ = fn(q, k, v, g, C)
        out.sum().backward()
        times.append(time.process_time() - t)
    return min(times[1:])


def ab_rows(new: dict, old: dict, T: int, D: int, C: int, reps: int, H: int = 4) -> dict:
    """{name: (old s, this s)}: fwd+bwd of each variant in both versions on the same inputs, the two
    alternating call by call (best of ``reps`` after a warm-up round), so that drifting load hits both alike."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, T, H, D, requires_grad=True) for _ in range(3))
    g = torch.randn(1, T, H, requires_grad=True)
    rows = {}
    for name in new:
        times = ([], [])
        for rep in range(reps + 1):
            for i in (0, 1) if rep % 2 else (1, 0):
                t = time.process_time()
                out, _ = (old, new)[i][name](q, k, v, g, C)
                out.sum().backward()
                if rep:
                    times[i].append(time.process_time() - t)
        rows[name] = (min(times[0]), min(times[1]))
    return rows


def _at_position(st: LMState, p: int) -> LMState:
    """The state with every token counter (the layers' and the k-mer memory's) set to p."""
    parts = (*st.layers, st.memory)
    moved = [s if s is None or s.pos is None else s._replace(pos=torch.full_like(s.pos, p)) for s in parts]
    return LMState(tuple(moved[:-1]), moved[-1])


def step_latency(kw: dict, positions: tuple[int, ...] = (1_000, 1_000_000)) -> list[float]:
    """Median step seconds with the state at each position; the positions alternate step by step, so that
    the load of the shared machine affects all of them alike."""
    torch.manual_seed(0)
    model = LinearTransformerLM(ModelConfig(vocab_size=16, d_model=128, n_layers=4, n_heads=4, **kw)).eval()
    with torch.no_grad():
        _, st = model(torch.randint(0, 16, (1, 64)))
        states = [_at_position(st, p) for p in positions]
        tok = torch.randint(0, 16, (1,))
        times = [[] for _ in positions]
        for _ in range(300):
            for i, s in enumerate(states):
                t = time.process_time()
                _, states[i] = model.step(tok, s)
                times[i].append(time.process_time() - t)
    return [statistics.median(ts[20:]) for ts in times]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lengths", default="4096,16384", help="comma-separated T for table 1")
    ap.add_argument("--head-dim", type=int, default=32)
    ap.add_argument("--chunk-size", type=int, default=64)
    ap.add_argument("--rev", help="instead: an interleaved A/B of every variant against this git revision's ops")
    ap.add_argument("--reps", type=int, default=5, help="repetitions of the A/B (best of)")
    ap.add_argument("--steps-only", action="store_true", help="only table 2 (the LM step at position 1k and 1M)")
    ap.add_argument("--only", nargs="+", metavar="NAME", help="table 2: only these LM variants (names as printed)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    Ts = [int(t) for t in args.lengths.split(",")]
    D, C = args.head_dim, args.chunk_size
    if args.rev:
        ab(args.rev, Ts, D, C, args.reps)
        return
    if not args.steps_only:
        print(f"| op (B=1, H=4, K=V={D}, C={C}, float32), fwd+bwd s | " + " | ".join(f"T={T}" for T in Ts) + " |")
        print("| --- |" + " --- |" * len(Ts))
        for name, fn in {**OPS, **fla_references()}.items():
            print(f"| {name} | " + " | ".join(f"{time_op(fn, T, D, C):.3f}" for T in Ts) + " |", flush=True)
    print("\n| LM step (d=128, 4 layers, 4 heads), ms | at position 1k | at position 1M | 1M / 1k |")
    print("| --- | --- | --- | --- |")
    for name, kw in LM_VARIANTS.items():
        if args.only and name not in args.only:
            continue
        a, b = step_latency(kw)
        print(f"| {name} | {a * 1e3:.2f} | {b * 1e3:.2f} | {b / a:.3f} |", flush=True)


def ab(rev: str, Ts: list[int], D: int, C: int, reps: int) -> None:
    """The A/B table: each variant's fwd+bwd at ``rev`` and in this tree, per T."""
    import importlib
    import os
    import sys
    import tempfile
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from op_ab import old_models

    with tempfile.TemporaryDirectory() as tmp:
        pkg = old_models(rev, Path(tmp)).__name__
        lin, gated, delta = (importlib.import_module(f"{pkg}.{m}") for m in ("ops", "ops_gated", "ops_delta"))
        old = make_ops(lin.linear_attention, gated.gated_linear_attention, delta.delta_rule_attention)
        print(
            f"| op (B=1, H=4, K=V={D}, C={C}, float32), fwd+bwd s | "
            + " | ".join(f"T={T}: {rev} / this" for T in Ts)
            + " |"
        )
        print("| --- |" + " --- |" * len(Ts))
        rows = {T: ab_rows(OPS, old, T, D, C, reps) for T in Ts}
        for name in OPS:
            cells = (f"{rows[T][name][0]:.3f} / {rows[T][name][1]:.3f}" for T in Ts)
            print(f"| {name} | " + " | ".join(cells) + " |")
    print(f"# process CPU time, 1 thread, best of {reps}, the versions alternating; load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
