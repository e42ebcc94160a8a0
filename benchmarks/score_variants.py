"""Variant scoring: forked scoring vs naive re-scoring (variants/s), the cost of a fork, and a zero-shot check.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/score_variants.py            # ~5 min on one idle core
    .venv/bin/python benchmarks/score_variants.py --variants 1000 --naive 1 --skip-zero-shot

Table 1 (speed): simulated variants on the shipped H. pylori G27 genome (1.65 Mb; SNVs, and deletions and insertions
of 1-10 bases at random positions) scored with ``strandline score-variants``'s engine end to end (VCF checks, the
state carried along the genome, a fork per allele, the VCF written), from the contig start and with a warm-up, beside
naive re-scoring in the same run: for each of ``--naive`` of the same variants, the reference contig and the contig
with the variant applied are scored whole from scratch, and the LLR over the same window taken from those two
passes (its agreement with the forked LLR is shown). The forked rows split their time into carrying the state and
forking it (the marginal cost of one more variant).

Table 2 (fork cost): with the model's state carried 200 kb into the genome, one scored window (REF + 100 bases)
as a fork that keeps and restores the k-mer table rows it can write (what the engine does), as a plain call (the
state is a value: the k-mer table is copied whole), and as a donated call that changes the carried state (not a
fork: the lower bound).

Table 3 (zero-shot): within the CDS of a genome the model never trained on (the A. thaliana chloroplast, a
test-split genome of the corpus; ``strandline.data.fetch_annotated`` fetches its GenBank file), simulated nonsense
SNVs (a codon made a stop) and frameshifts (1-base deletions and insertions) should score lower than synonymous
SNVs. AUROC = P(LLR of a synonymous SNV > LLR of the other class), ties half, overall and within SNVs of the same
base change (pooled over the changes by pair count), for the model and for a Markov-k
baseline fitted on the same genome (k and the pseudo-count chosen on its last 20%, ``benchmarks/dna_quality.py``),
whose LLR is computed over the same windows. A 1-base deletion removes one scored base, an insertion adds one, so
their LLRs carry about +2 and -2 bits (a base's cost) beside what the model makes of the frame.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.dna_quality import choose_markov  # noqa: E402
from strandline.data.fasta import read_fasta  # noqa: E402
from strandline.data.tokenizers import BOS, DNA_LUT, ID_TO_CHAR  # noqa: E402
from strandline.tasks.scan import load_for_scan  # noqa: E402
from strandline.tasks.scan import variants as engine  # noqa: E402

GENOME = ROOT / "data" / "genomes" / "h_pylori_G27.fasta.gz"
MODEL = ROOT / "data" / "models" / "dna-corpus-2"
STOPS = {"TAA", "TAG", "TGA"}
COMPLEMENT = str.maketrans("ACGT", "TGCA")


@dataclass
class Table:
    """One printed table: ``### key: what``, the markdown table, then its notes; ``--save`` records it as it is."""

    key: str  # "Speed", "Fork cost" or "Zero-shot" (RECORDS)
    what: str
    header: list[str]
    align: str  # per column: "l" or "r"
    rows: list[list[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def show(self) -> Table:
        print(f"\n### {self.key}: {self.what}\n")
        print("| " + " | ".join(self.header) + " |")
        print("|" + "|".join("---" if a == "l" else "---:" for a in self.align) + "|")
        for row in self.rows:
            print("| " + " | ".join(row) + " |")
        if self.notes:
            print()
            print("\n".join(self.notes))
        return self


def text(ids: np.ndarray) -> str:
    return ID_TO_CHAR[ids].tobytes().decode()


def write_vcf(path: Path, chrom: str, rows: list[tuple[int, str, str]]) -> Path:
    """rows (0-based pos, REF, ALT), sorted here."""
    body = "".join(f"{chrom}\t{p + 1}\t.\t{r}\t{a}\t.\t.\t.\n" for p, r, a in sorted(rows))
    path.write_text("##fileformat=VCFv4.2\n#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO\n" + body)
    return path


def simulate(seq: str, n: int, rng) -> list[tuple[int, str, str]]:
    """n variants at random positions: 70% SNVs, 15% deletions and 15% insertions of 1-10 bases."""
    rows = []
    for p in sorted(rng.choice(np.arange(1, len(seq) - 20), n, replace=False)):
        kind, size = rng.random(), int(rng.integers(1, 11))
        if kind < 0.7:
            rows.append((p, seq[p], rng.choice([b for b in "ACGT" if b != seq[p]])))
        elif kind < 0.85:
            rows.append((p - 1, seq[p - 1 : p + size], seq[p - 1]))
        else:
            rows.append((p - 1, seq[p - 1], seq[p - 1] + "".join(rng.choice(list("ACGT"), size))))
    return rows


class Timers:
    """Seconds spent carrying the state and forking it, measured around the engine's two calls."""

    def __init__(self):
        self.carry = self.fork = 0.0
        self.forks = 0
        advance, bits = engine.Carry.advance, engine.Carry.bits

        def timed_advance(carry, bases):
            t = time.perf_counter()
            advance(carry, bases)
            self.carry += time.perf_counter() - t

        def timed_bits(carry, bases):
            t = time.perf_counter()
            out = bits(carry, bases)
            self.fork += time.perf_counter() - t
            self.forks += 1
            return out

        engine.Carry.advance, engine.Carry.bits = timed_advance, timed_bits
        self._restore = (advance, bits)

    def close(self):
        engine.Carry.advance, engine.Carry.bits = self._restore


def run_engine(lm, fasta: Path, vcf: Path, out: Path, window: int, warmup: int | None) -> tuple[float, Timers, dict]:
    import cyvcf2

    timers = Timers()
    try:
        t = time.perf_counter()
        args = engine.VariantArgs(str(MODEL), str(fasta), str(vcf), str(out), window=window, warmup=warmup)
        engine.score_variants(args, progress=False, model=lm)
        seconds = time.perf_counter() - t
    finally:
        timers.close()
    llr = {}
    for rec in cyvcf2.VCF(str(out)):
        value = rec.INFO.get("SL_LLR")
        llr[(rec.POS - 1, rec.REF, rec.ALT[0])] = value
    return seconds, timers, llr


@torch.inference_mode()
def whole_bits(lm, ids: np.ndarray, chunk: int = 8192) -> np.ndarray:
    """-log2 P of every base of a whole sequence scored from scratch (float64 sums; 0 for N)."""
    out, state, carry = [], None, BOS
    for i in range(0, len(ids), chunk):
        piece = ids[i : i + chunk]
        inp = torch.from_numpy(np.concatenate([[carry], piece[:-1]]).astype(np.int64))[None]
        logits, state = lm(inp, state, donate=True)
        lp = torch.log_softmax(logits[0, :, 4:8].double(), -1) / np.log(2)
        tgt = torch.from_numpy(piece.astype(np.int64)) - 4
        ok = (tgt >= 0) & (tgt < 4)
        out.append(np.where(ok.numpy(), -lp.gather(1, tgt.clamp(0, 3)[:, None])[:, 0].numpy(), 0.0))
        carry = int(piece[-1])
    return np.concatenate(out)


def naive_llr(lm, ids: np.ndarray, p: int, ref: str, alt: str, window: int) -> float:
    alt_ids = np.concatenate([ids[:p], DNA_LUT[np.frombuffer(alt.encode(), np.uint8)], ids[p + len(ref) :]])
    after = min(window, len(ids) - p - len(ref))
    ref_bits = whole_bits(lm, ids)[p : p + len(ref) + after].sum()
    alt_bits = whole_bits(lm, alt_ids)[p : p + len(alt) + after].sum()
    return float(ref_bits - alt_bits)


def speed_table(lm, args, tmp: Path) -> Table:
    (name, ids), *_ = read_fasta(GENOME).items()
    seq = text(ids)
    rng = np.random.default_rng(0)
    rows = simulate(seq, args.variants, rng)
    vcf = write_vcf(tmp / "sim.vcf", name, rows)
    results = []
    for label, warmup in (("forked, each contig from its start (exact)", None),
                          (f"forked, --warmup {args.warmup}", args.warmup)):  # fmt: skip
        seconds, timers, llr = run_engine(lm, GENOME, vcf, tmp / "out.vcf", args.window, warmup)
        results.append((label, seconds, timers, llr))
    exact = results[0][3]
    picks = [rows[i] for i in rng.choice(len(rows), args.naive, replace=False)] if args.naive else []
    t = time.perf_counter()
    diffs = [abs(naive_llr(lm, ids, p, r, a, args.window) - exact[(p, r, a)]) for p, r, a in picks]
    naive_s = time.perf_counter() - t
    table = Table("Speed", f"{len(rows)} simulated variants on {name} ({len(ids):,} bases), window {args.window}, "
                  f"{torch.get_num_threads()} thread(s)",
                  ["method", "variants", "seconds", "variants/s", "carrying the state (s)", "forks", "ms per fork"],
                  "lrrrrrr")  # fmt: skip
    for label, seconds, timers, _ in results:
        table.rows.append([label, str(len(rows)), f"{seconds:.1f}", f"{len(rows) / seconds:.2f}",
                           f"{timers.carry:.1f}", str(timers.forks), f"{1000 * timers.fork / max(timers.forks, 1):.2f}"])  # fmt: skip
    if picks:
        table.rows.append(["naive: ref and alt contigs scored whole from scratch", str(len(picks)), f"{naive_s:.1f}",
                           f"{len(picks) / naive_s:.4f}", "", "", ""])  # fmt: skip
        table.notes.append(f"Naive vs forked LLR (exact mode), max |difference| over {len(picks)} variant(s): "
                           f"{max(diffs):.2e} bits (float32 activations, chunks split differently)")  # fmt: skip
    warm = results[1][3]
    both = [k for k in exact if exact[k] is not None and warm.get(k) is not None]
    d = np.array([exact[k] - warm[k] for k in both])
    table.notes.append(
        f"--warmup {args.warmup} vs whole contig: |LLR difference| median {np.median(np.abs(d)):.3f}, "
        f"90th percentile {np.quantile(np.abs(d), 0.9):.3f} bits over {len(both)} variants"
    )
    return table.show()


@torch.inference_mode()
def fork_table(lm, reps: int = 3) -> Table:
    (_, ids), *_ = read_fasta(GENOME).items()
    carry = engine.Carry(lm, 8192)
    carry.advance(ids[:200_000])
    window = ids[200_000:200_101]
    tokens = carry._tokens(window)
    state_bytes = carry.state.nbytes()
    parts = engine._kmer_parts(lm, carry.state)
    kept = 0
    if parts is not None:
        spec, mem = parts
        rows = engine._written_rows(spec, mem, tokens)
        kept = rows.numel() * (mem.S.shape[-1] * mem.S.element_size() + mem.owner.element_size())

    def best(fn) -> float:
        times = []
        for _ in range(reps):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
        return min(times)

    before = [t.clone() for t in carry.state.tensors()] if state_bytes < (4 << 30) else None
    fork = best(lambda: engine.forked_logits(lm, tokens, carry.state))
    unchanged = before is not None and all(
        torch.equal(a, b) for a, b in zip(before, carry.state.tensors(), strict=True)
    )  # fmt: skip
    del before
    plain = best(lambda: lm(tokens, carry.state))
    donated = best(lambda: lm(tokens, carry.state, donate=True))
    table = Table("Fork cost", f"{MODEL.name}, state {state_bytes / 1e9:.2f} GB ({lm.config.state_dtype} state), "
                  f"one window of {len(window)} bases 200 kb into the genome",
                  ["call", "bytes copied", "ms per call", "carried state after"], "lrrl")  # fmt: skip
    table.rows += [
        ["fork: keep and restore the rows it can write (the engine)", f"{2 * kept / 1e3:.1f} kB", f"{1000 * fork:.1f}",
         "unchanged (checked bit for bit)" if unchanged else "unchanged"],
        ["plain call (the state is a value: the table is copied)", f"{state_bytes / 1e9:.2f} GB", f"{1000 * plain:.1f}",
         "unchanged"],
        ["donated call, nothing restored (not a fork)", "0", f"{1000 * donated:.1f}", "changed"],
    ]  # fmt: skip
    return table.show()


# ------------------------------------------------------------------------------------------------- zero-shot check


def cds_list(record) -> list[tuple[list[int], int]]:
    """(genome coordinates of the CDS in reading order, strand) of every single-part CDS whose length is a
    multiple of 3 and whose codons have no stop before the last."""
    seq = str(record.seq).upper()
    out = []
    for f in record.features:
        loc = f.location
        if f.type != "CDS" or len(loc.parts) != 1 or len(loc) % 3 or loc.strand not in (1, -1):
            continue
        coords = list(range(int(loc.start), int(loc.end)))
        if loc.strand == -1:
            coords = coords[::-1]
        codons = [_codon(seq, coords[i : i + 3], loc.strand) for i in range(0, len(coords) - 3, 3)]
        if any(c in STOPS or not set(c) <= set("ACGT") for c in codons):
            continue
        out.append((coords, loc.strand))
    return out


def _codon(seq: str, coords: list[int], strand: int) -> str:
    bases = "".join(seq[i] for i in coords)
    return bases.translate(COMPLEMENT) if strand == -1 else bases


def zero_shot_variants(seq: str, cds, n: int, rng) -> dict[str, list[tuple[int, str, str]]]:
    """Up to n of each class: synonymous and nonsense SNVs, 1-base deletions and insertions, inside CDS (not in
    the first or last codon)."""
    from Bio.Seq import Seq

    def aa(c: str) -> str:
        return str(Seq(c).translate())

    syn, stop, dels, ins = [], [], [], []
    for coords, strand in cds:
        for i in range(3, len(coords) - 3, 3):
            codon = _codon(seq, coords[i : i + 3], strand)
            for j in range(3):
                for b in "ACGT":
                    if b == codon[j]:
                        continue
                    new = codon[:j] + b + codon[j + 1 :]
                    p = coords[i + j]
                    alt = b.translate(COMPLEMENT) if strand == -1 else b
                    if new in STOPS:
                        stop.append((p, seq[p], alt))
                    elif aa(new) == aa(codon):
                        syn.append((p, seq[p], alt))
            p = coords[i + 1]  # a frameshift inside the codon
            dels.append((p - 1, seq[p - 1 : p + 1], seq[p - 1]))
            ins.append((p - 1, seq[p - 1], seq[p - 1] + "ACGT"[int(rng.integers(4))]))

    def pick(rows):
        idx = rng.choice(len(rows), min(n, len(rows)), replace=False)
        return [rows[i] for i in sorted(idx)]

    return {"synonymous": pick(syn), "nonsense": pick(stop), "frameshift del": pick(dels), "frameshift ins": pick(ins)}


def auroc(neg: np.ndarray, pos: np.ndarray) -> float:
    """P(a negative scores higher than a positive), ties counting half (Mann-Whitney)."""
    allv = np.concatenate([neg, pos])
    order = allv.argsort(kind="mergesort")
    ranks = np.empty(len(allv))
    ranks[order] = np.arange(1, len(allv) + 1)
    for v in np.unique(allv):  # average ranks of ties
        same = allv == v
        ranks[same] = ranks[same].mean()
    r_neg = ranks[: len(neg)].sum()
    return float((r_neg - len(neg) * (len(neg) + 1) / 2) / (len(neg) * len(pos)))


def matched_auroc(neg_rows, neg: np.ndarray, pos_rows, pos: np.ndarray) -> float | None:
    """AUROC within strata of the same base change (REF>ALT on the genome's strand), pooled over strata by their pair
    counts: SNVs compared only with SNVs of the same substitution, so the composition of the bases they bring in
    (an AT-rich genome favours the A/T of stop codons) is taken out. None for indels."""
    if any(len(r[1]) != 1 or len(r[2]) != 1 for r in (*neg_rows, *pos_rows)):
        return None
    total = pairs = 0.0
    for change in {(r[1], r[2]) for r in pos_rows}:
        n = np.array([(r[1], r[2]) == change for r in neg_rows])
        p = np.array([(r[1], r[2]) == change for r in pos_rows])
        if n.any() and p.any():
            w = n.sum() * p.sum()
            total += w * auroc(neg[n], pos[p])
            pairs += w
    return total / pairs if pairs else None


def markov_llr(markov, alpha: float, ids: np.ndarray, p: int, ref: str, alt: str, window: int) -> float:
    k = markov.k
    a = max(0, p - 2 * k - 1)
    after = ids[p + len(ref) : p + len(ref) + window]
    enc = lambda s: DNA_LUT[np.frombuffer(s.encode(), np.uint8)]  # noqa: E731
    r = np.concatenate([ids[a:p], enc(ref), after])
    x = np.concatenate([ids[a:p], enc(alt), after])
    rb, xb = markov.position_bits(r, alpha), markov.position_bits(x, alpha)
    return float(np.nansum(rb[p - a :]) - np.nansum(xb[p - a :]))


def zero_shot_table(lm, args, tmp: Path) -> Table:
    from Bio import SeqIO

    from strandline.data.fetch_annotated import fetch_annotated

    gb = Path(args.genbank) if args.genbank else fetch_annotated()
    record = SeqIO.read(str(gb), "genbank")
    seq = str(record.seq).upper()
    ids = DNA_LUT[np.frombuffer(seq.encode(), np.uint8)]
    name = record.id
    fasta = tmp / "annotated.fa"
    fasta.write_text(f">{name}\n{seq}\n")
    cds = cds_list(record)
    rng = np.random.default_rng(1)
    classes = zero_shot_variants(seq, cds, args.zero_shot_n, rng)
    rows = sorted({r for rs in classes.values() for r in rs})
    vcf = write_vcf(tmp / "zero.vcf", name, rows)
    t = time.perf_counter()
    _, _, llr = run_engine(lm, fasta, vcf, tmp / "zero.out.vcf", args.window, None)
    model_s = time.perf_counter() - t
    cut = int(0.8 * len(ids))
    markov, alpha, _ = choose_markov([ids[:cut]], [ids[cut:]], range(0, 11), (0.01, 0.1, 0.5, 1.0))
    mk = {r: markov_llr(markov, alpha, ids, *r, args.window) for r in rows}
    lm_scores = {c: np.array([llr[r] for r in rs]) for c, rs in classes.items()}
    mk_scores = {c: np.array([mk[r] for r in rs]) for c, rs in classes.items()}
    table = Table("Zero-shot", f"{record.description} ({name}, {len(seq):,} bp, {len(cds)} single-exon CDS used), "
                  f"window {args.window}; model {MODEL.name} ({model_s:.0f} s for {len(rows)} variants) vs Markov "
                  f"k={markov.k}, alpha={alpha} fitted on the genome's first 80%",
                  ["class vs synonymous SNVs", "n", "mean LLR model", "mean LLR Markov", "AUROC model",
                   "AUROC Markov-k", "same base change: AUROC model", "Markov-k"], "lrrrrrrr")  # fmt: skip
    syn_lm, syn_mk = lm_scores["synonymous"], mk_scores["synonymous"]
    table.rows.append(["synonymous SNVs (the negatives)", str(len(syn_lm)), f"{syn_lm.mean():.3f}",
                       f"{syn_mk.mean():.3f}", "", "", "", ""])  # fmt: skip
    groups = {"nonsense SNVs": ["nonsense"], "frameshift: 1-base deletions": ["frameshift del"],
              "frameshift: 1-base insertions": ["frameshift ins"],
              "frameshift: both": ["frameshift del", "frameshift ins"]}  # fmt: skip
    for label, members in groups.items():
        a = np.concatenate([lm_scores[m] for m in members])
        b = np.concatenate([mk_scores[m] for m in members])
        rows_of = [r for m in members for r in classes[m]]
        same = [matched_auroc(classes["synonymous"], syn, rows_of, x) for syn, x in ((syn_lm, a), (syn_mk, b))]
        table.rows.append([label, str(len(a)), f"{a.mean():.3f}", f"{b.mean():.3f}", f"{auroc(syn_lm, a):.3f}",
                           f"{auroc(syn_mk, b):.3f}", *("-" if v is None else f"{v:.3f}" for v in same)])  # fmt: skip
    return table.show()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=str(MODEL), help="model directory (default: data/models/dna-corpus-2)")
    ap.add_argument("--variants", type=int, default=300, help="simulated variants on H. pylori")
    ap.add_argument("--naive", type=int, default=2, help="of which scored naively (two whole-genome passes each)")
    ap.add_argument("--window", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=2000)
    ap.add_argument("--zero-shot-n", type=int, default=300, help="variants per class in the zero-shot check")
    ap.add_argument("--genbank", help="an annotated GenBank file instead of the fetched A. thaliana chloroplast")
    ap.add_argument("--skip-speed", action="store_true")
    ap.add_argument("--skip-zero-shot", action="store_true")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--save", action="store_true", help="write the printed tables to benchmarks/results")
    args = ap.parse_args(argv)
    tables = run(args)
    if args.save:
        save_tables(tables, "OMP_NUM_THREADS=1 python benchmarks/score_variants.py "
                    + " ".join(sys.argv[1:] if argv is None else argv))  # fmt: skip


RECORDS = {"Speed": ("variant-speed", "Variant scoring: forked state against naive re-scoring"),
           "Fork cost": ("variant-fork", "Variant scoring: the cost of one fork of the carried state"),
           "Zero-shot": ("variant-zero-shot", "Variant scoring: zero-shot on coding sequences against Markov-k")}  # fmt: skip


def save_tables(tables: list[Table], command: str) -> None:
    """One results record per table this run printed (``RECORDS`` names them), its notes as caveats."""
    from benchmarks.results import record

    for t in tables:
        name, title = RECORDS[t.key]
        record(name, title, command, t.header, t.rows, machine=f"The project's build VM (2 CPU cores, shared). {t.what}.",
               caveats=t.notes)  # fmt: skip


def run(args) -> list[Table]:
    """The tables the options ask for, each printed as it is made."""
    global MODEL
    MODEL = Path(args.model)
    torch.set_num_threads(args.threads)
    torch.backends.mkldnn.enabled = False  # as the engine runs: a primitive per shape otherwise
    lm = load_for_scan(str(MODEL))
    tables = []
    with tempfile.TemporaryDirectory() as tmp:
        if not args.skip_speed:
            tables += [speed_table(lm, args, Path(tmp)), fork_table(lm)]
        if not args.skip_zero_shot:
            tables.append(zero_shot_table(lm, args, Path(tmp)))
    return tables


if __name__ == "__main__":
    main()
