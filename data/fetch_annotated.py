"""Fetch annotated genomes (GenBank with their features) for the benchmarks that check outputs against annotation.

    python -m strandline.data.fetch_annotated              # -> data/cache/annotated/ (both genomes below)
    python -m strandline.data.fetch_annotated --out DIR

*Leptospira kirschneri* (RefSeq NZ_AHMY02, ``L_kirschneri_NZ_AHMY02.gbk.gz``, a draft bacterial genome with RefSeq annotation:
transposases, integrases and phage genes among its CDS, tRNA, rRNA, repeat regions) ships as example data in
Debian's ``any2fasta-examples``; ``benchmarks/calls_validation.py`` checks ``scan --calls`` against it.

The *Arabidopsis thaliana* chloroplast genome (NC_000932.1, 154,478 bp, 85 CDS features) ships as test data in
Biopython's source distribution (``Tests/GenBank/NC_000932.gb``); ``pip download`` fetches the sdist (20 MB, once)
and only the GenBank file is kept, checked against its sha256. The same genome is a test-split genome of the
corpus (``data/corpus.json``), so the shipped corpus models never trained on it. A file already there with the
right checksum is kept: re-runs download nothing. The output folder is git-ignored.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from strandline.data.fetch_corpus import FetchError, download, member_bytes, open_package, sha256
from strandline.errors import script
from strandline.files import atomic_write_bytes

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "data" / "cache" / "annotated"
GENOMES = {
    "NC_000932.gb": {
        "organism": "Arabidopsis thaliana chloroplast, complete genome (NC_000932.1)",
        "source": {
            "type": "pypi",
            "package": "biopython",
            "version": "1.88",
            "member": "biopython-1.88/Tests/GenBank/NC_000932.gb",
        },
        "licence": "LicenseRef-Biopython-License-Agreement (the sdist's test data; NCBI RefSeq public data)",
        "sha256": "a8b5d8239001f56a5b8b3ff047b10338b839329cf594aad36bfa4755a0dfb480",
    },
    "L_kirschneri_NZ_AHMY02.gbk.gz": {
        "organism": "Leptospira kirschneri, draft genome (RefSeq NZ_AHMY02, 75 contigs, 4.59 Mb; RefSeq annotation "
        "with 4,162 CDS, tRNA, rRNA and repeat regions)",
        "source": {
            "type": "deb",
            "package": "any2fasta-examples",
            "version": "0.4.2-2",
            "member": "./usr/share/doc/any2fasta/examples/test.gbk.gz",
        },
        "licence": "NCBI RefSeq public data, as shipped in Debian's any2fasta-examples (package GPL-3)",
        "sha256": "321919e452f88665a597b5c31813b7b99ab0f60ce3706e25eadd2309f9e3d93b",
    },
}


def fetch_annotated(name: str = "NC_000932.gb", out_dir: Path = DEFAULT_OUT, downloader=download) -> Path:
    """The path of the annotated genome ``name`` under ``out_dir``, downloaded and checked if not there yet."""
    entry = GENOMES[name]
    out = Path(out_dir) / name
    if out.is_file() and sha256(out.read_bytes()) == entry["sha256"]:
        return out
    src = entry["source"]
    with tempfile.TemporaryDirectory() as tmp:
        path = downloader(src, Path(tmp))
        with open_package(path) as tar:
            data = member_bytes(tar, src["member"], f"{src['package']} {src['version']}")
    digest = sha256(data)
    if digest != entry["sha256"]:
        raise FetchError(f"{name}: {src['package']} {src['version']} gave sha256 {digest[:16]}..., not "
                         f"{entry['sha256'][:16]}...; not written")  # fmt: skip
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(out, data)
    return out


@script("fetch_annotated")
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder (default data/cache/annotated)")
    args = ap.parse_args(argv)
    for name in GENOMES:
        print(fetch_annotated(name, args.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
