"""Interleaved A/B of the chunked op against an older revision and fast-transformers, in one process.

    python benchmarks/op_ab.py --rev 9ab5913 --length 65536 --threads 1     # process CPU time, best of 3
    python benchmarks/op_ab.py --rev 9ab5913 --length 262144 --threads 2    # wall time
    python benchmarks/op_ab.py --rev f9ad280 --op-alone --threads 2          # φ applied beforehand (untimed)
    python benchmarks/op_ab.py --rev 324bf2b --phases --length 262144        # CPU and page faults by phase

On a machine shared with other work, runs minutes apart see different loads (``benchmarks/attention.py``
times each method in its own processes, one after another). Here the three rows alternate repetition by
repetition, so drifting load hits them alike: the old revision's op with elu+1 applied outside (as that
revision's layer did), this tree's op as the model's layer calls it (φ applied inside), and
fast-transformers' ``causal_dot_product`` with elu+1 (``make bench-deps``). B=1, H=4, head dim 64,
float32, forward and forward+backward (the upstream gradient is made before the clock starts: it is
neither op's work). ``--op-alone`` times the ops on φ-mapped q, k instead (φ applied beforehand, as
``attention.py``'s first two columns), so the backward / forward column is the op's own. With one thread
the clock is process CPU time (which does not see the hypervisor's page-fault time, so wall-time gains
from fewer faults do not show), else wall time.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:1] = [str(ROOT)]  # the repo instead of benchmarks/


def old_models(rev: str, where: Path):
    """The attention ops of ``rev`` (its models/ops*.py and their imports) as package ``old_models``."""
    pkg = where / "old_models"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    ops = ("ops.py", "ops_chunked.py", "ops_kept.py", "ops_gated.py", "ops_delta.py")
    for name in (*ops, "backends.py", "feature_maps.py", "errors.py"):
        r = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:models/{name}"], capture_output=True, text=True)
        if r.returncode == 0:
            (pkg / name).write_text(r.stdout)
    sys.path.insert(0, str(where))
    import old_models

    return old_models


def old_op(rev: str, where: Path):
    """``linear_attention`` of ``rev`` (``old_models``)."""
    old_models(rev, where)
    from old_models.ops import linear_attention

    return linear_attention


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rev", default="9ab5913", help="the older revision (default: before φ inside the op)")
    ap.add_argument("--length", type=int, default=65536)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--old-inside", action="store_true", help="call the old op with φ inside too (it must take it)")
    ap.add_argument("--op-alone", action="store_true", help="every row on φ-mapped q, k (φ applied beforehand)")
    ap.add_argument("--phases", action="store_true", help="the two ops alone by phase: CPU user / kernel time, faults")
    args = ap.parse_args()
    import torch
    import torch.nn.functional as F
    from fast_transformers.causal_product import causal_dot_product

    from strandline.models.ops.linear import linear_attention

    torch.set_num_threads(args.threads)
    clock = time.process_time if args.threads == 1 else time.perf_counter

    def ft(Q, K, V, eps=1e-6):  # as in benchmarks/attention.py: CausalLinearAttention minus masking and φ
        Z = 1 / (torch.einsum("nlhi,nlhi->nlh", Q, K.cumsum(1)) + eps)
        qkv = (x.permute(0, 2, 1, 3).contiguous() for x in (Q, K, V))
        return causal_dot_product(*qkv).permute(0, 2, 1, 3) * Z[..., None]

    with tempfile.TemporaryDirectory() as tmp:
        old = old_op(args.rev, Path(tmp))
        fns = {
            f"{args.rev} op, elu+1 outside": lambda q, k, v: old(F.elu(q) + 1, F.elu(k) + 1, v)[0],
            f"{args.rev} op, φ inside": lambda q, k, v: old(q, k, v, feature_map="elu1")[0],
            "this op, φ inside (the layer's call)": lambda q, k, v: linear_attention(q, k, v, feature_map="elu1")[0],
            "fast-transformers, elu+1": lambda q, k, v: ft(F.elu(q) + 1, F.elu(k) + 1, v),
        }
        fns.pop(next(iter(fns)) if args.old_inside else f"{args.rev} op, φ inside")
        torch.manual_seed(0)
        raw = [torch.randn(1, args.length, 4, 64) for _ in range(3)]
        if args.op_alone:
            fns = {
                f"{args.rev} op": lambda q, k, v: old(q, k, v)[0],
                "this op": lambda q, k, v: linear_attention(q, k, v)[0],
                "fast-transformers": ft,
            }
            raw = [F.elu(raw[0]) + 1, F.elu(raw[1]) + 1, raw[2]]
        grad = torch.ones(1, args.length, 4, 64)
        if args.phases:
            phi = [F.elu(raw[0]) + 1, F.elu(raw[1]) + 1, raw[2]]
            fns = {args.rev: lambda q, k, v: old(q, k, v)[0], "this op": lambda q, k, v: linear_attention(q, k, v)[0]}
            return phases(fns, phi, grad, args.reps)
        times = {n: ([], []) for n in fns}
        for rep in range(args.reps + 1):  # the first round is a warm-up
            for name, fn in list(fns.items())[:: 1 if rep % 2 else -1]:  # order alternates: no row always first
                with torch.no_grad():
                    t0 = clock()
                    fn(*raw)
                    t1 = clock()
                xs = [x.detach().requires_grad_() for x in raw]
                t2 = clock()
                out = fn(*xs)
                out.backward(grad)
                t3 = clock()
                del out, xs
                if rep:
                    times[name][0].append(t1 - t0)
                    times[name][1].append(t3 - t2)
    kind = "process CPU time" if args.threads == 1 else "wall time"
    print(f"# T={args.length}, {args.threads} thread(s), {kind}, best of {args.reps} interleaved")
    print(f"# load average: {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} cores")
    peer = min(times[next(n for n in times if n.startswith("fast-transformers"))][1])
    print("| op | fwd s | fwd+bwd s | bwd / fwd | fast-transformers / this row |")
    print("| --- | --- | --- | --- | --- |")
    for name, (f, fb) in times.items():
        f, fb = min(f), min(fb)
        print(f"| {name} | {f:.3f} | {fb:.3f} | {(fb - f) / f:.2f} | {peer / fb:.2f}x |")


def phases(fns: dict, xs: list, grad, reps: int) -> None:
    """Per op and phase (forward without grad, forward with grad, backward): user and kernel CPU seconds and
    minor page faults (``getrusage``, best repetition by CPU), the ops alternating as in the main table."""
    import resource

    import torch

    def usage() -> tuple[float, float, int]:
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime, r.ru_stime, r.ru_minflt

    rows = {(n, p): [] for n in fns for p in ("fwd", "fwd with grad", "bwd")}
    for rep in range(reps + 1):
        for name, fn in list(fns.items())[:: 1 if rep % 2 else -1]:
            marks = [usage()]
            with torch.no_grad():
                fn(*xs)
            marks.append(usage())
            leaves = [x.detach().requires_grad_() for x in xs]
            marks.append(usage())
            out = fn(*leaves)
            marks.append(usage())
            out.backward(grad)
            marks.append(usage())
            del out, leaves
            for phase, (a, b) in zip(("fwd", "fwd with grad", "bwd"), ((0, 1), (2, 3), (3, 4)), strict=True):
                if rep:
                    rows[name, phase].append([y - x for x, y in zip(marks[a], marks[b], strict=True)])
    print(f"# T={len(grad[0])}, {torch.get_num_threads()} thread(s), best of {reps}; load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}")  # fmt: skip
    print("| op | phase | user s | kernel s | minor faults |")
    print("| --- | --- | --- | --- | --- |")
    for (name, phase), runs in rows.items():
        user, kernel, faults = min(runs, key=lambda r: r[0] + r[1])
        print(f"| {name} | {phase} | {user:.3f} | {kernel:.3f} | {faults:,} |")


if __name__ == "__main__":
    main()
