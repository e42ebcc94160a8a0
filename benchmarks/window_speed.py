"""Speed and state size of the window options (``window: W``) next to their peers, measured in the same run.

    OMP_NUM_THREADS=1 python benchmarks/window_speed.py --lengths 4096,16384 --windows 64,512

Table 1: one attention call, B=1, H=4, head dim 32, float32, fwd+bwd seconds (best of 3 after a warm-up):
the paper's linear op and full causal softmax (SDPA) as the peers, the sliding-window softmax and the
window + linear hybrid (``models/ops/window.py``) at each W. Table 2: ``model.step`` latency (median of 280
steps, the positions alternating) and state bytes of the LM (d_model 128, 4 layers, 4 heads) with the
carried state at position 1k and at 1M: the window models' buffers are full at both, so the two columns
should agree; the softmax KV cache (the peer) at 1k and 32k (1M would need 4 GB). Times are process CPU
time, one thread: on a machine shared with other jobs wall time measures the scheduler, CPU time the work.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from strandline.models import LinearTransformerLM, LMState, ModelConfig, linear_attention
from strandline.models.ops.window import window_attention


def _elu1(x):
    return F.elu(x) + 1


def ops(windows: list[int]) -> dict:
    """name -> fn(q, k, v) for table 1."""
    table = {
        "paper linear (ops.linear_attention)": lambda q, k, v: linear_attention(_elu1(q), _elu1(k), v),
        "full causal softmax (SDPA)": lambda q, k, v: (
            F.scaled_dot_product_attention(*(x.transpose(1, 2) for x in (q, k, v)), is_causal=True),
            None,
        ),
    }
    for W in windows:
        table[f"softmax window W={W}"] = lambda q, k, v, W=W: window_attention(q, k, v, W)
        table[f"hybrid W={W} (elu1)"] = lambda q, k, v, W=W: window_attention(q, k, v, W, fq=_elu1(q), phi=_elu1)
    return table


def time_op(fn, T: int, D: int = 32, H: int = 4) -> float:
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, T, H, D, requires_grad=True) for _ in range(3))
    times = []
    for _ in range(4):  # the first is a warm-up
        t = time.process_time()
        out, _ = fn(q, k, v)
        out.sum().backward()
        times.append(time.process_time() - t)
    return min(times[1:])


def _at_position(state: LMState, p: int) -> LMState:
    """The state with its token counters set to p (a KV cache cannot be moved: returned as is)."""
    layers = tuple(
        s._replace(pos=torch.full_like(s.pos, p)) if getattr(s, "pos", None) is not None else s for s in state.layers
    )
    return state._replace(layers=layers)


def step_latency(kw: dict, positions: tuple[int, ...]) -> tuple[list[float], list[int]]:
    """Median step seconds and state bytes with the state at each position (positions alternate step by step)."""
    torch.manual_seed(0)
    model = LinearTransformerLM(ModelConfig(vocab_size=16, d_model=128, n_layers=4, n_heads=4, **kw)).eval()
    with torch.no_grad():
        if kw.get("window") or kw.get("attention") != "softmax":
            _, st = model(torch.randint(0, 16, (1, 64 + kw.get("window", 0))))  # buffers full of real tokens
            states = [_at_position(st, p) for p in positions]
        else:  # the KV cache at each length, filled in chunks of 4096
            states = []
            for p in positions:
                st = None
                for a in range(0, p, 4096):
                    _, st = model(torch.randint(0, 16, (1, min(4096, p - a))), st)
                states.append(st)
        tok = torch.randint(0, 16, (1,))
        times = [[] for _ in positions]
        for _ in range(300):
            for i, s in enumerate(states):
                t = time.process_time()
                model.step(tok, s)  # from the same state each time: the KV cache must not grow
                times[i].append(time.process_time() - t)
    return [statistics.median(ts[20:]) for ts in times], [model.state_nbytes(s) for s in states]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lengths", default="4096,16384", help="comma-separated T for table 1")
    ap.add_argument("--windows", default="64,512", help="comma-separated W")
    args = ap.parse_args()
    torch.set_num_threads(1)
    Ts, Ws = [int(t) for t in args.lengths.split(",")], [int(w) for w in args.windows.split(",")]
    print("| op (B=1, H=4, head dim 32, float32), fwd+bwd s | " + " | ".join(f"T={T}" for T in Ts) + " |")
    print("| --- |" + " --- |" * len(Ts))
    for name, fn in ops(Ws).items():
        print(f"| {name} | " + " | ".join(f"{time_op(fn, T):.3f}" for T in Ts) + " |", flush=True)
    print("\n| LM step (d=128, 4 layers, 4 heads) | positions | step ms | state bytes |")
    print("| --- | --- | --- | --- |")
    rows = [("softmax KV cache (peer)", {"attention": "softmax"}, (1_000, 32_000))]
    rows.append(("paper linear (peer)", {}, (1_000, 1_000_000)))
    for W in Ws:
        rows.append((f"softmax window W={W}", {"attention": "softmax", "window": W}, (1_000, 1_000_000)))
        rows.append((f"hybrid W={W}, rope", {"window": W, "position": "rope"}, (1_000, 1_000_000)))
    for name, kw, positions in rows:
        ms, nbytes = step_latency(kw, positions)
        print(
            f"| {name} | {' / '.join(f'{p:,}' for p in positions)} | {' / '.join(f'{t * 1e3:.2f}' for t in ms)} "
            f"| {' / '.join(f'{b:,}' for b in nbytes)} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
