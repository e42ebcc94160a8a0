"""The model card (README.md) of a DNA model trained on the multi-genome corpus, from what is on record.

Nothing in the card is typed by hand: the training files come from the corpus manifest (``data/corpus.json``:
source package, bases, GC%, licence, sha256), the recipe and tokens seen from the recipe YAML and the model's
``config.json``, the held-out panel from the panel record (``benchmarks/results/dna_panel.json``, written by
``benchmarks/dna_panel.py --save``), and the context curve from a ``benchmarks/context.py curve`` output saved as
text. Measured facts of the run (wall time, peak RSS) are passed as options and printed as given.

    python benchmarks/corpus_card.py data/models/dna-corpus --recipe configs/dna/corpus-tbptt-cpu.yaml \\
        --summary "..." --wall-min 75 --peak-rss-mb 1124 --curve runs/curve.txt
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.dna_panel import markdown  # noqa: E402

MANIFEST = ROOT / "data" / "corpus.json"
PANEL = ROOT / "benchmarks" / "results" / "dna_panel.json"


def training_files(manifest: dict) -> str:
    """Every train genome (read by training) and val genome (read for selection only), as a markdown table."""
    lines = [
        "| file | organism | kind | role | bases | GC% | source | licence | sha256 |",
        "| --- | --- | --- | --- | ---: | ---: | --- | --- | --- |",
    ]
    for split, role in (("train", "training"), ("val", "selection only")):
        for e in manifest["genomes"]:
            if e["split"] != split:
                continue
            src = e["source"]
            where = f"{src['type']} `{src['package']}` {src['version']}"
            lines.append(
                f"| `{e['file']}` | {e['organism']} | {e['kind']} | {role} | {e['bases']:,} | {e['gc']:.1f} | {where} "
                f"| {e['licence']} | `{e['sha256']}` |"
            )
    return "\n".join(lines)


def panel_table(record: dict) -> str:
    """The panel record's table (markdown), its command, date and commit."""
    out = [markdown(record["columns"], [[str(c) for c in r] for r in record["rows"]]), ""]
    out.append(f"Measured by `{record['command']}` on {record['date']} at commit {record['commit']}.")
    out += [f"- {c}" for c in record.get("caveats", [])]
    return "\n".join(out)


def merge(base: dict, layer: dict) -> dict:
    """``layer``'s keys over ``base``'s, nested mappings merged key by key (lists and values replaced)."""
    for k, v in layer.items():
        if isinstance(v, dict) and isinstance(base.get(k), dict):
            merge(base[k], v)
        else:
            base[k] = v
    return base


def tokens_seen(recipe: dict, steps: int) -> int:
    data = recipe["data"]["init_args"]
    return steps * int(data["batch_size"]) * int(data["window"])


def memory_section(trained: dict, shipped: dict, note: str) -> list[str]:
    """What the k-mer memory's tables are at scan time, when ``config.json`` sets them apart from the recipe (the
    tables hold no weights: their size and decay are read at load)."""
    keys = ("kmer_buckets", "kmer_decay")
    if all(trained.get(k) == shipped.get(k) for k in keys):
        return []
    state = len(shipped["kmer_orders"]) * shipped["kmer_buckets"] * (4 * 8 + 4)  # 4 float64 counts + an owner

    def fmt(cfg: dict) -> str:
        return f"{cfg.get('kmer_buckets'):,} buckets per order, decay {cfg.get('kmer_decay')}"

    lines = [
        "## Memory at scan time",
        "",
        f"Trained with {fmt(trained)} (the recipe); shipped, and so scanned, with {fmt(shipped)} (`config.json`). "
        "The tables hold no weights: their size and each order's decay are read when the model loads. "
        f"A scan's carried k-mer tables are then {state / 1e9:.2f} GB in float64 (`--state_dtype float32`: about "
        "half), the same at any position.",
    ]
    if note:
        lines += ["", note]
    return lines + [""]


