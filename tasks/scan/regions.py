"""Scanning some spans of a genome through an index: ``scan --region CHROM:START-END`` or ``--regions FILE.bed``.

The spans are read with pyfaidx (a plain FASTA, or one compressed with ``bgzip``; the ``.fai`` index is written
beside it the first time), so a scan of a few genes in a human chromosome reads those genes, not the file.
Each span is scored after a warm-up: the model reads ``warmup`` bases before the span from a fresh state
(their scores are dropped), so the first bases of the span are predicted from context as in a whole-record
scan. Once the warm-up covers what the model remembers (decay: the slowest head's horizon; a k-mer memory
that never forgets: the record's start), the span's values equal those of a whole-record scan; a warm-up at
least the span's start reads from the record's start and is exact.

Spans are sorted by record (in file order) and position, overlapping or touching spans merged; each record's
spans are written as that record, so tracks, summaries (``scored``: the spans' bases), calls and plots work as
for a whole-record scan.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from strandline.data.tracks import TrackError, bed_rows, parse_region
from strandline.errors import UserInputError
from strandline.files import reads_once

DEFAULT_WARMUP = 20_000


class RegionError(UserInputError):
    """Regions that cannot be scanned as given; one line for users."""


def read_bed_spans(path: str) -> list[tuple[str, int, int]]:
    """(record, start, end) of every line of a BED file (3+ columns; ``track``/``browser``/``#`` lines skipped)."""
    p = Path(path)
    if not p.is_file():
        raise RegionError(f"--regions {path}: no such file")
    out = []
    for n, f in bed_rows(p, RegionError, f"--regions {path}"):
        try:
            chrom, start, end = f[0], int(f[1]), int(f[2])
        except (IndexError, ValueError):
            raise RegionError(f"--regions {path}:{n}: not a BED line (chrom, start, end)") from None
        if not 0 <= start < end:
            raise RegionError(f"--regions {path}:{n}: need 0 <= start < end, got {start}-{end}")
        out.append((chrom, start, end))
    if not out:
        raise RegionError(f"--regions {path}: no span in it")
    return out


class IndexedGenome:
    """Records of FASTA inputs read through pyfaidx indexes, under the names the scan writes (``rename``)."""

    def __init__(self, inputs: list[str], rename=None):
        import importlib.util

        if importlib.util.find_spec("pyfaidx") is None:  # a core dependency; only a damaged install lacks it
            raise RegionError("--region/--regions need pyfaidx: pip install pyfaidx")
        self.records: dict[str, tuple[object, str]] = {}  # name -> (Fasta, key in it)
        self.lengths: dict[str, int] = {}
        self.paths: dict[str, str] = {}
        for path in inputs:
            if reads_once(path):
                raise RegionError("--region/--regions read through an index: give a FASTA file, not stdin or a pipe")
            fa = _open_indexed(path)
            for key in fa.records:  # in file order
                name = rename(key) if rename else key
                if name in self.records:
                    raise RegionError(f"{path}: record {name!r} already read from {self.paths[name]}")
                self.records[name], self.lengths[name], self.paths[name] = (fa, key), len(fa[key]), path

    def fetch(self, name: str, start: int, end: int) -> np.ndarray:
        """Token ids of bases [start, end) of a record (as the scan's reader encodes them)."""
        from strandline.data.tokenizers import DNATokenizer

        fa, key = self.records[name]
        seq = fa[key][start:end]
        try:
            return DNATokenizer().encode(str(seq).replace("U", "T").replace("u", "t"))
        except ValueError as e:
            raise RegionError(f"{self.paths[name]}: {name}:{start}-{end}: {e}") from None


def _open_indexed(path: str):
    from pyfaidx import Fasta, FastaIndexingError, UnsupportedCompressionFormat

    if not Path(path).is_file():
        raise RegionError(f"{path}: no such file")
    try:
        return Fasta(path, as_raw=True, sequence_always_upper=True, read_ahead=1 << 16)
    except UnsupportedCompressionFormat:
        raise RegionError(
            f"{path}: --region/--regions need an indexable FASTA: plain text or bgzip-compressed "
            "(bgzip -c x.fa > x.fa.gz), not gzip"
        ) from None
    except FastaIndexingError as e:
        raise RegionError(f"{path}: cannot index it as FASTA ({str(e).splitlines()[0]})") from None
    except (OSError, ValueError, RuntimeError) as e:
        raise RegionError(f"{path}: cannot index it as FASTA ({e})") from None


def plan_spans(
    region: str | None, regions: str | None, lengths: dict[str, int]
) -> list[tuple[str, list[tuple[int, int]]]]:
    """The spans to scan, grouped by record in the inputs' order, sorted and merged; checked against ``lengths``."""
    raw: list[tuple[str, int, int]] = []
    if region:
        try:
            chrom, a, b = parse_region(region)
        except TrackError as e:
            raise RegionError(str(e)) from None
        if chrom not in lengths:
            raise RegionError(f"--region {region}: no record {chrom!r} in the inputs")
        raw.append((chrom, a or 0, lengths[chrom] if b is None else b))
    if regions:
        raw += read_bed_spans(regions)
    by: dict[str, list[tuple[int, int]]] = {}
    for chrom, a, b in raw:
        if chrom not in lengths:
            shown = ", ".join(list(lengths)[:3])
            raise RegionError(f"--regions: record {chrom!r} is not in the inputs (records: {shown})")
        if a >= lengths[chrom]:
            raise RegionError(f"--regions: {chrom}:{a}-{b} starts beyond the end of {chrom} ({lengths[chrom]:,} bases)")
        by.setdefault(chrom, []).append((a, min(b, lengths[chrom])))
    out = []
    for chrom in lengths:  # the inputs' order
        if chrom not in by:
            continue
        merged: list[list[int]] = []
        for a, b in sorted(by[chrom]):
            if merged and a <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        out.append((chrom, [(a, b) for a, b in merged]))
    return out


def warmed_bases(plan: list[tuple[str, list[tuple[int, int]]]], warmup: int) -> int:
    """Bases the model reads for ``plan``: each span and its warm-up (for the progress bar's total)."""
    return sum(b - max(0, a - warmup) for _, spans in plan for a, b in spans)
