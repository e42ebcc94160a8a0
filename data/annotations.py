"""Genome annotations (GFF3, GenBank, EMBL) and a scan's annotation report: each track inside vs outside features.

``load_features`` reads the features of an annotation file, or of GenBank/EMBL scan inputs, into per-record,
per-type sorted disjoint intervals (0-based half-open: GFF3's 1-based inclusive ``start..end`` becomes
``[start-1, end)``; Biopython locations already are). Memory is O(features), never O(genome length).
``source``/``region``-like features (a whole record) are not types. ``(intergenic)`` is every base covered
by no feature: computed, and named so that no GFF3 or GenBank type (a user's own ``intergenic`` included)
can be taken for it. Parts of a GenBank location on another record (``join(OTHER.1:1..90,...)``) are not
this record's bases. A feature that runs past the end of its record is refused (an annotation of another
assembly?), never clipped.

``write_annotation_report`` streams each track file once (``strandline.data.tracks.iter_intervals``, a block of
intervals at a time) and, for every feature type, sums the scored bases and values inside it; outside is
the rest of the scored bases. A windowed track (``--window W``) counts each window's mean for each of its
bases, so window means near feature edges are shared between inside and outside.
"""

from __future__ import annotations

import io
from collections import defaultdict
from pathlib import Path
from urllib.parse import unquote

import numpy as np

from strandline.data.fasta import DECOMPRESS_ERRORS, corrupt_error, open_binary, record_format
from strandline.data.tracks import iter_intervals
from strandline.errors import UserInputError, first_line
from strandline.files import atomic_write_text, reads_once

WHOLE_RECORD = {"source", "region", "chromosome", "contig", "databank_entry"}
INTERGENIC = "(intergenic)"  # parentheses: not a GenBank feature key nor a Sequence Ontology term


class AnnotationError(UserInputError):
    """An annotation that cannot be read or used (malformed GFF3, no features on the scanned records)."""


Features = dict[str, dict[str, tuple[np.ndarray, np.ndarray, int]]]
"""record -> feature type -> (starts, ends, number of features), the intervals merged, sorted, disjoint."""


def load_features(
    annotation: str | None, lengths: dict[str, int], inputs: list[str] = (), rename=None, listed: dict | None = None
) -> Features:
    """Features of ``annotation`` (GFF3, GenBank, EMBL) or, without it, of the GenBank/EMBL ``inputs``.

    Args:
        annotation: a .gff/.gff3 file (or one starting ``##gff-version``), or a GenBank/EMBL file; or None.
        lengths: the scanned records' lengths; features are clipped to them and must name some of them.
        inputs: the scan inputs, used when ``annotation`` is None.
        rename: how the scan renames records (``strandline.data.names.RecordNames``), applied to feature records.
        listed: when given, filled in the same read with every feature on a scanned record, one row each (the
            ``--feature_report``'s rows): record -> [(start, end, strand, type, name)] sorted by start, the parts
            of a multi-part feature one row each, ends clipped to the record, intergenic gaps none.

    Raises:
        AnnotationError: unreadable or malformed file, no annotation source, or no feature on a scanned record.
    """
    raw: dict[str, dict[str, list[tuple[int, int]]]] = defaultdict(lambda: defaultdict(list))
    sources = annotation_sources(annotation, inputs)
    if not sources:
        hint = " (stdin or a pipe is read once, for the scan: give the GenBank/EMBL as a file)"
        raise AnnotationError("--annotation_report needs --annotation FILE.gff3|.gb, or GenBank/EMBL inputs"
                              + (hint if any(map(reads_once, inputs)) else ""))  # fmt: skip
    rows: dict[str, list] = defaultdict(list)

    def add(chrom: str, ftype: str, start: int, end: int, strand: int, name: str) -> None:
        raw[chrom][ftype].append((start, end))
        if listed is not None and chrom in lengths:
            rows[chrom].append((start, min(end, lengths[chrom]), strand, ftype, name))

    for path in sources:
        read_annotation(path, add, rename)
    if listed is not None:
        listed.update({c: sorted(v) for c, v in rows.items()})
    on_scanned = [c for c in raw if c in lengths]
    if not on_scanned:
        names = ", ".join(sorted(raw)[:3]) or "none"
        raise AnnotationError(f"{', '.join(sources)}: no feature is on a scanned record (feature records: {names})")
    _check_features(raw, on_scanned, lengths, ", ".join(sources))
    out: Features = {}
    for chrom in on_scanned:
        n = lengths[chrom]
        out[chrom] = {t: (*_merge(iv, n), len(iv)) for t, iv in raw[chrom].items()}
        us, ue = _merge([iv for ivs in raw[chrom].values() for iv in ivs], n)
        gs, ge = np.append(0, ue), np.append(us, n)  # the gaps around and between the features
        keep = ge > gs
        out[chrom][INTERGENIC] = (gs[keep], ge[keep], int(keep.sum()))
    return out


