"""Attention speed and memory against sequence length, with the peers measured in the same run.

    python benchmarks/attention.py                 # the full table (15 min at load 11 on 2 cores; idle: not measured)
    python benchmarks/attention.py --quick         # T <= 16384, no memory column (~1 min idle)
    python benchmarks/attention.py --threads 1     # the most repeatable on a shared machine

Rows: our chunked op, our recurrent op (small T), causal ``scaled_dot_product_attention`` (the softmax
alternative) and the paper's own CPU kernel, ``fast_transformers.causal_product.causal_dot_product``
(``make bench-deps``; skipped with a message when absent), with its normalization as in its
``CausalLinearAttention``. B=1, H=4, head dim 64, float32, elu+1 features.

Three timings per row: the forward and forward+backward of the op alone (q, k φ-mapped beforehand, as
leaves), and forward+backward with elu+1 applied inside (on both sides: what a training step pays; ours
through the model's feature map, which the chunked op applies block by block, fast-transformers' its own).
The upstream gradient (ones) is made before the clock starts and before the memory baseline: it
used to be made inside the timed step, a fresh [B, T, H, D] tensor on both sides (~30 ms and 64 MB
at T=65,536). Each (method, T) runs in fresh subprocesses: one times it (best of 3 after a warm-up, fewer
when 3 would take over ``TIME_BUDGET_S``, at least one; torch's one-time import on a first backward is paid
before any timing; default allocator), one measures the peak-RSS delta of the φ-included step
(``/proc/self/clear_refs`` reset after the inputs exist) with ``MALLOC_MMAP_THRESHOLD_`` low, so freed
tensors go back to the OS (that setting slows allocation, hence two). Then: the fitted exponent of time
against T, the speed-ups at the two longest T (from the columns, and "paired": the median over 3-9 pairs of
the φ-included fwd+bwd of both ops timed back to back, alternating, in one more process) with the chunked op's
backward/forward ratio (the median over 3-9 pairs of a no-grad forward and a forward+backward timed back to
back in the timing process, with its range), and the LM's
per-token ``step`` latency at positions 1k, 100k and 1M next to the softmax block's KV-cache step.
The load average at the start is printed: other work on the machine inflates every time, so compare
rows of one run, not runs.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:1] = [str(ROOT)]  # the repo instead of benchmarks/, where a script named like a stdlib module would shadow it

B, H, D = 1, 4, 64
METHODS = ("chunked", "recurrent", "sdpa", "fast_transformers")
# sdpa: T², ~20 s at 16k; recurrent: a per-token Python loop, ~20-50 s at 1k-4k on the loaded machine
MAX_T = {"chunked": 1 << 18, "recurrent": 1024, "sdpa": 1 << 14, "fast_transformers": 1 << 18}
MAX_T_BACKWARD = {"recurrent": 1024}  # autograd through a per-token Python loop: minutes beyond this
LINEAR = ("chunked", "recurrent", "fast_transformers")  # the methods that take φ-mapped q, k
TIMINGS = ("fwd", "fwdbwd", "fwdbwd_phi")  # op alone (φ applied beforehand) and φ included, on both sides
# seconds of repetitions per timing after its warm-up: a row of ~2-3 s (chunked at 262,144) gets 2-3, not one
# run that a load spike decides (measured at load 1.3-3.9: 3.04 s once; 1.80-1.85 s warm at load 0)
TIME_BUDGET_S = 8.0


def _rss_peak_reset() -> int:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset VmHWM to the current RSS
    return _status_kb("VmRSS")


def _status_kb(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


def _make_op(method: str):
    """The op alone: (q, k, v) -> output in the [B, T, H, D] layout; q, k already φ-mapped for linear methods."""
    import torch
    import torch.nn.functional as F

    from strandline.models.ops.linear import linear_attention

    if method in ("chunked", "recurrent"):
        return lambda q, k, v: linear_attention(q, k, v, mode=method)[0]
    if method == "sdpa":
        return lambda q, k, v: F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
        ).transpose(1, 2)
    from fast_transformers.causal_product import causal_dot_product

    def ft(Q, K, V, eps=1e-6):  # fast_transformers.attention.CausalLinearAttention, minus masking and φ
        Z = 1 / (torch.einsum("nlhi,nlhi->nlh", Q, K.cumsum(1)) + eps)
        out = causal_dot_product(
            Q.permute(0, 2, 1, 3).contiguous(), K.permute(0, 2, 1, 3).contiguous(), V.permute(0, 2, 1, 3).contiguous()
        )
        return out.permute(0, 2, 1, 3) * Z[..., None]

    return ft


def _make_fn(method: str, with_phi: bool):
    """(q, k, v) -> output; with ``with_phi`` the linear methods apply elu+1 to raw q, k inside (timed).

    Ours applies the model's feature map the way the model's layer does (``models/feature_maps.py``:
    Elu1 is pointwise, so the chunked op applies it inside, block by block); fast-transformers its own
    ``elu_feature_map`` (``F.elu(x) + 1``).
    """
    import torch.nn.functional as F

    from strandline.models.feature_maps import make_feature_map
    from strandline.models.ops.linear import linear_attention

    op = _make_op(method)
    if not with_phi or method not in LINEAR:
        return op
    if method == "fast_transformers":
        return lambda q, k, v: op(F.elu(q) + 1, F.elu(k) + 1, v)
    fm = make_feature_map("elu1", D, H)
    if method == "chunked" and fm.pointwise:
        return lambda q, k, v: linear_attention(q, k, v, mode=method, feature_map=fm.pointwise)[0]
    return lambda q, k, v: op(fm(q, is_query=True), fm(k), v)


def run_one(method: str, T: int, backward: bool, reps: int, what: str) -> dict:
    """Child process: the times (best of ``reps`` after a warm-up), the peak memory of one (method, T), or
    (``what="versus"``) the φ-included fwd+bwd of the chunked op and of peer ``method`` in alternating pairs."""
    import torch

    if os.environ.get("STRANDLINE_BENCH_THREADS"):
        torch.set_num_threads(int(os.environ["STRANDLINE_BENCH_THREADS"]))
    # torch's first backward in a process imports torch.fx's symbolic_shapes and sympy (autograd's _make_grads:
    # 0.25-0.45 s here), once per process and nobody's op: paid here, untimed. A row slower than 2 s used to
    # be timed on its first call, so the chunked op's T=262,144 backward was charged with this import.
    warm = torch.ones(1, requires_grad=True)
    (warm * 2).sum().backward()
    once = _timer(method, T)
    if what == "versus":  # both linear: the same inputs, made once
        ours = _timer("chunked", T, once.inputs)
        return {"versus": paired_times(lambda: ours("fwdbwd_phi"), lambda: once("fwdbwd_phi"), reps, 2 * TIME_BUDGET_S)}
    if what == "memory":  # fwd+bwd with φ included: what a training step pays
        timing = "fwdbwd_phi" if backward else "fwd"
        once(timing)  # warm-up: one-time allocations (thread pools, lazy init) are not this run's
        base = _rss_peak_reset()
        once(timing)
        return {"peak_mb": (_status_kb("VmHWM") - base) / 1024}
    result = {}
    for timing in TIMINGS if backward else TIMINGS[:1]:
        if timing == "fwdbwd_phi" and method not in LINEAR:  # softmax takes raw q, k: nothing to add
            result[timing] = result["fwdbwd"]
            continue
        result[timing] = best_time(lambda t=timing: once(t), reps)
    if backward and method == "chunked":  # the one backward/forward ratio the table reports
        result["pairs"] = paired_times(lambda: once("fwd"), lambda: once("fwdbwd"), reps, warm=False)
    return result


def _timer(method: str, T: int, inputs=None):
    """once(timing) -> seconds of one call of ``method`` at length T (``TIMINGS``); ``once.inputs``: the raw and
    φ-mapped inputs and the upstream gradient, made once and untimed (pass them on to share them)."""
    import torch
    import torch.nn.functional as F

    if inputs is None:
        torch.manual_seed(0)
        raw = [torch.randn(B, T, H, D) for _ in range(3)]
        phi = [F.elu(raw[0]) + 1, F.elu(raw[1]) + 1, raw[2]] if method in LINEAR else raw
        grad = torch.ones(B, T, H, D)  # the upstream gradient: made once, untimed (neither op's work)
        inputs = raw, phi, grad
    raw, phi, grad = inputs

    def once(timing: str) -> float:
        bwd = timing != "fwd"
        xs = [x.detach().requires_grad_(bwd) for x in (raw if timing == "fwdbwd_phi" else phi)]
        fn = _make_fn(method, timing == "fwdbwd_phi")
        t0 = time.perf_counter()
        if bwd:
            out = fn(*xs)
            out.backward(grad)
        else:
            with torch.no_grad():
                out = fn(*xs)
        return time.perf_counter() - t0

    once.inputs = inputs
    return once


def paired_times(
    a, b, reps: int, budget_s: float = TIME_BUDGET_S, most: int = 9, warm: bool = True
) -> list[list[float]]:
    """[a, b] seconds of adjacent calls, pair after pair, after one warm-up call of each that never counts
    (``warm``: not already done by the caller); the order alternates (a, b, then b, a, ...) so that a drifting load favours neither. At least ``reps`` pairs,
    more (up to ``most``) while they fit in ``budget_s``. Both calls of a pair see the same load, so each
    pair's ratio is its own measurement: two best-of columns can come from minutes apart (a quiet moment and
    a busy one), and their ratio moved by ±0.5 from run to run on a quiet machine."""
    if warm:
        a(), b()
    pairs, spent = [], 0.0
    while len(pairs) < reps or (len(pairs) < most and spent + spent / len(pairs) <= budget_s):
        if len(pairs) % 2:
            tb, ta = b(), a()
        else:
            ta, tb = a(), b()
        pairs.append([ta, tb])
        spent += ta + tb
    return pairs


def backward_ratio(pairs: list[list[float]]) -> tuple[float, float, float]:
    """(median, lowest, highest) of (fwd+bwd - fwd) / fwd over adjacent pairs."""
    return _spread([(fb - f) / f for f, fb in pairs])


def speedup(pairs: list[list[float]]) -> tuple[float, float, float]:
    """(median, lowest, highest) of peer time / our time over adjacent [ours, peer] pairs."""
    return _spread([peer / ours for ours, peer in pairs])


def _spread(ratios: list[float]) -> tuple[float, float, float]:
    ratios = sorted(ratios)
    return statistics.median(ratios), ratios[0], ratios[-1]


def best_time(run, reps: int, budget_s: float = TIME_BUDGET_S) -> float:
    """Best of ``reps`` calls of ``run`` (it returns seconds) after one warm-up call that never counts (the first
    call of a shape pays one-time costs); fewer when ``reps`` would take over ``budget_s``, at least one."""
    first = run()
    return min(run() for _ in range(max(1, min(reps, int(budget_s / first)))))


def measure(method: str, T: int, backward: bool, memory: bool, reps: int, versus: bool = False) -> dict | None:
    """Times with the default allocator; peak memory in a second process whose freed tensors go back to the OS;
    with ``versus`` instead, the φ-included fwd+bwd of the chunked op and of ``method`` in alternating pairs."""
    result = {"method": method, "T": T}
    jobs = (("time", {}), ("memory", {"MALLOC_MMAP_THRESHOLD_": "131072"}))[: 1 + memory]
    for what, extra in (("versus", {}),) if versus else jobs:
        env = dict(os.environ, PYTHONPATH=str(ROOT), **extra)
        cmd = [sys.executable, __file__, "--child", json.dumps([method, T, backward, reps, what])]
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
        if r.returncode:
            err = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else r.returncode
            print(f"  {method} T={T} {what}: failed: {err}", file=sys.stderr)
            return None
        result.update(json.loads(r.stdout.strip().splitlines()[-1]))
    return result


def fitted_exponent(rows: list[dict], key: str, lo: int = 4096) -> float | None:
    """Least-squares slope of log time against log T over the rows with T >= lo (1.0 = linear)."""
    pts = [(math.log(r["T"]), math.log(r[key])) for r in rows if r["T"] >= lo and r.get(key)]
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

    from strandline.models import LinearTransformerLM, ModelConfig
    from strandline.models.layers import KVState

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
    ap.add_argument("--quick", action="store_true", help="T <= 16384 (sdpa <= 4096), no memory, steps at 1k/10k")
    ap.add_argument("--no-memory", action="store_true", help="skip the peak-memory processes")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
        os.environ["STRANDLINE_BENCH_THREADS"] = str(args.threads)  # children read it
    if args.child:
        print(json.dumps(run_one(*json.loads(args.child))))
        return
    if args.quick:
        args.max_t, args.positions, args.no_memory = min(args.max_t, 16384), [1_000, 10_000], True

    print(f"# torch {torch.__version__}, {torch.get_num_threads()} threads, B={B} H={H} head_dim={D} float32")
    print(f"# load average at start: {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} cores")
    methods = [m for m in METHODS if m != "fast_transformers" or have_fast_transformers()]
    if "fast_transformers" not in methods:
        print("# fast_transformers not installed (make bench-deps): its rows are skipped")
    Ts = [t for t in (1024, 4096, 16384, 65536, 262144) if t <= args.max_t]
    rows: dict[str, list[dict]] = {}
    print("# fwd, fwd+bwd: the op alone (q, k already φ-mapped); +φ: elu+1 on raw q, k inside, fwd+bwd (MB: its peak)")
    print(f"{'method':<18}{'T':>8}{'fwd s':>10}{'fwd+bwd s':>12}{'+φ fwd+bwd s':>14}{'+φ MB':>8}")
    for method in methods:
        for T in Ts:
            if T > MAX_T[method] or (args.quick and method == "sdpa" and T > 4096):
                continue
            bwd = T <= MAX_T_BACKWARD.get(method, T)
            r = measure(method, T, bwd, not args.no_memory, reps=2 if args.quick else 3)
            if r is None:
                continue
            rows.setdefault(method, []).append(r)
            cells = [f"{r[key]:.4f}" if key in r else "-" for key in TIMINGS]
            print(f"{method:<18}{T:>8}{cells[0]:>10}{cells[1]:>12}{cells[2]:>14}{_mb(r):>8}", flush=True)
    print("\n# fitted exponent of time vs T (T >= 4096; 1.0 = linear, 2.0 = quadratic)")
    for method, rs in rows.items():
        es = [fitted_exponent(rs, key) for key in TIMINGS]
        print(f"{method:<18}" + "  ".join(f"{k} {e:.2f}" for k, e in zip(TIMINGS, es, strict=True) if e is not None))
    versus = {}
    if "fast_transformers" in rows:  # the speed-up targets' lengths: both ops in one process, alternating
        for T in Ts[-2:]:
            r = measure("fast_transformers", T, True, False, reps=2 if args.quick else 3, versus=True)
            if r is not None:
                versus[T] = r["versus"]
    _print_ratios(rows, Ts, versus)
    print("\n# LM step latency (d_model=128, 4 layers; median of 50 steps)")
    print(f"{'position':>10}{'linear ms':>12}{'softmax KV ms':>16}")
    for r in step_latency(args.positions):
        print(f"{r['position']:>10}{r['linear_ms']:>12.3f}{r['softmax_kv_ms']:>16.3f}", flush=True)


def _mb(r) -> str:
    return f"{r['peak_mb']:.0f}" if r and r.get("peak_mb") is not None else "-"


def _print_ratios(rows: dict[str, list[dict]], Ts: list[int], versus: dict[int, list] | None = None) -> None:
    """Peer time / chunked time at the two longest lengths (sdpa: at its longest), and chunked's backward / forward;
    ``versus``: [chunked, fast-transformers] φ-included fwd+bwd pairs per T, timed alternating in one process."""
    by_t = {m: {r["T"]: r for r in rs} for m, rs in rows.items()}
    ours = by_t.get("chunked", {})
    print(
        "\n# speed-up of chunked (peer time / chunked time, same run) and chunked backward / forward: (fwd+bwd - fwd) /"
    )
    print("# fwd of a no-grad forward and a forward+backward run back to back, the median over the pairs; 'paired':")
    print("# the φ-included fwd+bwd of both ops alternating in one process, the median of the pairs' speed-ups")
    sdpa_t = max(by_t.get("sdpa", {}), default=None)
    for T in sorted(set(Ts[-2:]) | ({sdpa_t} if sdpa_t else set())):
        o = ours.get(T)
        if not o or "fwdbwd" not in o:
            continue
        best = (o["fwdbwd"] - o["fwd"]) / o["fwd"]
        if o.get("pairs"):
            med, lo, hi = backward_ratio(o["pairs"])
            n = len(o["pairs"])
            cells = [
                f"T={T:<7} backward/forward {med:.2f} (median of {n} adjacent pairs, {lo:.2f}-{hi:.2f}; best-of columns {best:.2f})"
            ]
        else:
            cells = [f"T={T:<7} backward/forward {best:.2f} (best-of columns)"]
        for peer in ("fast_transformers", "sdpa"):
            p = by_t.get(peer, {}).get(T)
            if p and "fwdbwd" in p:
                mem = f" (peak {_mb(o)} MB vs {_mb(p)} MB)" if "peak_mb" in o and "peak_mb" in p else ""
                cells.append(
                    f"vs {peer}: op {p['fwdbwd'] / o['fwdbwd']:.2f}x, +φ {p['fwdbwd_phi'] / o['fwdbwd_phi']:.2f}x{mem}"
                )
                if peer == "fast_transformers" and (versus or {}).get(T):
                    med, lo, hi = speedup(versus[T])
                    cells.append(f"+φ paired {med:.2f}x (median of {len(versus[T])} pairs, {lo:.2f}-{hi:.2f})")
        print("   ".join(cells))


if __name__ == "__main__":
    main()
