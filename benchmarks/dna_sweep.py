"""The DNA size sweep: held-out bits/base against parameters, FLOPs and tokens, at a fixed training compute.

Each point is a model directory exported from a run of ``configs/dna/sweep/d*.yaml`` (layered over the TBPTT
corpus recipe: the same corpus, memory and schedule, only the width differs; every width trained for the same
one-thread CPU time, fixed as its step count). The points are scored on the corpus' **val** genomes, read whole
as ``strandline scan`` reads them (``benchmarks/dna_panel.py --split val``): the val set selects, and the test
panel is left for the chosen model. Beside them: the trained Markov-k, the online Markov model and any
``--model`` already shipped, scored the same way.

    python -m strandline.data.fetch_corpus
    for d in 32 64 128; do
      strandline fit --config configs/dna/corpus-tbptt-cpu.yaml --config configs/dna/sweep/d$d.yaml
      strandline export runs/sweep/d$d/checkpoints/last.ckpt runs/sweep/d$d/dna-sweep-d$d
    done
    python benchmarks/dna_sweep.py --point runs/sweep/d32/dna-sweep-d32 --point runs/sweep/d64/dna-sweep-d64 \\
        --point runs/sweep/d128/dna-sweep-d128 --model data/models/dna-corpus-tbptt --threads 2 --save
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import dna_panel  # noqa: E402
from benchmarks.roofline import flops_per_token  # noqa: E402

BASE_RECIPE = ROOT / "configs" / "dna" / "corpus-tbptt-cpu.yaml"


def tokens_per_step(recipe: Path = BASE_RECIPE) -> int:
    """Training tokens of one optimizer step of the base recipe: batch size x window."""
    import yaml

    data = yaml.safe_load(recipe.read_text(encoding="utf-8"))["data"]["init_args"]
    return int(data["batch_size"]) * int(data["window"])


def describe(path: str, per_step: int) -> dict:
    """Width, parameters, training FLOPs per token, steps and tokens of a model directory."""
    meta = json.loads((Path(path) / "config.json").read_text(encoding="utf-8"))
    model = dna_panel.load_model(path)
    params = sum(p.numel() for p in model.parameters())  # a tied embedding once
    steps = int(meta.get("training", {}).get("global_step") or 0)
    return {
        "d_model": model.config.d_model,
        "kmer_orders": list(model.config.kmer_orders),
        "params": params,
        "train_flops_per_token": 3 * sum(flops_per_token(model.config, train=False).values()),
        "steps": steps,
        "tokens": steps * per_step,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--point", action="append", required=True, help="a sweep point's model directory (repeatable)")
    ap.add_argument("--model", action="append", default=[], help="another model directory to score beside them")
    ap.add_argument("--manifest", type=Path, default=dna_panel.DEFAULT_MANIFEST, help="corpus manifest")
    ap.add_argument("--corpus", type=Path, default=dna_panel.DEFAULT_CORPUS, help="folder of the fetched genomes")
    ap.add_argument("--recipe", type=Path, default=BASE_RECIPE, help="the recipe the points were layered over")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    ap.add_argument("--max-k", type=int, default=dna_panel.MAX_K, help="highest Markov order counted")
    ap.add_argument("--quick", type=int, metavar="N", help="smoke test: only the first N bases of every genome")
    ap.add_argument("--save", action="store_true", help="write benchmarks/results/dna_sweep.json")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    per_step = tokens_per_step(args.recipe)
    points = {p: describe(p, per_step) for p in [*args.point, *args.model]}  # before the long run: a folder may go
    panel_args = argparse.Namespace(
        manifest=args.manifest, corpus=args.corpus, model=[*args.point, *args.model],
        val=False, split="val", max_k=args.max_k, piece=65536, quick=args.quick,
        cache=None if args.quick else ROOT / "runs" / "panel-cache",
    )  # fmt: skip
    res = dna_panel.run(panel_args)
    genomes = [r["genome"] for r in res["rows"]]
    bases = {r["genome"]: r["scored"] for r in res["rows"]}
    cols = ["model", "width", "k-mer orders", "parameters", "training FLOPs/token", "steps", "tokens", *genomes,
            "mean (by base)", "bacteria mean"]  # fmt: skip
    bacteria = [r["genome"] for r in res["rows"] if r["kind"] == "bacterium"]

    def cells(name: str) -> list[str]:
        b = {r["genome"]: r["bits"][name] for r in res["rows"]}
        mean = sum(b[g] * bases[g] for g in genomes) / max(sum(bases.values()), 1)
        bac = sum(b[g] for g in bacteria) / max(len(bacteria), 1)
        return [*(f"{b[g]:.4f}" for g in genomes), f"{mean:.4f}", f"{bac:.4f}"]

    rows = []
    for name in res["names"][:3]:
        rows.append([name, "", "", "", "", "", "", *cells(name)])
    for p in [*args.point, *args.model]:
        d = points[p]
        sweep = p not in args.model  # another model's steps are of its own recipe: its card gives its tokens
        rows.append([p if not sweep else f"{p} (sweep)", str(d["d_model"]), ",".join(map(str, d["kmer_orders"])),
                     f"{d['params']:,}", f"{d['train_flops_per_token'] / 1e6:.2f} M", f"{d['steps']:,}",
                     f"{d['tokens'] / 1e6:.1f} M" if sweep else "(card)", *cells(Path(p).name)])  # fmt: skip
    print()
    print(dna_panel.markdown(cols, rows))
    if args.save:
        from benchmarks.results import record

        cmd = "python benchmarks/dna_sweep.py --save" + "".join(f" --point {p}" for p in args.point)
        cmd += "".join(f" --model {p}" for p in args.model)
        path = record(
            "dna_sweep",
            "DNA size sweep at fixed compute (bits/base on the val genomes, read whole)",
            cmd,
            cols,
            rows,
            machine=f"The project's build VM: 2 CPU cores shared with other jobs; {args.threads} thread(s).",
            caveats=[
                "Every sweep point is the TBPTT corpus recipe with one width; each trained for 45 minutes of one "
                "thread at its measured speed on this machine, fixed as its step count (so the machine's load "
                "does not change the result); tokens = steps x batch x window.",
                "Training FLOPs/token: 3 x the forward count of benchmarks/roofline.py --count.",
                "Val genomes select; the chosen model is then measured once on the test panel (dna_panel).",
            ],
        )
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
