"""Record-reader throughput: ``strandline.data.fasta.iter_records`` vs Biopython on the same files, in one run.

Peers: ``Bio.SeqIO.FastaIO.SimpleFastaParser`` (the fast Biopython FASTA path; it holds a whole record as one
string) followed by the same numpy lookup table, and ``Bio.SeqIO.parse(..., "genbank")`` for GenBank (which
``iter_records`` itself uses for that format). Synthetic random sequence, 60 bases per line, LF or CR line
breaks; the best of ``--repeat`` runs is shown. Run with ``OMP_NUM_THREADS=1``; on a shared machine say so.

    python benchmarks/records.py --mb 50
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from strandline.data.fasta import iter_records
from strandline.data.tokenizers import DNA_LUT


def write_inputs(folder: Path, n: int) -> dict[str, Path]:
    seq = np.random.default_rng(0).choice(np.frombuffer(b"ACGT", np.uint8), n)
    lines = b"\n".join(seq[i : i + 60].tobytes() for i in range(0, n, 60))
    lf = folder / "lf.fa"
    lf.write_bytes(b">chr1 synthetic\n" + lines + b"\n")
    cr = folder / "cr.fa"
    cr.write_bytes(lf.read_bytes().replace(b"\n", b"\r"))
    from Bio import SeqIO
    from Bio.Seq import Seq
    from Bio.SeqRecord import SeqRecord

    gb = folder / "x.gbk"
    rec = SeqRecord(Seq(seq[: min(n, 5_000_000)].tobytes().decode()), id="chr1", annotations={"molecule_type": "DNA"})
    SeqIO.write([rec], gb, "genbank")
    return {"lf": lf, "cr": cr, "gb": gb}


def ours(path: Path) -> int:
    return sum(c.ids.size for c in iter_records(path))


def biopython_fasta(path: Path) -> int:
    from Bio.SeqIO.FastaIO import SimpleFastaParser

    with open(path) as f:
        return sum(DNA_LUT[np.frombuffer(s.encode(), np.uint8)].size for _, s in SimpleFastaParser(f))


def biopython_genbank(path: Path) -> int:
    from Bio import SeqIO

    return sum(DNA_LUT[np.frombuffer(bytes(r.seq), np.uint8)].size for r in SeqIO.parse(str(path), "genbank"))


def best(fn, path: Path, repeat: int) -> tuple[int, float]:
    times, n = [], 0
    for _ in range(repeat):
        t = time.perf_counter()
        n = fn(path)
        times.append(time.perf_counter() - t)
    return n, min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=20, help="megabases of the FASTA inputs (GenBank: at most 5)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        files = write_inputs(Path(tmp), int(args.mb * 1e6))
        rows = [
            ("FASTA, LF", "iter_records", ours, files["lf"]),
            ("FASTA, LF", "Bio SimpleFastaParser + LUT", biopython_fasta, files["lf"]),
            ("FASTA, CR only", "iter_records", ours, files["cr"]),
            ("GenBank", "iter_records (Bio.SeqIO inside)", ours, files["gb"]),
            ("GenBank", "Bio.SeqIO.parse + LUT", biopython_genbank, files["gb"]),
        ]
        print(f"| input | reader | bases | best of {args.repeat} (s) | Mb/s |\n|---|---|---:|---:|---:|")
        for what, name, fn, path in rows:
            n, t = best(fn, path, args.repeat)
            print(f"| {what} | {name} | {n:,} | {t:.2f} | {n / t / 1e6:.0f} |")


if __name__ == "__main__":
    main()
