"""Inference forms of the short causal convolution, side by side in one run: depthwise ``conv1d`` (the peer,
what training and scans run) against the in-place multiply-adds ``ShortConv`` runs on CPU without gradients
and with oneDNN off (the summarizer's reader and the scan job turn it off).

    python benchmarks/short_conv.py                 # ~3 min on one thread
    python benchmarks/short_conv.py --quick         # the smoke test: small inputs, one round

Table 1: one convolution call per shape, ms (best of 5 after a warm-up), ``conv1d`` with oneDNN on (torch's
default) and off (as the summarizer's reader runs it, see ``tasks/summarize/features.py``) beside the
multiply-adds. Table 2: the job that runs it, in one process, the two forms alternating round by round (best
of ``--rounds``): ``Summarizer.summarize`` over ``--summary-kb`` of a document (the ACL paper shipped in
``data/documents``, repeated) with the shipped summarizer, and the shipped default DNA model's forward over
``--scan-mb`` of H. pylori in 8,192-base chunks, state carried and oneDNN off, as ``strandline scan`` runs it.
Times are process CPU time on ``--threads`` threads (1 by default): on a machine shared with other jobs, wall
time measures the scheduler, CPU time the work.
"""

from __future__ import annotations

import argparse
import gzip
import time
from functools import partial
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from strandline.models import layers, load
from strandline.models.layers import multiply_adds  # the form ShortConv runs (timed here)

ROOT = Path(__file__).resolve().parents[1]
SHAPES = [(1, 1024, 288, 4), (1, 8192, 192, 8), (16, 263, 192, 8), (8, 4096, 384, 4)]  # B, T, C, width


def _cpu(fn) -> float:
    t = time.process_time()
    fn()
    return time.process_time() - t


def call_table(shapes) -> list[list[str]]:
    rows = []
    print("| shape [B, T, C], width | conv1d, oneDNN on (ms) | conv1d, oneDNN off (ms) | multiply-adds (ms) |")
    print("| --- | ---: | ---: | ---: |")
    for B, T, C, width in shapes:
        x, w, b = torch.randn(B, T + width - 1, C), torch.randn(C, 1, width), torch.randn(C)
        conv = partial(F.conv1d, x.transpose(1, 2), w, b, groups=C)
        cells = []
        with torch.no_grad():
            for fn, onednn in ((conv, True), (conv, False), (partial(multiply_adds, x, w, b, T), True)):
                torch.backends.mkldnn.enabled = onednn
                fn()
                cells.append(min(_cpu(fn) for _ in range(5)) * 1e3)
        torch.backends.mkldnn.enabled = True
        rows.append([f"[{B}, {T}, {C}], {width}", *(f"{c:.2f}" for c in cells)])
        print("| " + " | ".join(rows[-1]) + " |", flush=True)
    return rows


def _conv1d_form(self, x, cache):
    """``ShortConv.forward`` as it ran before the multiply-adds: conv1d (the gradient path), outputs detached."""
    with torch.enable_grad():
        y, buf = FORWARD(self, x, cache)
    return y.detach(), buf.detach()


FORWARD = layers.ShortConv.forward


