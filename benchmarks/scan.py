"""Genome-scan benchmark: bases/s and peak RSS of chunk-recurrent scanning vs step mode vs a softmax model
scanning with a sliding window of its training context (what people do with HyenaDNA/NT-style models).

    .venv/bin/python benchmarks/scan.py                          # default: ~5 min on 2 idle cores (18 min under heavy load)
    .venv/bin/python benchmarks/scan.py --sizes 1M,10M,50M       # the flat-memory target (50M: ~17 min at 50k bases/s)
    .venv/bin/python benchmarks/scan.py --big_sizes 1M           # the 131k-gpu model size at 1M bases

The input survey row times the header pre-pass that ``scan`` runs before scoring (names, lengths, duplicate
and empty-input checks) on the same file, plain and gzip-compressed (level 1), as a fraction of the scan.

Models: the shipped default DNA model (``data/models/dna-corpus-tbptt`` when present, else a random-initialised model
with the architecture of ``configs/dna/tiny-cpu.yaml``; speed does not depend on the weights) and the model
size of ``configs/dna/131k-gpu.yaml`` (random weights). The softmax baseline has the same sizes with
``attention: softmax``. Each scan runs ``strandline.app.scan.scan`` end to end (FASTA parsing, bedGraph writing) in a
fresh subprocess, whose peak RSS (``ru_maxrss``) is reported. Input: the shipped H. pylori genome tiled into
one record of the requested length (a chromosome-length record). Step mode runs on a short prefix and is
extrapolated (its cost per base is constant). The sliding-window baseline scores the second half of windows
of the training context L, stride L/2 (each base sees L/2..L context); for L = 131072 a CPU cannot run one
window in reasonable time, so its time is extrapolated from measured windows of 4k-16k with a fit
a*L + b*L^2 (say so in the table). FLOP/s fraction = model FLOPs per base * bases/s / measured matmul FLOP/s.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
GENOME = ROOT / "data" / "genomes" / "h_pylori_G27.fasta.gz"
SHIPPED = ROOT / "data" / "models" / "dna-corpus-tbptt"


def parse_size(s: str) -> int:
    s = s.strip().upper()
    mult = {"K": 1_000, "M": 1_000_000, "G": 1_000_000_000}.get(s[-1], 1)
    return int(float(s[:-1] if s[-1] in "KMG" else s) * mult)


def model_config(yaml_path: Path, **over) -> dict:
    import yaml

    cfg = yaml.safe_load(yaml_path.read_text())
    model = dict(cfg["model"]["model"])
    model.update(over)
    return model


def window_of(yaml_path: Path) -> int:
    import yaml

    return int(yaml.safe_load(yaml_path.read_text())["data"]["init_args"]["window"])


def build_models(work: Path) -> dict:
    """{name: (model dir, softmax twin dir, training context, note)} for the two sizes."""
    import torch

    from strandline.models import LinearTransformerLM, ModelConfig

    out = {}
    for name, yml in (("tiny", ROOT / "configs/dna/tiny-cpu.yaml"), ("131k-size", ROOT / "configs/dna/131k-gpu.yaml")):
        if yml.exists():
            cfg, note = model_config(yml, checkpoint_activations=False), f"{yml.relative_to(ROOT)}"
        else:
            cfg = {"d_model": 512, "n_layers": 8, "n_heads": 8}
            note = "d512 L8 H8 (config missing)"
        torch.manual_seed(0)
        lin = work / f"{name}-linear"
        if name == "tiny" and SHIPPED.is_dir():
            lin, note = SHIPPED, "data/models/dna-corpus-tbptt (trained)"
        else:
            LinearTransformerLM(ModelConfig(**cfg)).save(lin, tokenizer="dna")
        soft = work / f"{name}-softmax"
        LinearTransformerLM(ModelConfig(**{**cfg, "attention": "softmax", "decay": None})).save(soft, tokenizer="dna")
        out[name] = (lin, soft, window_of(yml) if yml.exists() else 131072, note)
    return out


def make_fasta(path: Path, n: int) -> None:
    """One record of n bases: the H. pylori genome tiled (real sequence), 80 bases per line."""
    from strandline.data.fasta import read_fasta
    from strandline.data.tokenizers import DNATokenizer

    genome = DNATokenizer().decode(next(iter(read_fasta(GENOME).values()))).encode()
    with open(path, "wb") as f:
        f.write(b">tiled_h_pylori\n")
        done = 0
        while done < n:
            piece = genome[: n - done]
            f.writelines(piece[i : i + 80] + b"\n" for i in range(0, len(piece), 80))
            done += len(piece)


def matmul_flops(n: int = 1024, reps: int = 10) -> float:
    import torch

    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t)
    return 2 * n**3 / best


def flops_per_base(model_dir: Path, window: int | None = None) -> float:
    """Forward FLOPs per scored base: 2*params of the matmuls + the attention op (or softmax scores)."""
    cfg = json.loads((model_dir / "config.json").read_text())["model"]
    D, L, H, V = cfg["d_model"], cfg["n_layers"], cfg["n_heads"], cfg["vocab_size"]
    hid = int(cfg.get("mlp_ratio", 4.0) * D)
    dense = L * (3 * D * D + D * D + 2 * D * hid) + D * V
    K = D // H
    if window is None:  # chunked linear attention: C x C scores, state read and update, per head
        C = cfg.get("chunk_size", 64)
        attn = L * H * (2 * C * (K + K + 1) + 4 * K * (K + 1))
        return 2 * dense + attn
    # sliding window of L tokens, stride L/2: each window costs dense*L + causal scores ~ L^2*D per layer,
    # shared by L/2 scored bases
    per_window = 2 * dense * window + L * 2 * window * window * D
    return per_window / (window / 2)


# ---- workers (each in a fresh process, so ru_maxrss is its own) ---------------------------------------
def worker(spec: dict) -> dict:
    import numpy as np
    import torch

    torch.set_num_threads(spec["threads"])
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if spec["kind"] == "scan":
        from strandline.app.scan import scan
        from strandline.tasks.scan.args import ScanArgs

        if spec.get("monitor"):
            _start_monitor(spec["monitor"], Path(spec["out"]))
        t = time.perf_counter()
        scan(ScanArgs(spec["model"], [spec["fasta"]], spec["out"], chunk=spec["chunk"]))
        dt = time.perf_counter() - t
        os.unlink(spec["out"])
        return {"seconds": dt, "bases": spec["n"], "rss_mb": _rss_mb(), "rss_start_mb": rss0 / 1024,
                "survey_s": _survey_seconds(spec["fasta"])}  # fmt: skip
    from strandline.data.fasta import iter_fasta
    from strandline.tasks.scan import load_for_scan, score_sequence

    ids = next(iter_fasta(spec["fasta"], spec["n"])).ids
    model = load_for_scan(spec["model"])
    if spec["kind"] == "step":
        t = time.perf_counter()
        step = score_sequence(model, ids, mode="step")
        dt = time.perf_counter() - t
        chunk = score_sequence(model, ids, chunk=spec["chunk"])
        diff = float(np.nanmax(np.abs(step - chunk)))
        return {"seconds": dt, "bases": len(ids), "rss_mb": _rss_mb(), "max_abs_diff_bits": diff}
    # softmax sliding window: windows of L, stride L/2, the first window scores everything
    L = spec["window"]
    x = torch.from_numpy(ids.astype(np.int64))
    with torch.inference_mode():
        model(x[None, : min(L, 64)])
        t = time.perf_counter()
        scored, start = 0, 0
        while scored == 0 or (scored < len(ids) and time.perf_counter() - t < spec["budget_s"]):  # >= 1 window
            model(x[None, start : start + L])
            scored = start + L if start == 0 else scored + L // 2
            start += L // 2
        dt = time.perf_counter() - t
    return {"seconds": dt, "bases": min(scored, len(ids)), "rss_mb": _rss_mb()}


def _survey_seconds(fasta: str) -> dict:
    """Seconds of the input survey (the pre-pass ``scan`` runs before scoring) on the plain file and a gzip copy."""
    import gzip
    import shutil

    from strandline.tasks.scan.inputs import survey_inputs

    gz = fasta + ".gz"
    with open(fasta, "rb") as src, gzip.open(gz, "wb", compresslevel=1) as dst:
        shutil.copyfileobj(src, dst)
    out = {}
    for name, path in (("plain", fasta), ("gzip", gz)):
        t = time.perf_counter()
        survey_inputs([path])
        out[name] = time.perf_counter() - t
    os.unlink(gz)
    return out


def _start_monitor(log: str, out: Path, every: float = 15.0) -> None:
    """Log (seconds, bases done, peak RSS MB, RSS MB) every ``every`` s: evidence for runs too long to finish.

    Bases done = the end coordinate of the last complete line of the scan's part file.
    """
    import threading

    part = out.with_name(f".{out.name}.scan") / f"part0.logprob{out.suffix}"
    t0 = time.perf_counter()

    def loop():
        with open(log, "w") as f:
            f.write("seconds\tbases_done\tpeak_rss_mb\trss_mb\n")
            while True:
                time.sleep(every)
                done = 0
                try:
                    with open(part, "rb") as p:
                        p.seek(max(0, p.seek(0, 2) - 200))
                        done = int(p.read().split(b"\n")[-2].split(b"\t")[2])
                except (OSError, IndexError, ValueError):
                    pass
                st = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
                hwm, rss = (int(st[k].split()[0]) / 1024 for k in ("VmHWM", "VmRSS"))
                f.write(f"{time.perf_counter() - t0:.0f}\t{done}\t{hwm:.0f}\t{rss:.0f}\n")
                f.flush()

    threading.Thread(target=loop, daemon=True).start()


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def run_worker(spec: dict) -> dict:
    r = subprocess.run(
        [sys.executable, __file__, "--_worker", json.dumps(spec)], capture_output=True, text=True, cwd=ROOT
    )
    if r.returncode:
        raise RuntimeError(f"worker failed: {spec['kind']}: {r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def softmax_131k(soft: Path, fasta: Path, threads: int, L: int) -> tuple[float, float, str]:
    """Seconds per window of L for the softmax model, fitted from 4k/8k/16k windows when L is large."""
    if L <= 16384:
        r = run_worker({"kind": "window", "model": str(soft), "fasta": str(fasta), "n": 4 * L, "window": L,
                        "budget_s": 60, "threads": threads})  # fmt: skip
        return r["bases"] / r["seconds"], r["rss_mb"], "measured"
    Ls, ts, rss = [4096, 8192, 16384], [], 0.0
    for w in Ls:  # one window each: the first window scores all w bases, so seconds/window = seconds
        r = run_worker({"kind": "window", "model": str(soft), "fasta": str(fasta), "n": w, "window": w,
                        "budget_s": 0, "threads": threads})  # fmt: skip
        ts.append(r["seconds"])
        rss = max(rss, r["rss_mb"])
    # a non-negative fit through the smallest and largest windows (timings on a shared box are noisy)
    b = max(0.0, (ts[-1] / Ls[-1] - ts[0] / Ls[0]) / (Ls[-1] - Ls[0]))
    a = max(0.0, ts[0] / Ls[0] - b * Ls[0])
    t_L = a * L + b * L * L
    return (L / 2) / t_L, float("nan"), f"extrapolated from {Ls} windows (a*L+b*L^2, {t_L:.0f} s/window)"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="1M", help="sizes for the tiny model, e.g. 1M,10M,50M")
    p.add_argument("--big_sizes", default="100k", help="sizes for the 131k-gpu model size")
    p.add_argument("--step_prefix", default="2000,100", help="bases for step mode (tiny, big), extrapolated")
    p.add_argument("--threads", type=int, default=1, help="torch threads per run (1: this shared 2-core box)")
    p.add_argument("--chunk", type=int, default=8192)
    p.add_argument("--json", help="also write the rows as JSON here")
    p.add_argument("--models", default="tiny,131k-size", help="which model sizes to run")
    p.add_argument("--skip_baselines", action="store_true", help="only the chunk-recurrent scans")
    p.add_argument("--monitor", help="log RSS and bases done every 15 s of each scan to this file (suffix .SIZE)")
    p.add_argument("--_worker", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args._worker:
        print(json.dumps(worker(json.loads(args._worker))))
        return
    import torch

    torch.set_num_threads(args.threads)
    peak = matmul_flops()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        models = build_models(tmp)
        step_n = [parse_size(s) for s in args.step_prefix.split(",")]
        for (name, (lin, soft, ctx, note)), sizes, sn in zip(
            models.items(), (args.sizes, args.big_sizes), step_n, strict=True
        ):
            if name not in args.models.split(","):
                continue
            sizes = [parse_size(s) for s in sizes.split(",") if s]
            fasta = tmp / "genome.fa"
            make_fasta(fasta, max(4 * min(ctx, 16384), sn))
            f_lin = flops_per_base(lin)
            step = {"bases": 1, "seconds": float("inf"), "rss_mb": float("nan"), "max_abs_diff_bits": float("nan")}
            if not args.skip_baselines:
                step = run_worker({"kind": "step", "model": str(lin), "fasta": str(fasta), "n": sn, "chunk": args.chunk,
                                   "threads": args.threads})  # fmt: skip
            step_bps = step["bases"] / step["seconds"]
            for n in sizes:
                part = tmp / f"g{n}.fa"
                make_fasta(part, n)
                r = run_worker({"kind": "scan", "model": str(lin), "fasta": str(part), "n": n, "chunk": args.chunk,
                                "out": str(tmp / "o.bedGraph"), "threads": args.threads,
                                "monitor": f"{args.monitor}.{name}.{n}" if args.monitor else None})  # fmt: skip
                part.unlink()
                bps = n / r["seconds"]
                rows.append([name, "chunk-recurrent", n, bps, r["rss_mb"], bps / step_bps if step_bps else float("nan"), f_lin * bps / peak,
                             f"{note}; RSS at start {r['rss_start_mb']:.0f} MB"])  # fmt: skip
                sv = r["survey_s"]
                rows.append([name, "survey (pre-pass)", n, n / sv["plain"], float("nan"), float("nan"), 0.0,
                             f"plain {sv['plain']:.2f} s ({100 * sv['plain'] / r['seconds']:.2f}% of the scan); "
                             f"gzip {sv['gzip']:.2f} s ({100 * sv['gzip'] / r['seconds']:.2f}%)"])  # fmt: skip
            if args.skip_baselines:
                continue
            rows.append([name, "step (--mode step)", step["bases"], step_bps, step["rss_mb"], 1.0, f_lin * step_bps / peak,
                         f"prefix, extrapolated; max |chunk-step| = {step['max_abs_diff_bits']:.1e} bits"])  # fmt: skip
            sbps, srss, how = softmax_131k(soft, fasta, args.threads, ctx)
            rows.append([name, f"softmax window {ctx}", None, sbps, srss, sbps / step_bps,
                         flops_per_base(soft, ctx) * sbps / peak, f"stride {ctx // 2}; {how}"])  # fmt: skip
    print(f"\nmatmul peak (1024^3 fp32, {args.threads} thread(s)): {peak / 1e9:.1f} GFLOP/s; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")  # fmt: skip
    hdr = f"{'model':<10} {'method':<22} {'bases':>10} {'bases/s':>10} {'peak RSS MB':>11} {'x step':>8} {'FLOP/s %':>8}  note"
    print(hdr + "\n" + "-" * len(hdr))
    for m, meth, n, bps, rss, xs, frac, note in rows:
        ns = "-" if n is None else f"{n:,}"
        rs = "-" if rss != rss else f"{rss:.0f}"
        print(f"{m:<10} {meth:<22} {ns:>10} {bps:>10.0f} {rs:>11} {xs:>8.1f} {100 * frac:>7.1f}%  {note}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
