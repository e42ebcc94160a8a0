"""GPU check and speed of the attention backends, in one run that prints one table (< 8 min on an H200).

    python benchmarks/gpu.py                      # on a CUDA machine with the gpu extra (pip install -e '.[gpu]')
    python benchmarks/gpu.py --device cpu --quick # smoke test of every code path on CPU (tests/test_backends.py, slow)

Sections, each a block of rows of the table:
1. exactness: Strandline's FLA-backed op against its pure-torch op (the reference) in float32: outputs,
   final state and all gradients (initial state included), chunked and recurrent, with and without γ;
2. op speed, forward+backward at T = 4k … 1M (B=1, H=4, head dim 64, bf16 on GPU): Strandline (auto
   backend), the pure-torch op, FLA's ``chunk_simple_gla`` called directly (no normalizer: the floor
   our [v, 1] column costs against) and causal SDPA (FlashAttention on GPU), up to where each fits;
3. the LM's training throughput at 131,072-token windows with the recipe's model and batch
   (configs/dna/131k-gpu.yaml: bf16 autocast, activation checkpointing), auto backend vs pure torch vs
   the softmax baseline of the same size (batch 1: quadratic);
4. the scan: bases/s of the same LM in inference, chunks of 131,072 with the state carried.
On CPU FLA runs only with TRITON_INTERPRET=1 (slow); without it its rows say why they are missing.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from strandline.models import LinearTransformerLM, ModelConfig  # noqa: E402
from strandline.models.ops.backends import fla_status  # noqa: E402
from strandline.models.ops.linear import AttnState, linear_attention  # noqa: E402

ROWS: list[tuple[str, str, str, str]] = []  # (section, case, value, note): the one table printed at the end


def row(section: str, case: str, value: str, note: str = "") -> None:
    ROWS.append((section, case, value, note))
    print(f"{section:<10} {case:<44} {value:>14}  {note}", flush=True)


@contextlib.contextmanager
def backend(name: str):
    """Every op call inside uses this backend (the LM's layers read STRANDLINE_BACKEND on each call)."""
    old = os.environ.get("STRANDLINE_BACKEND")
    os.environ["STRANDLINE_BACKEND"] = name
    try:
        yield
    finally:
        os.environ.pop("STRANDLINE_BACKEND") if old is None else os.environ.__setitem__("STRANDLINE_BACKEND", old)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def timed(fn, device: torch.device, reps: int = 3, budget_s: float = 20.0) -> float:
    """Best of ``reps`` after a warm-up (one run when a run exceeds a third of the budget)."""
    fn()
    sync(device)
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        sync(device)
        best = min(best, time.perf_counter() - t0)
        if best > budget_s / 3:
            break
    return best


def exactness(device: torch.device, T: int) -> None:
    """FLA path vs pure op, float32: the worst relative error over outputs, states and gradients."""
    why = fla_status() if device.type == "cuda" or os.environ.get("TRITON_INTERPRET") == "1" else "needs CUDA"
    if why:
        row("exact", "fla vs torch", "-", why[:80])
        return
    for mode in ("chunked", "recurrent"):
        for decay in (None, [0.999, 0.99, 0.9, 1.0]):
            g = torch.Generator(device="cpu").manual_seed(0)
            base = [torch.randn(1, T, 4, 64, generator=g) for _ in range(3)]
            base[0], base[1] = F.elu(base[0]) + 1, F.elu(base[1]) + 1
            base += [torch.rand(1, 4, 64, 64, generator=g), torch.rand(1, 4, 64, generator=g)]
            res = []
            for name in ("fla", "torch"):
                xs = [x.to(device).requires_grad_() for x in base]
                out, st = linear_attention(*xs[:3], AttnState(*xs[3:]), mode=mode, decay=decay, backend=name)
                w = torch.linspace(-1, 1, out.numel(), device=device).view(out.shape)
                ((out * w).sum() + st.S.sum() + st.z.sum()).backward()
                res.append([out, st.S, st.z] + [x.grad for x in xs])
            err = max(((a - b).abs().max() / b.abs().max()).item() for a, b in zip(*res, strict=True))
            ok = "ok" if err < 1e-4 else "FAIL (> 1e-4)"
            row("exact", f"{mode} decay={'yes' if decay else 'no'} T={T}", f"{err:.1e}", ok)


def op_speed(device: torch.device, lengths: list[int], dtype: torch.dtype) -> None:
    """Forward+backward seconds per method and T; stops a method once it exceeds its time or memory."""
    have_fla = not fla_status() and (device.type == "cuda" or os.environ.get("TRITON_INTERPRET") == "1")

    def ours(name):
        def f(q, k, v):
            with backend(name):
                return linear_attention(F.elu(q) + 1, F.elu(k) + 1, v, decay=0.999)[0]

        return f

    def fla_direct(q, k, v):  # FLA's own op: same decay, no normalizer, its own layout
        from fla.ops.simple_gla import chunk_simple_gla

        gamma = torch.full((q.shape[2],), 0.999, device=q.device).log()
        return chunk_simple_gla(F.elu(q) + 1, F.elu(k) + 1, v, g_gamma=gamma, scale=1.0)[0]

    def sdpa(q, k, v):
        return F.scaled_dot_product_attention(*(x.transpose(1, 2) for x in (q, k, v)), is_causal=True)

    methods = {"strandline (auto)": ours("auto"), "strandline (pure torch)": ours("torch")}
    if have_fla:
        methods["fla chunk_simple_gla (direct)"] = fla_direct
    methods["sdpa (causal, flash on GPU)"] = sdpa
    limits = {"sdpa (causal, flash on GPU)": 1 << 18 if device.type == "cuda" else 1 << 14}
    if not have_fla:
        row("op", "fla chunk_simple_gla (direct)", "-", "flash-linear-attention not usable here")
    done = set()
    for T in lengths:
        for name, fn in methods.items():
            if name in done or T > limits.get(name, T):
                continue
            q, k, v = (torch.randn(1, T, 4, 64, device=device, dtype=dtype, requires_grad=True) for _ in range(3))

            def step(fn=fn, q=q, k=k, v=v):
                out = fn(q, k, v)
                out.backward(torch.ones_like(out))

            try:
                secs = timed(step, device)
            except torch.OutOfMemoryError:
                row("op", f"{name} T={T}", "OOM")
                done.add(name)
                continue
            row("op", f"{name} T={T}", f"{secs * 1e3:.2f} ms", f"{T / secs / 1e6:.2f} M tok/s fwd+bwd")
            if secs > 30:
                done.add(name)
            del q, k, v
    if device.type == "cuda":
        torch.cuda.empty_cache()


def lm_config(quick: bool, attention: str) -> ModelConfig:
    cfg = yaml.safe_load((ROOT / "configs/dna/131k-gpu.yaml").read_text())["model"]["model"]
    if quick:  # CPU smoke test: the same code path, a tiny model
        cfg.update(d_model=32, n_layers=2, n_heads=2, chunk_size=32)
    return ModelConfig(**{**cfg, "attention": attention})


def training(device: torch.device, window: int, batch: int, quick: bool, steps: int) -> None:
    """Training tokens/s: forward, loss, backward and an AdamW step (bf16 autocast on GPU)."""
    # the softmax baseline runs batch 1: its T² step at batch 8 would take minutes (tokens/s stays comparable)
    for label, attention, be, b in (("linear, auto", "linear", "auto", batch),
                                    ("linear, pure torch", "linear", "torch", batch),
                                    ("softmax baseline", "softmax", "auto", 1)):  # fmt: skip
        torch.manual_seed(0)
        model = LinearTransformerLM(lm_config(quick, attention)).to(device).train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        x = torch.randint(4, 8, (b, window + 1), device=device)

        def step(model=model, opt=opt, x=x):
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
                logits, _ = model(x[:, :-1])
                loss = F.cross_entropy(logits.float().flatten(0, 1), x[:, 1:].flatten())
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        with backend(be):
            try:
                secs = timed(step, device, reps=steps, budget_s=60)
                peak = f"peak {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB" if device.type == "cuda" else ""
                row("train", f"{label} window={window} batch={b}", f"{b * window / secs:,.0f} tok/s", peak)
            except torch.OutOfMemoryError:
                row("train", f"{label} window={window} batch={b}", "OOM")
        del model, opt
        if device.type == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()


def scan(device: torch.device, bases: int, chunk: int, quick: bool) -> None:
    """Bases/s of the LM in inference mode over one long record, the state carried chunk to chunk."""
    model = LinearTransformerLM(lm_config(quick, "linear")).to(device).eval()
    x = torch.randint(4, 8, (1, bases), device=device)
    for be in ("auto", "torch"):

        def run(model=model, x=x):
            state = None
            with (
                torch.inference_mode(),
                torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"),
            ):
                for t0 in range(0, bases, chunk):
                    logits, state = model(x[:, t0 : t0 + chunk], state)
                    logits.float().log_softmax(-1)  # the per-base score the scanner writes

        with backend(be):
            secs = timed(run, device, reps=2, budget_s=60)
        row("scan", f"backend={be} {bases:,} bases, chunks of {chunk:,}", f"{bases / secs:,.0f} bases/s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--quick", action="store_true", help="small sizes: a smoke test of every code path")
    args = ap.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("no CUDA device here; use --device cpu --quick for the smoke test")
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU ({os.cpu_count()} cores)"
    print(f"# {name}, torch {torch.__version__}, fla: {fla_status() or 'ok'}")
    t_start = time.perf_counter()
    if args.quick:
        exactness(device, 100)
        op_speed(device, [256, 1024], torch.float32)
        training(device, 256, 2, quick=True, steps=1)
        scan(device, 4096, 1024, quick=True)
    else:
        exactness(device, 4096)
        op_speed(device, [1 << p for p in (12, 14, 16, 18, 20)], torch.bfloat16)
        training(device, 131072, 8, quick=False, steps=3)
        scan(device, 1 << 24, 131072, quick=False)
    print(f"\n# one table ({time.perf_counter() - t_start:.0f} s)")
    print(f"{'section':<10} {'case':<44} {'value':>14}  note")
    for r in ROWS:
        print(f"{r[0]:<10} {r[1]:<44} {r[2]:>14}  {r[3]}")


if __name__ == "__main__":
    main()