def job_table(summary_kb: int, scan_mb: float, rounds: int) -> list[list[str]]:
    from strandline.tasks.summarize import load_summarizer

    text = (ROOT / "data" / "documents" / "2022.acl-long.286.txt").read_text(encoding="utf-8")
    text = (text * (summary_kb * 1000 // len(text) + 1))[: summary_kb * 1000]
    summarizer = load_summarizer(ROOT / "data" / "models" / "summarizer")
    dna = load(ROOT / "data" / "models" / "dna-corpus-tbptt").eval()
    with gzip.open(ROOT / "data" / "genomes" / "h_pylori_G27.fasta.gz", "rt") as f:
        seq = "".join(line.strip() for line in f if not line.startswith(">"))[: int(scan_mb * 1e6)]
    ids = torch.from_numpy(np.frombuffer(seq.upper().encode(), np.uint8).copy()).long()
    ids = torch.searchsorted(torch.tensor([65, 67, 71, 84]), ids).clamp(max=3)[None]  # A C G T -> 0..3

    def scan():
        torch.backends.mkldnn.enabled = False  # as the scan job runs (tasks/scan/job.py)
        try:
            with torch.inference_mode():
                state = None
                for a in range(0, ids.shape[1], 8192):
                    _, state = dna(ids[:, a : a + 8192], state)
        finally:
            torch.backends.mkldnn.enabled = True

    jobs = {f"summarize {summary_kb} kB": lambda: summarizer.summarize(text, 120), f"scan forward {scan_mb:g} Mb": scan}
    best = {(job, form): float("inf") for job in jobs for form in ("conv1d", "multiply-adds")}
    for r in range(rounds):
        for form in ("conv1d", "multiply-adds") if r % 2 == 0 else ("multiply-adds", "conv1d"):
            layers.ShortConv.forward = _conv1d_form if form == "conv1d" else FORWARD
            try:
                for job, fn in jobs.items():
                    best[job, form] = min(best[job, form], _cpu(fn))
            finally:
                layers.ShortConv.forward = FORWARD
    print(f"\n| job (CPU s, best of {rounds}) | conv1d | multiply-adds | speed-up |")
    print("| --- | ---: | ---: | ---: |")
    rows = []
    for job in jobs:
        a, b = best[job, "conv1d"], best[job, "multiply-adds"]
        rows.append([job, f"{a:.2f}", f"{b:.2f}", f"{a / b:.2f}x"])
        print("| " + " | ".join(rows[-1]) + " |")
    return rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    ap.add_argument("--rounds", type=int, default=4, help="alternating rounds of the jobs (best kept)")
    ap.add_argument("--summary-kb", type=int, default=400, help="document size of the summarize job")
    ap.add_argument("--scan-mb", type=float, default=1.0, help="bases of the scan job (Mb)")
    ap.add_argument("--quick", action="store_true", help="small inputs, one round: a smoke test")
    ap.add_argument("--save", action="store_true", help="write benchmarks/results/short-conv.json (then results.py)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(f"# torch {torch.__version__}, {args.threads} thread(s), float32, process CPU time")
    if args.quick:
        calls, jobs = call_table([(1, 256, 96, 4)]), job_table(5, 0.02, 1)
    else:
        calls, jobs = call_table(SHAPES), job_table(args.summary_kb, args.scan_mb, args.rounds)
    if args.save:
        import sys

        sys.path.insert(0, str(ROOT / "benchmarks"))
        from results import record

        argv = [a for a in (sys.argv[1:] if argv is None else argv) if a != "--save"]
        path = record(
            "short-conv",
            "Short convolution with oneDNN off (summaries, scans): conv1d against in-place multiply-adds (CPU)",
            " ".join(["python benchmarks/short_conv.py", *argv]),
            [f"job (CPU s, best of {1 if args.quick else args.rounds})", "conv1d", "multiply-adds", "speed-up"],
            jobs,
            machine=f"The project's build VM: 2 CPU cores shared with other jobs; {args.threads} thread(s); process "
            "CPU time, the two forms alternating in one process.",
            caveats=[
                "One call per shape [B, T, C], width (ms, best of 5; conv1d with oneDNN on / off; multiply-adds): "
                + "; ".join(f"{r[0]}: {r[1]} / {r[2]}; {r[3]}" for r in calls)
                + ".",
                "summarize: the shipped summarizer over the shipped ACL paper repeated (its reader turns oneDNN off, "
                "so its convolution runs the multiply-adds; the conv1d column is the code before); scan forward: the default "
                "DNA model over H. pylori in 8,192-base chunks, state carried, oneDNN off as in the scan job.",
            ],
        )
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