def _check_features(raw, chroms: list[str], lengths: dict[str, int], source: str) -> None:
    """Refuse a type named like the computed complement and a feature past the end of its record."""
    for chrom in chroms:
        for t, iv in raw[chrom].items():
            if t == INTERGENIC:
                raise AnnotationError(f"{source}: feature type {t!r} is the report's name for bases under no feature")
            end = max(e for _, e in iv)
            if end > lengths[chrom]:
                raise AnnotationError(
                    f"{source}: a {t} feature on {chrom!r} ends at {end}, past the record's end ({lengths[chrom]}"
                    " bases); is the annotation of another assembly?"
                )


def annotation_sources(annotation: str | None, inputs: list[str]) -> list[str]:
    """Where a scan's features come from: ``annotation`` when given, else its GenBank/EMBL inputs (maybe none)."""
    return [annotation] if annotation else [p for p in inputs if not reads_once(p) and _format(p) != "fasta"]


def _format(path: str) -> str:
    with open_binary(path) as fh:
        return record_format(path, fh)


def _is_gff(path: str) -> bool:
    if Path(path).suffix.lower() in (".gff", ".gff3"):
        return True
    with open_binary(path) as fh:
        return fh.peek(16)[:15] == b"##gff-version 3"


def read_annotation(path: str, add, rename=None) -> None:
    """Call ``add(record, type, start, end, strand, name)`` for every feature (0-based half-open; strand +1, -1 or
    0; name: its gene, locus tag, Name or ID, else "") of a GFF3, GenBank or EMBL file, except the whole-record
    ones (source, region, ...); each part of a multi-part feature is one call. ``rename`` (a callable) maps each
    feature's record name first, as the scan renames its records (``--rename``).

    Raises:
        AnnotationError: unreadable or malformed file, or a FASTA file (no features).
    """
    if rename is not None:
        inner = add

        def add(chrom, *rest):
            inner(rename(chrom), *rest)

    if _is_gff(path):
        _read_gff3(path, add)
    else:
        _read_seqfeatures(path, add)


def feature_spans(sources: list[str], record: str, lo: int, hi: int, rename=None) -> list[tuple[int, int, int, str]]:
    """(start, end, strand, type) of the features of ``sources`` on ``record`` that overlap [lo, hi), for a plot's
    feature lane: each part of a multi-part feature is one span."""
    out: list[tuple[int, int, int, str]] = []

    def add(chrom: str, ftype: str, start: int, end: int, strand: int, name: str) -> None:
        if chrom == record and end > lo and start < hi:
            out.append((start, end, strand, ftype))

    for path in sources:
        read_annotation(path, add, rename)
    return sorted(out)


def _read_gff3(path: str, add) -> None:
    """Feature lines of a GFF3 file; any line break (LF, CRLF, CR alone) ends a line, up to ``##FASTA``."""
    with open_binary(path) as fh:
        text = io.TextIOWrapper(fh, encoding="utf-8", newline=None)  # universal newlines
        n = 0
        try:
            for n, line in enumerate(text, 1):
                if line.startswith("##FASTA"):
                    break
                if not line.startswith("#") and line.strip():
                    _add_gff3_line(path, n, line, add)
        except UnicodeDecodeError:
            raise AnnotationError(f"{path}: line {n + 1}: not UTF-8 text (a binary file, not GFF3?)") from None
        except DECOMPRESS_ERRORS as e:
            raise corrupt_error(path, e) from None
        finally:
            text.detach()


