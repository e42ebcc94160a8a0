"""``strandline demo``: the main job end to end on data shipped in the repo.

1. train a tiny DNA model on the shipped H. pylori genome (LightningCLI): a short version of the k-mer-memory
   recipe configs/dna/recall-cpu.yaml;
2. export it to a model directory;
3. scan the genome with it in constant memory: bedGraph tracks, a per-record summary and a plot;
4. summarize the shipped ACL paper incrementally with the shipped summarizer;
5. write the scan's HTML report (igv.js, offline) and print its path.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from strandline.resources import resolve, shipped_path

CONFIG = "dna/recall-cpu.yaml"  # a shipped recipe (strandline.configs)
MODEL_DIR = "dna-model"  # in the work folder; a second demo replaces the model directory of the first


def demo(
    workdir: str = "demo-out",
    steps: int = 200,
    genome: str = "h_pylori_G27.fasta.gz",
    document: str = "2022.acl-long.286.txt",
    summarizer: str = "summarizer",
    budget: int = 120,
) -> int:
    """Train, export, scan and summarize on the shipped data; outputs go to ``workdir``.

    Args:
        workdir: folder for every output (checkpoints, model, tracks, plot, summary).
        steps: training steps (the full recipe, configs/dna/recall-cpu.yaml, uses 2,400).
        genome: FASTA to train on and to scan: a path, or the name of a genome shipped with strandline.
        document: text document to summarize: a path, or the name of a shipped document.
        summarizer: summarizer model directory: a path, or the name of a shipped model.
        budget: words in the summary.
    """
    os.environ.setdefault("WANDB_MODE", "offline")
    work = Path(workdir).resolve()
    genome_p, doc_p = resolve(genome, "genomes"), resolve(document, "documents")
    summ_p = resolve(summarizer, "models")
    _check_inputs(steps, budget, work, doc_p, summ_p)  # before training: steps 2 and 4 would find them after minutes
    work.mkdir(parents=True, exist_ok=True)
    timings = {}

    t0 = time.perf_counter()
    _banner(f"1/5 train a tiny DNA model on {Path(genome).name} ({steps} steps)")
    from strandline.app.train import build_cli

    ckpt_dir = work / "checkpoints"
    cli = build_cli(
        [
            "fit",
            "--config", str(shipped_path("configs", CONFIG)),
            f"--trainer.max_steps={steps}",
            f"--trainer.val_check_interval={max(1, min(steps, 100))}",
            f"--trainer.default_root_dir={work}",
            "--trainer.logger=lightning.pytorch.loggers.CSVLogger",
            f"--trainer.logger.save_dir={work / 'logs'}",
            f"--checkpoint.dirpath={ckpt_dir}",
            "--checkpoint.save_top_k=0",  # last.ckpt only: it holds the carried state (~170 MB with the memory)
            "--checkpoint.enable_version_counter=false",  # a second demo replaces its last.ckpt, no last-v1.ckpt
            f"--data.init_args.paths=[{genome_p}]",
        ]
    )  # fmt: skip
    timings["train"] = time.perf_counter() - t0

    _banner("2/5 export the checkpoint to a model directory")
    from strandline.app.export import export

    model_dir = export(cli.trainer.checkpoint_callback.last_model_path, str(work / MODEL_DIR), overwrite=True)
    _check_made("2/5 export", [Path(model_dir) / "config.json", Path(model_dir) / "model.safetensors"])

    t0 = time.perf_counter()
    _banner(f"3/5 scan {Path(genome).name} in constant memory (chunk-recurrent, float64 state)")
    from strandline.app.scan import scan
    from strandline.tasks.scan.args import ScanArgs

    tracks = ["logprob", "entropy"]
    records = scan(
        ScanArgs(
            model_dir,
            [genome_p],
            str(work / "scan.bedGraph"),
            track=tracks,
            summary=str(work / "scan-summary.tsv"),
            plot=str(work / "scan-logprob.png"),
            window=100,
            rename="accession",  # the NCBI header gi|…|ref|NC_011333.1| becomes NC_011333.1, the browser's name
        )
    )
    timings["scan"] = time.perf_counter() - t0
    made = [work / f"scan.{t}.bedGraph" for t in tracks] + [work / "scan-summary.tsv", work / "scan-logprob.png"]
    _check_made("3/5 scan", made)
    for r in records:
        print(f"  {r.name}: {r.length:,} bases, mean logprob {-r.sum_bits / max(r.scored, 1):.3f} bits/base")

    t0 = time.perf_counter()
    _banner(f"4/5 summarize {Path(document).name} incrementally ({budget} words)")
    from strandline.app.summarize import NO_SUMMARY, summarize

    if summarize(summ_p, doc_p, output=None, budget=budget, progress=False) != 0:
        return NO_SUMMARY  # summarize said why, in one line; the demo is not "done"
    timings["summarize"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    _banner("5/5 write the scan's report: one HTML page, opens offline")
    from strandline.app.scan import report

    page = work / "report.html"
    report(str(genome_p), [str(p) for p in made[: len(tracks)]], str(page), rename="accession",
           title=f"strandline demo: {Path(genome).name} read by the demo's model")  # fmt: skip
    _check_made("5/5 report", [page])
    timings["report"] = time.perf_counter() - t0

    _banner("done")
    print(f"  outputs in {work}:")
    for p in sorted(work.iterdir()):
        if p.is_file():
            print(f"    {p.name}")
    print("  seconds: " + ", ".join(f"{k} {v:.0f}" for k, v in timings.items()))
    print(f"  open the report in a browser: {page}")
    return 0


def _check_inputs(steps: int, budget: int, work: Path, document: str, summarizer: str) -> None:
    """Refuse what the later steps would refuse (the genome is read and checked by step 1 itself, at once)."""
    from strandline.data.documents import check_text_files
    from strandline.errors import UserInputError
    from strandline.models.persist.modeldir import check_model_dir_target
    from strandline.tasks.summarize import load_summarizer

    if steps < 1:  # 0 trains nothing (no checkpoint to export); -1 is Lightning's "train forever"
        raise UserInputError(f"--steps must be >= 1, got {steps}")
    if budget < 1:
        raise UserInputError(f"--budget must be >= 1, got {budget}")
    if work.exists() and not work.is_dir():
        raise UserInputError(f"--workdir {work}: exists and is not a directory")
    check_model_dir_target(work / MODEL_DIR, overwrite=True)  # a folder of the user's there is never replaced
    check_text_files([document])
    load_summarizer(summarizer)


def _check_made(step: str, paths: list[Path]) -> None:
    """Refuse to go on (and to print "done") when a step left an output missing or empty."""
    from strandline.errors import UserInputError

    bad = next((p for p in paths if not p.is_file() or p.stat().st_size == 0), None)
    if bad is not None:
        raise UserInputError(f"step {step}: {bad} is {'empty' if bad.is_file() else 'missing'}; the demo stops here")


def _banner(text: str) -> None:
    print(f"\n=== strandline demo: {text}", flush=True)
