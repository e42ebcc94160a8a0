"""``scan --calls`` checked against a public annotated bacterial genome: how the called regions overlap mobile
elements (transposase, integrase and phage genes), rRNA, tRNA and repeat regions, against a shuffled background.

    python -m strandline.data.fetch_annotated                     # the genome, once (apt-get download)
    OMP_NUM_THREADS=1 python benchmarks/calls_validation.py [--model dna-corpus-2] [--shuffles 1000] [--save]

The genome (default: *Leptospira kirschneri* (RefSeq NZ_AHMY02), 75 contigs, 4.59 Mb, with its RefSeq annotation) is scanned
with the model (``--calls``: ``--window`` bases, robust |z| >= ``--z``; reused from ``--out`` when there). Feature
classes, from the GenBank file (Biopython):

- mobile: CDS whose ``/product`` names a transposase, an integrase, a recombinase, an IS element or a phage
  protein, and ``mobile_element`` features;
- rRNA, tRNA, repeat_region; other CDS (every CDS not mobile).

For each kind of call (high: more surprising than the record's background; low: less) and each class: the called
bases inside the class (observed), the same for calls moved to random places of their own contig (length kept;
``--shuffles`` times; expected = the mean), the enrichment observed/expected and the empirical p-value
(1 + shuffles with at least the observed overlap) / (1 + shuffles). The class's share of the genome is the
enrichment 1 line.
"""

from __future__ import annotations

import argparse
import gzip
import re
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MOBILE = re.compile(r"transposase|integrase|recombinase|\bIS\d|IS[A-Z]?\d+ family|insertion (sequence|element)|"
                    r"phage|prophage|mobile element|conjugal|relaxase", re.I)  # fmt: skip
CLASSES = ("mobile", "rRNA", "tRNA", "repeat_region", "other CDS")


def feature_masks(genbank: Path) -> tuple[dict[str, int], dict[str, dict[str, np.ndarray]], dict[str, int]]:
    """(contig lengths, {class: {contig: bool mask}}, {class: feature count}) of a GenBank file."""
    from Bio import SeqIO

    lengths, masks, counts = {}, {c: {} for c in CLASSES}, dict.fromkeys(CLASSES, 0)
    opener = gzip.open if genbank.suffix == ".gz" else open
    with opener(genbank, "rt") as f:
        for rec in SeqIO.parse(f, "genbank"):
            n = len(rec.seq)
            lengths[rec.id] = n
            for c in CLASSES:
                masks[c][rec.id] = np.zeros(n, bool)
            for feat in rec.features:
                t = feat.type
                if t == "CDS":
                    product = " ".join(feat.qualifiers.get("product", []) + feat.qualifiers.get("note", []))
                    cls = "mobile" if MOBILE.search(product) else "other CDS"
                elif t == "mobile_element":
                    cls = "mobile"
                elif t in ("rRNA", "tRNA", "repeat_region"):
                    cls = t
                else:
                    continue
                counts[cls] += 1
                for part in feat.location.parts:
                    masks[cls][rec.id][int(part.start) : int(part.end)] = True
    return lengths, masks, counts


def read_calls(path: Path, lengths: dict[str, int]) -> list[tuple[str, int, int, str]]:
    """(record, start, end, kind) of a ``scan --calls`` BED, kind ``high`` or ``low`` (read by the report's reader)."""
    from strandline.tasks.report import read_calls as read_regions

    return [(r.record, r.start, r.end, r.name.partition(":")[0]) for r in read_regions(str(path), lengths)]