def _add_gff3_line(path: str, n: int, line: str, add) -> None:
    cols = line.rstrip("\n").split("\t")
    if len(cols) != 9:
        raise AnnotationError(f"{path}: line {n}: not a GFF3 feature line ({len(cols)} tab-separated columns, not 9)")
    chrom, ftype = cols[0], cols[2]
    try:
        start, end = int(cols[3]) - 1, int(cols[4])  # 1-based inclusive -> 0-based half-open
    except ValueError:
        raise AnnotationError(
            f"{path}: line {n}: not a GFF3 feature line (start {cols[3]!r}, end {cols[4]!r})"
        ) from None
    if start < 0 or end <= start:
        raise AnnotationError(f"{path}: line {n}: bad GFF3 coordinates {cols[3]}..{cols[4]} (need 1 <= start <= end)")
    if ftype not in WHOLE_RECORD:
        attrs = dict(kv.split("=", 1) for kv in cols[8].strip().split(";") if "=" in kv)
        name = next((attrs[k] for k in ("Name", "gene", "locus_tag", "ID") if attrs.get(k)), "")
        add(chrom, ftype, start, end, {"+": 1, "-": -1}.get(cols[6], 0), unquote(name))


def _read_seqfeatures(path: str, add) -> None:
    from Bio import SeqIO

    fmt = _format(path)
    if fmt == "fasta":
        raise AnnotationError(f"{path}: a FASTA file has no features; give GFF3, GenBank or EMBL")
    with open_binary(path) as fh:
        try:
            for rec in SeqIO.parse(io.TextIOWrapper(fh, encoding="utf-8"), fmt):
                for f in rec.features:
                    if f.type not in WHOLE_RECORD and f.location is not None:
                        # parts on other records (join(OTHER.1:...)) are not this record's bases
                        q = f.qualifiers
                        name = next((q[k][0] for k in ("gene", "locus_tag", "label", "product") if q.get(k)), "")
                        for p in f.location.parts:
                            if p.ref in (None, rec.id):
                                add(rec.id, f.type, int(p.start), int(p.end), p.strand or 0, name)
        except DECOMPRESS_ERRORS as e:
            raise corrupt_error(path, e) from None
        except (ValueError, UnicodeDecodeError) as e:
            raise AnnotationError(f"{path}: malformed {fmt} file ({first_line(e)})") from None


def _merge(iv: list[tuple[int, int]], length: int) -> tuple[np.ndarray, np.ndarray]:
    """Sorted disjoint union of intervals, clipped to [0, length)."""
    a = np.clip(np.array(iv, np.int64).reshape(-1, 2), 0, length)
    a = a[a[:, 1] > a[:, 0]]
    if not len(a):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    a = a[np.argsort(a[:, 0], kind="stable")]
    emax = np.maximum.accumulate(a[:, 1])
    new = np.ones(len(a), bool)
    new[1:] = a[1:, 0] > emax[:-1]
    heads = np.flatnonzero(new)
    return a[heads, 0], emax[np.append(heads[1:] - 1, len(a) - 1)]