def render(args) -> str:
    model_dir = Path(args.model)
    cfg = json.loads((model_dir / "config.json").read_text())
    m, training = cfg["model"], cfg.get("training") or {}
    recipe_paths = [Path(r) for r in args.recipe]
    recipe: dict = {}
    for rp in recipe_paths:  # layered as `strandline fit --config A --config B` layers them: later keys win
        merge(recipe, yaml.safe_load((ROOT / rp if not rp.is_absolute() else rp).read_text()))
    recipe_cmd = " ".join(f"--config {rp.as_posix()}" for rp in recipe_paths)
    manifest = json.loads(Path(args.manifest).read_text())
    steps = int(training.get("global_step") or 0)
    tokens = tokens_seen(recipe, steps)
    data = recipe["data"]["init_args"]
    name = args.name or model_dir.name
    parts = [
        f"# {name}: {args.title}",
        "",
        args.summary,
        "",
        f"Architecture: {m['n_layers']} layers, d_model {m['d_model']}, {m['n_heads']} heads, {m['attention']} "
        f"attention (gate {m.get('gate')}, normalizer {m.get('normalizer')}), short conv {m.get('conv_width')}, "
        f"k-mer memory orders {m.get('kmer_orders')} with {m.get('kmer_buckets'):,} buckets; {args.params:,} "
        "parameters. Tokenizer: DNA (`A C G T N` plus specials), one token per base.",
        "",
        "## Training data",
        "",
        "The multi-genome corpus (`python -m strandline.data.fetch_corpus`, manifest `data/corpus.json`): every file "
        "the training read, and the val genomes it was selected on. The test panel below was never read by training "
        "or selection.",
        "",
        training_files(manifest),
        "",
        "## Recipe",
        "",
        f"`{' + '.join(rp.as_posix() for rp in recipe_paths)}`: {steps:,} optimizer steps of {data['batch_size']} x {int(data['window']):,} "
        f"bases = {tokens / 1e6:.1f}M tokens, in {args.wall_min:.0f} minutes on one CPU thread of the shared 2-core "
        f"machine ({tokens / (args.wall_min * 60):,.0f} tokens/s), peak RSS {args.peak_rss_mb:,} MB.",
        "",
        "```bash",
        "python -m strandline.data.fetch_corpus",
        f"OMP_NUM_THREADS=1 strandline fit {recipe_cmd}",
        f"strandline export {recipe.get('checkpoint', {}).get('dirpath', 'runs/.../checkpoints')}/last.ckpt my-{name}",
        "```",
        "",
    ]
    if args.compare:
        parts += [args.compare, ""]
    parts += memory_section(recipe["model"]["model"], m, args.memory)
    parts += [
        "## Held-out metrics",
        "",
        "Bits per base of whole genomes no training or selection read, each streamed as `strandline scan` reads it "
        "(the state carried across each record), beside the best Markov-k counted on the same training genomes and "
        "the previous default:",
        "",
        panel_table(json.loads(Path(args.panel).read_text())),
        "",
    ]
    parts += [
        "## Intended use",
        "",
        "Per-base surprisal tracks of genomes of any kind (`strandline scan`), finding repeats (a repeat read again "
        "scores near 0 bits) and generation; the held-out panel above says how far it transfers.",
        "",
        "```bash",
        f"strandline scan data/models/{name} genome.fa.gz -o genome.bedGraph",
        "```",
        "",
    ]
    if args.curve:
        parts += ["## Context curve", "", Path(args.curve).read_text().strip(), ""]
    parts += [
        "## Limits",
        "",
        args.limits.strip(),
        "",
        "Licence of the weights: MIT, as the code ([LICENSE](../../../LICENSE)).",
        "",
    ]
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model", help="the model directory whose README.md is written")
    ap.add_argument("--recipe", required=True, nargs="+", help="the recipe YAML(s) it was trained with, in order")
    ap.add_argument("--name", help="the model's name (default: the folder's)")
    ap.add_argument("--title", default="a DNA model trained on many genomes")
    ap.add_argument("--summary", default="")
    ap.add_argument("--compare", default="", help="a paragraph on the recipe comparison")
    ap.add_argument("--limits", default="- Trained on CPU for a short budget; a small model.")
    ap.add_argument("--memory", default="", help="a paragraph on the scan-time memory (when config.json sets it)")
    ap.add_argument("--params", type=int, required=True)
    ap.add_argument("--wall-min", type=float, required=True, help="training wall time, minutes (measured)")
    ap.add_argument("--peak-rss-mb", type=int, required=True, help="peak RSS of the training process (measured)")
    ap.add_argument("--curve", help="a text file with the context curve (benchmarks/context.py curve output)")
    ap.add_argument("--panel", default=str(PANEL))
    ap.add_argument("--manifest", default=str(MANIFEST))
    args = ap.parse_args(argv)
    text = render(args)
    out = Path(args.model) / "README.md"
    tmp = out.with_suffix(".md.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(out)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
