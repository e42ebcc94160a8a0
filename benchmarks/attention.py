"""Attention speed and memory against sequence length, with the peers measured in the same run.

    python benchmarks/attention.py                 # the full table (~10-15 min on 2 cores)
    python benchmarks/attention.py --max-t 16384   # quicker

Rows: our chunked op, our recurrent op (small T), causal ``scaled_dot_product_attention`` (the softmax
alternative) and the paper's own CPU kernel, ``fast_transformers.causal_product.causal_dot_product``
(``make bench-deps``; skipped with a message when absent), with its normalization as in its
``CausalLinearAttention``. B=1, H=4, head dim 64, float32, elu+1 features.

Each (method, T) runs in two fresh subprocesses: one times it (best of 3 after a warm-up, default allocator),
one measures the peak-RSS delta (``/proc/self/clear_refs`` reset after the inputs exist) with
``MALLOC_MMAP_THRESHOLD_`` low, so freed tensors go back to the OS (that setting slows allocation, hence two).
Then: the fitted exponent of time against T, and the LM's per-token ``step`` latency at positions 1k, 100k
and 1M next to the softmax block's KV-cache step.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

B, H, D = 1, 4, 64
METHODS = ("chunked", "recurrent", "sdpa", "fast_transformers")
MAX_T = {"chunked": 1 << 18, "recurrent": 4096, "sdpa": 1 << 16, "fast_transformers": 1 << 18}
MAX_T_BACKWARD = {"recurrent": 1024}  # autograd through a per-token Python loop: minutes beyond this


def _rss_peak_reset() -> int:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset VmHWM to the current RSS
    return _status_kb("VmRSS")


def _status_kb(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


def _make_fn(method: str):
    """A function (q, k, v) -> output for one method, in the [B, T, H, D] layout of the inputs."""
    import torch
    import torch.nn.functional as F

    from models.ops import linear_attention

    if method in ("chunked", "recurrent"):
        return lambda q, k, v: linear_attention(F.elu(q) + 1, F.elu(k) + 1, v, mode=method)[0]
    if method == "sdpa":
        return lambda q, k, v: F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
        ).transpose(1, 2)
    from fast_transformers.causal_product import causal_dot_product

    def ft(q, k, v, eps=1e-6):  # fast_transformers.attention.CausalLinearAttention, minus masking
        Q, K, V = F.elu(q) + 1, F.elu(k) + 1, v
        Z = 1 / (torch.einsum("nlhi,nlhi->nlh", Q, K.cumsum(1)) + eps)
        out = causal_dot_product(
            Q.permute(0, 2, 1, 3).contiguous(), K.permute(0, 2, 1, 3).contiguous(), V.permute(0, 2, 1, 3).contiguous()
        )
        return out.permute(0, 2, 1, 3) * Z[..., None]

    return ft


def run_one(method: str, T: int, backward: bool, reps: int, what: str) -> dict:
    """Child process: the time (best of ``reps`` after a warm-up) or the peak memory of one configuration."""
    import torch

    if os.environ.get("STRANDLINE_BENCH_THREADS"):
        torch.set_num_threads(int(os.environ["STRANDLINE_BENCH_THREADS"]))
    torch.manual_seed(0)
    fn = _make_fn(method)
    q, k, v = (torch.randn(B, T, H, D, requires_grad=backward) for _ in range(3))

    def once() -> float:
        t0 = time.perf_counter()
        out = fn(q, k, v)
        if backward:
            out.backward(torch.ones_like(out))
            for x in (q, k, v):
                x.grad = None
        return time.perf_counter() - t0

    if what == "memory":
        once()  # warm-up: one-time allocations (thread pools, lazy init) are not this run's
        base = _rss_peak_reset()
        once()
        return {"peak_mb": (_status_kb("VmHWM") - base) / 1024}
    first = once()
    times = [once() for _ in range(reps)] if first < 20 else [first]  # slow ones: the first run is the measurement
    return {"seconds": min(times)}


def measure(method: str, T: int, backward: bool) -> dict | None:
    """Time with the default allocator; peak memory in a second process whose freed tensors go back to the OS."""
    result = {"method": method, "T": T, "backward": backward}
    for what, extra in (("time", {}), ("memory", {"MALLOC_MMAP_THRESHOLD_": "131072"})):
        env = dict(os.environ, PYTHONPATH=str(ROOT), **extra)
        cmd = [sys.executable, __file__, "--child", json.dumps([method, T, backward, 3, what])]
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
        if r.returncode:
            err = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else r.returncode
            print(f"  {method} T={T} {what}: failed: {err}", file=sys.stderr)
            return None
        result.update(json.loads(r.stdout.strip().splitlines()[-1]))
    return result


def fitted_exponent(rows: list[dict], lo: int = 4096) -> float | None:
    pts = [(math.log(r["T"]), math.log(r["seconds"])) for r in rows if r["T"] >= lo]
    if len(pts) < 2:
        return None
    mx, my = sum(p[0] for p in pts) / len(pts), sum(p[1] for p in pts) / len(pts)
    return sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)


def have_fast_transformers() -> bool:
    try:
        import fast_transformers.causal_product  # noqa: F401
    except ImportError:
        return False
    return True


def step_latency(positions: list[int]) -> list[dict]:
    """Per-token step latency of the LM at several positions: linear (real prefill) vs softmax KV cache.

    The linear state is reached by a chunked prefill of ``pos`` tokens. The softmax baseline's cache is
    filled with random keys/values of the same length (its step cost depends on the cache length only;
    prefilling 1M tokens with softmax attention is the quadratic cost we are avoiding).
    """
    import torch

    from models import LinearTransformerLM, ModelConfig
    from models.layers import KVState

    cfg = dict(vocab_size=16, d_model=128, n_layers=4, n_heads=2)
    lin = LinearTransformerLM(ModelConfig(**cfg, state_dtype="float64")).eval()
    soft = LinearTransformerLM(ModelConfig(**cfg, attention="softmax")).eval()
    rows = []
    g = torch.Generator().manual_seed(0)
    with torch.inference_mode():
        state, done = None, 0
        for pos in positions:
            while done < pos:  # prefill in 64k pieces: constant memory
                n = min(1 << 16, pos - done)
                _, state = lin.hidden(torch.randint(4, 8, (1, n), generator=g), state)
                done += n
            lat_lin = _time_steps(lin, state)
            kv = tuple(
                KVState(torch.randn(1, 2, pos, 64), torch.randn(1, 2, pos, 64), torch.zeros(1, 3, 3 * 128))
                for _ in range(4)
            )
            lat_soft = _time_steps(soft, kv)
            del kv
            rows.append({"position": pos, "linear_ms": lat_lin * 1e3, "softmax_kv_ms": lat_soft * 1e3})
    return rows


def _time_steps(model, state, n: int = 50) -> float:
    import torch

    tok = torch.tensor([5])
    model.step(tok, state)
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        model.step(tok, state)  # always from the same state: the position stays fixed
        times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--max-t", type=int, default=1 << 18, help="largest sequence length")
    ap.add_argument("--positions", type=int, nargs="+", default=[1_000, 100_000, 1_000_000])
    ap.add_argument("--threads", type=int, default=None, help="torch threads for every method (default: all cores)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
        os.environ["STRANDLINE_BENCH_THREADS"] = str(args.threads)  # children read it
    if args.child:
        print(json.dumps(run_one(*json.loads(args.child))))
        return

    print(f"# torch {torch.__version__}, {torch.get_num_threads()} threads, B={B} H={H} head_dim={D} float32")
    methods = [m for m in METHODS if m != "fast_transformers" or have_fast_transformers()]
    if "fast_transformers" not in methods:
        print("# fast_transformers not installed (make bench-deps): its rows are skipped")
    Ts = [t for t in (1024, 4096, 16384, 65536, 262144) if t <= args.max_t]
    results: dict[tuple[str, bool], list[dict]] = {}
    print(f"{'method':<18}{'T':>8}{'fwd s':>10}{'fwd MB':>10}{'fwd+bwd s':>12}{'fwd+bwd MB':>12}")
    for method in methods:
        for T in Ts:
            if T > MAX_T[method]:
                continue
            f = measure(method, T, False)
            fb = measure(method, T, True) if T <= MAX_T_BACKWARD.get(method, T) else None
            for key, r in ((False, f), (True, fb)):
                if r:
                    results.setdefault((method, key), []).append(r)
            cells = [f"{r['seconds']:.4f}" if r else "-" for r in (f,)] + [_mb(f)]
            cells += [f"{fb['seconds']:.4f}" if fb else "-", _mb(fb)]
            print(f"{method:<18}{T:>8}{cells[0]:>10}{cells[1]:>10}{cells[2]:>12}{cells[3]:>12}", flush=True)
    print("\n# fitted exponent of time vs T (T >= 4096; 1.0 = linear, 2.0 = quadratic)")
    for (method, bwd), rows in results.items():
        e = fitted_exponent(rows)
        if e is not None:
            print(f"{method:<18}{'fwd+bwd' if bwd else 'fwd':<8} {e:.2f}")
    _print_ratios(results)
    print("\n# LM step latency (d_model=128, 4 layers; median of 50 steps)")
    print(f"{'position':>10}{'linear ms':>12}{'softmax KV ms':>16}")
    for r in step_latency(args.positions):
        print(f"{r['position']:>10}{r['linear_ms']:>12.3f}{r['softmax_kv_ms']:>16.3f}", flush=True)


def _mb(r) -> str:
    return "-" if not r or r["peak_mb"] is None else f"{r['peak_mb']:.0f}"


def _print_ratios(results) -> None:
    def get(method, T):
        return next((r for r in results.get((method, True), []) if r["T"] == T), None)

    print("\n# fwd+bwd ratios at T=65536 (peer time / chunked time; memory chunked vs peer)")
    ours = get("chunked", 65536)
    for peer in ("fast_transformers", "sdpa"):
        r = get(peer, 65536)
        if ours and r:
            mem = f"{_mb(ours)} MB vs {_mb(r)} MB"
            print(f"chunked vs {peer:<18} {r['seconds'] / ours['seconds']:6.1f}x faster   peak {mem}")


if __name__ == "__main__":
    main()