def overlap_stats(calls, lengths, masks, shuffles: int, seed: int = 0) -> dict:
    """{(kind, class): (observed bases, expected bases, p, calls hitting the class)} for kind in high/low/all."""
    rng = np.random.default_rng(seed)
    cums = {c: {k: np.concatenate([[0], np.cumsum(m, dtype=np.int64)]) for k, m in masks[c].items()} for c in CLASSES}
    out = {}
    for kind in ("high", "low", "all"):
        mine = [c for c in calls if kind == "all" or c[3] == kind]
        if not mine:
            continue
        contigs = np.array([c[0] for c in mine])
        starts = np.array([c[1] for c in mine])
        lens = np.array([c[2] - c[1] for c in mine])
        span = np.array([lengths[c] for c in contigs]) - lens
        random_starts = (rng.random((shuffles, len(mine))) * (span + 1)).astype(np.int64)
        for cls in CLASSES:
            obs = hits = 0
            sh = np.zeros(shuffles, np.int64)
            for i, contig in enumerate(contigs):
                cum = cums[cls][contig]
                a, n = starts[i], lens[i]
                inside = int(cum[a + n] - cum[a])
                obs, hits = obs + inside, hits + (inside > 0)
                r = random_starts[:, i]
                sh += cum[r + n] - cum[r]
            p = (1 + int((sh >= obs).sum())) / (1 + shuffles)
            out[(kind, cls)] = (obs, float(sh.mean()), p, hits, len(mine), int(lens.sum()))
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="dna-corpus-2")
    ap.add_argument(
        "--genbank", help="annotated genome (default: L. kirschneri NZ_AHMY02 from strandline.data.fetch_annotated)"
    )
    ap.add_argument("--out", default=str(ROOT / "runs" / "calls-validation"), help="scan outputs (reused when there)")
    ap.add_argument("--window", type=int, default=1000)
    ap.add_argument("--z", type=float, default=3.5)
    ap.add_argument("--shuffles", type=int, default=1000)
    ap.add_argument("--save", action="store_true")
    args = ap.parse_args(argv)
    if args.genbank:
        gb = Path(args.genbank)
    else:
        from strandline.data.fetch_annotated import fetch_annotated

        gb = fetch_annotated("L_kirschneri_NZ_AHMY02.gbk.gz")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    track, calls_bed = out / f"{args.model.replace('/', '_')}.bedGraph", out / f"calls-w{args.window}-z{args.z:g}.bed"
    if not track.is_file():
        from strandline.app.scan import scan
        from strandline.tasks.scan.args import ScanArgs

        scan(ScanArgs(args.model, [str(gb)], str(track), track="logprob"))
    lengths, masks, counts = feature_masks(gb)
    if not calls_bed.is_file():
        from strandline.data.calls import write_calls

        write_calls(calls_bed, track, lengths, args.window, args.z)
    calls = read_calls(calls_bed, lengths)  # records not in the GenBank file are refused there
    stats = overlap_stats(calls, lengths, masks, args.shuffles)
    genome = sum(lengths.values())
    share = {c: sum(int(m.sum()) for m in masks[c].values()) / genome for c in CLASSES}
    cols = ["calls", "class", "features", "share of genome", "called bases in class", "expected (shuffled)",
            "enrichment", "p", "calls touching it"]  # fmt: skip
    rows = []
    for (kind, cls), (obs, exp, p, hits, n, bases) in stats.items():
        rows.append([f"{kind} ({n} calls, {bases:,} bases)", cls, f"{counts[cls]:,}", f"{100 * share[cls]:.1f}%",
                     f"{obs:,}", f"{exp:,.0f}", f"{obs / exp:.2f}" if exp else "-", f"{p:.3f}", f"{hits}/{n}"])  # fmt: skip
    print(f"# {gb.name}: {len(lengths)} records, {genome:,} bases; model {args.model}; calls: {args.window}-base "
          f"windows, |z| >= {args.z}; {args.shuffles} shuffles")  # fmt: skip
    print(" | ".join(cols))
    for r in rows:
        print(" | ".join(r))
    if args.save:
        from benchmarks.results import record

        cmd = "OMP_NUM_THREADS=1 python benchmarks/calls_validation.py " + " ".join(
            sys.argv[1:] if argv is None else argv
        )
        record("calls-validation", "Calls against an annotated genome: mobile elements, RNA genes, repeats", cmd,
               cols, rows, machine="The project's build VM (2 CPU cores, shared); 1 thread.",
               caveats=[f"genome: {gb.name} ({len(lengths)} records, {genome:,} bases; RefSeq annotation); model "
                        f"{args.model}; scan --calls with {args.window}-base windows and |z| >= {args.z}.",
                        "mobile: CDS whose product names a transposase, integrase, recombinase, IS element or phage "
                        "protein, and mobile_element features; other CDS: the rest.",
                        f"expected: the mean over {args.shuffles} shuffles, each call moved to a random place of its "
                        "own contig (length kept); p: (1 + shuffles at least as high) / (1 + shuffles); enrichment 1 "
                        "is what a class's share of the genome predicts."])  # fmt: skip


if __name__ == "__main__":
    main()