def covered(starts: np.ndarray, ends: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Bases of the disjoint sorted intervals ``[starts, ends)`` below each position ``x`` (an array)."""
    before = np.concatenate([[0], np.cumsum(ends - starts)])  # bases of the intervals before each one
    k = np.searchsorted(starts, x, side="right")  # intervals starting at or before x
    j = np.maximum(k - 1, 0)
    if not len(starts):
        return np.zeros(len(x), np.int64)
    part = before[j] + np.clip(x - starts[j], 0, ends[j] - starts[j])  # those before j are wholly below x
    return np.where(k > 0, part, 0)


def track_stats(track: str | Path, features: Features) -> dict[str, list[float]]:
    """feature type -> [features, bases inside, sum inside, bases outside, sum outside] over one track file.

    Only records with features count (a record the annotation does not describe is neither inside nor outside).
    """
    types = sorted({t for per in features.values() for t in per} - {INTERGENIC}) + [INTERGENIC]
    acc = {t: [0, 0.0, 0.0] for t in types}  # features, bases inside, sum of values inside
    for per in features.values():
        for t, (_, _, n) in per.items():
            acc[t][0] += n
    total = [0.0, 0.0]  # scored bases, sum of values, on annotated records
    for chrom, s, e, v in iter_intervals(track):
        per = features.get(chrom)
        if per is None:
            continue
        w, v = (e - s).astype(np.float64), v.astype(np.float64)
        total[0] += w.sum()
        total[1] += (w * v).sum()
        for t, (fs, fe, _) in per.items():
            ov = (covered(fs, fe, e) - covered(fs, fe, s)).astype(np.float64)  # bases of each interval inside
            acc[t][1] += ov.sum()
            acc[t][2] += (ov * v).sum()
    return {t: [n, b, sm, total[0] - b, total[1] - sm] for t, (n, b, sm) in acc.items()}


def write_annotation_report(out: str | Path, tracks: dict[str, str | Path], features: Features) -> None:
    """TSV: track, feature, n_features, bases_inside, mean_inside, bases_outside, mean_outside (NA: no bases)."""

    def mean(s: float, b: float) -> str:
        return f"{s / b:.6f}" if b else "NA"

    rows = ["track\tfeature\tn_features\tbases_inside\tmean_inside\tbases_outside\tmean_outside\n"]
    for name, path in tracks.items():
        for t, (n, b, s, bo, so) in track_stats(path, features).items():
            rows.append(f"{name}\t{t}\t{int(n)}\t{int(b)}\t{mean(s, b)}\t{int(bo)}\t{mean(so, bo)}\n")
    atomic_write_text(out, "".join(rows))


def feature_means(track: str | Path, feats: dict[str, list]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """record -> (bases with a value, sum of values) of each feature of ``feats`` over one track, in one pass over
    the track's blocks (memory: one block and the features, not the record)."""
    out = {c: (np.zeros(len(v)), np.zeros(len(v))) for c, v in feats.items()}
    starts = {c: np.array([f[0] for f in v], np.int64) for c, v in feats.items()}
    ends = {c: np.array([f[1] for f in v], np.int64) for c, v in feats.items()}
    for chrom, s, e, v in iter_intervals(track):
        if chrom not in feats or not len(s):
            continue
        fs, fe = starts[chrom], ends[chrom]
        hit = np.flatnonzero((fs < e[-1]) & (fe > s[0]))  # features that overlap this block
        if not len(hit):
            continue
        w, val = (e - s).astype(np.float64), v.astype(np.float64)
        lo, hi = np.maximum(fs[hit], s[0]), np.minimum(fe[hit], e[-1])
        for acc, y in zip(out[chrom], (w, w * val), strict=True):  # bases, then the sum of values
            acc[hit] += step_integral(s, e, y, hi) - step_integral(s, e, y, lo)
    return out


def step_integral(s: np.ndarray, e: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Σ over sorted disjoint intervals [s, e) of y spread evenly over each, up to positions ``x``."""
    c = np.concatenate([[0.0], np.cumsum(y)])
    k = np.searchsorted(s, x, side="right")  # intervals starting at or before x
    last = np.maximum(k - 1, 0)
    per_base = y[last] / np.maximum(e[last] - s[last], 1)
    return c[k] - np.where(k > 0, np.clip(e[last] - x, 0, None) * per_base, 0.0)


def write_feature_report(out: str | Path, tracks: dict[str, str | Path], feats: dict[str, list]) -> None:
    """TSV of every feature: track, record, type, name, start, end, strand, bases, mean, rank (1: the most surprising:
    the lowest mean of a ``logprob`` track, the highest of any other; NA without values), in annotation order."""
    rows = ["track\trecord\ttype\tname\tstart\tend\tstrand\tbases\tmean\trank\n"]
    for tname, path in tracks.items():
        sums = feature_means(path, feats)
        means = {c: np.where(b > 0, sm / np.maximum(b, 1), np.nan) for c, (b, sm) in sums.items()}
        flat = np.concatenate([means[c] for c in feats]) if feats else np.zeros(0)
        key = np.where(np.isnan(flat), np.inf, flat if tname == "logprob" else -flat)
        rank = np.empty(len(flat), np.int64)
        rank[np.argsort(key, kind="stable")] = np.arange(1, len(flat) + 1)
        i = 0
        for c, fl in feats.items():
            for (s, e, strand, ftype, name), b, m in zip(fl, sums[c][0], means[c], strict=True):
                clean = "".join(ch for ch in name if ch.isprintable() and ch != "\t") or "."
                r, mm = (str(rank[i]), f"{m:.6f}") if b > 0 else ("NA", "NA")
                rows.append(f"{tname}\t{c}\t{ftype}\t{clean}\t{s}\t{e}\t{'+-.'[(1 - strand) // 2 if strand else 2]}"
                            f"\t{int(b)}\t{mm}\t{r}\n")  # fmt: skip
                i += 1
    atomic_write_text(out, "".join(rows))
