"""Track formats, one record each, and the reader: bedGraph (0-based half-open), WIG (1-based), bigWig (pyBigWig).

A ``TrackFormat`` holds everything the rest of the code asks about a format, so that the scan compares no
format names: its extensions (``extension`` for a new output, ``suffixes`` recognised in a name), its
part-file suffix, whether it ``streams`` (its parts already are the output's bytes, appended record by
record, so it can go to stdout or a pipe) or is built once at the end (bigWig: the chromosome sizes go in
its header and it needs pyBigWig), its ``writer`` (``strandline.data.track_writers``), what it needs that
may be missing (``unavailable``), and ``finish``, which turns the parts' per-record byte spans into the
output. ``TRACK_FORMATS`` is the registry by name; a new format is one more record here.

The reader (``iter_intervals``, ``read_region``) streams any of the three back as 0-based half-open blocks,
recognising bigWig by its magic bytes; anything else that is not a track raises ``TrackError``.
"""

from __future__ import annotations

import gzip
import os
import struct
import sys
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, NamedTuple

import numpy as np

from strandline.data.track_writers import (
    INTERVAL_DTYPE,
    BedGraphWriter,
    IntervalWriter,
    TrackWriter,
    WigWriter,
    WindowMean,
    require_pybigwig,
    write_bigwig,
)
from strandline.errors import UserInputError, first_line
from strandline.files import atomic_output

__all__ = [
    "BEDGRAPH", "BIGWIG", "DEFAULT_FORMAT", "EXTENSIONS", "FORMATS", "INTERVAL_DTYPE", "SUFFIXES", "TRACK_FORMATS", "WIG",
    "BedGraphWriter", "BigWigFormat", "IntervalWriter", "PartFileError", "PartSpan", "TrackError", "TrackFormat",
    "TrackWriter", "WigWriter", "WindowMean", "atomic_output", "format_for_path", "is_bigwig", "iter_intervals",
    "open_bigwig", "parse_region", "read_region", "require_pybigwig", "track_format", "track_name_problem",
    "write_bigwig",
]  # fmt: skip


class TrackError(UserInputError):
    """A track file that cannot be read (not bedGraph/WIG/bigWig, malformed line, missing record)."""


class PartFileError(TrackError):
    """A part file shorter than the byte span a record claims in it (a damaged work folder)."""


class PartSpan(NamedTuple):
    """One record's bytes in one part file, in output order: what ``TrackFormat.finish`` assembles."""

    name: str  # the record (chromosome) name
    length: int  # the record's length in bases (a bigWig's chromosome size)
    path: Path  # the part file
    offset: int  # byte offset of the record in the part
    nbytes: int  # byte length of the record in the part


@dataclass(frozen=True)
class TrackFormat:
    """A format whose parts are already its bytes (bedGraph, WIG): the output is the parts' spans concatenated.

    It streams: a record's lines can be appended as soon as they are written, so the output may be stdout,
    a device or a pipe, written in place.
    """

    name: str  # the --format name
    title: str  # how messages spell it
    extension: str  # the extension of a new output
    suffixes: tuple[str, ...]  # lowercase name suffixes that imply the format
    part_suffix: str  # the extension of a shard's part files
    writer: Callable[[BinaryIO], TrackWriter]  # the writer of one part file
    streams: bool = True  # can go to stdout or a pipe, record by record

    def unavailable(self) -> str | None:
        """Why this format cannot be written here (a missing optional package, with its install hint), or None."""
        return None

    track_type: str = "bedGraph"  # the UCSC track line's type

    def finish(self, out: Path | None, spans: list[PartSpan], whole: Path | None = None, header: bytes = b"") -> None:
        """Write the output from its parts' record spans (in output order), after ``header`` (a track line).

        Args:
            out: the output file, a device or pipe (written in place), or None for stdout. A regular file
                appears only when complete (``atomic_output``).
            spans: every record's bytes in the parts, in output order.
            whole: a part that already holds every span in order (one shard), renamed instead of copied.

        Raises:
            PartFileError: a part ends before a span it should hold.
        """
        if out is None:
            sys.stdout.buffer.write(header)
            concat_spans(spans, sys.stdout.buffer)
            sys.stdout.buffer.flush()
        elif out.exists() and not out.is_file():  # a device or pipe (/dev/null, a FIFO): written in place
            with open(out, "wb") as dst:
                dst.write(header)
                concat_spans(spans, dst)
        elif is_bgzf_name(out):  # x.bedGraph.gz: BGZF, so that tabix can index it and IGV can read it
            from Bio.bgzf import BgzfWriter

            with atomic_output(out) as tmp:
                dst = BgzfWriter(str(tmp), "wb")
                try:
                    dst.write(header)
                    concat_spans(spans, dst)
                finally:
                    dst.close()
        elif whole is not None and not header:
            with atomic_output(out) as tmp:  # the part is complete and in order: a rename, no copy
                os.replace(whole, tmp)
        else:
            with atomic_output(out) as tmp, open(tmp, "wb") as dst:
                dst.write(header)
                concat_spans(spans, dst)


@dataclass(frozen=True)
class BigWigFormat(TrackFormat):
    """bigWig: parts staged as binary intervals (exact float32), built into one indexed file at the end.

    Its header lists every chromosome with its size before any data, so it cannot stream; it needs pyBigWig.
    """

    streams: bool = False

    def unavailable(self) -> str | None:
        try:
            require_pybigwig()
        except ImportError as e:
            return str(e)
        return None

    def finish(self, out: Path | None, spans: list[PartSpan], whole: Path | None = None, header: bytes = b"") -> None:
        """Build the bigWig ``out`` from the staged intervals of ``spans`` (``whole`` and ``header`` are not used:
        a bigWig has no track line)."""
        if out is None:
            raise ValueError(f"{self.title} cannot be written to stdout")
        write_bigwig(out, spans)


def concat_spans(spans: list[PartSpan], dst: BinaryIO, block: int = 1 << 22) -> None:
    """Copy each span's bytes from its part into ``dst``, in order, a block at a time."""
    for span in spans:
        with open(span.path, "rb") as src:
            src.seek(span.offset)
            n = span.nbytes
            while n > 0:
                buf = src.read(min(block, n))
                if not buf:
                    raise PartFileError(f"{span.path}: part file ends early (damaged work folder)")
                dst.write(buf)
                n -= len(buf)


BEDGRAPH = TrackFormat("bedgraph", "bedGraph", ".bedGraph", (".bedgraph", ".bg", ".bdg"), ".bedGraph", BedGraphWriter)
WIG = TrackFormat("wig", "WIG", ".wig", (".wig",), ".wig", WigWriter, track_type="wiggle_0")
BIGWIG = BigWigFormat("bigwig", "bigWig", ".bw", (".bw", ".bigwig"), ".bin", IntervalWriter)
TRACK_FORMATS: dict[str, TrackFormat] = {f.name: f for f in (BEDGRAPH, WIG, BIGWIG)}
"""Every format by its --format name, in the order the CLI lists them."""
FORMATS = tuple(TRACK_FORMATS)
DEFAULT_FORMAT = BEDGRAPH.name  # when neither --format nor the output's name says
EXTENSIONS = {n: f.extension for n, f in TRACK_FORMATS.items()}
SUFFIXES = {n: f.suffixes for n, f in TRACK_FORMATS.items()}


def track_format(name: str) -> TrackFormat:
    """The format called ``name`` (a --format value)."""
    try:
        return TRACK_FORMATS[name]
    except KeyError:
        raise ValueError(f"unknown track format {name!r}; expected one of {FORMATS}") from None


def is_bgzf_name(path: str | Path) -> bool:
    """An output named ``*.gz``: written as BGZF (block gzip), which tabix and IGV index and gzip reads."""
    return Path(path).suffix.lower() == ".gz"


def track_suffix(path: str | Path) -> str:
    """The lowercase extension that names a track's format, under a ``.gz`` (``x.bedGraph.gz`` -> ``.bedgraph``)."""
    p = Path(path)
    if is_bgzf_name(p):
        p = p.with_suffix("")
    return p.suffix.lower()


def format_for_path(path: str | Path) -> str | None:
    """The format a file name implies (``.bw`` -> bigwig, ``.wig`` -> wig, ``.bedGraph`` and ``.bedGraph.gz`` ->
    bedgraph), else None."""
    suffix = track_suffix(path)
    return next((f.name for f in TRACK_FORMATS.values() if suffix in f.suffixes), None)


def track_line(fmt: str, name: str, description: str) -> bytes:
    """A UCSC track definition line for a bedGraph/WIG output. ``name`` and ``description`` come from file and model
    names: quotes, backslashes and control characters are dropped, so the line stays one line of key="value"."""

    def clean(text: str, n: int) -> str:
        return "".join(c for c in text if c.isprintable() and c not in '"\\')[:n]

    kind = TRACK_FORMATS[fmt].track_type
    return f'track type={kind} name="{clean(name, 64)}" description="{clean(description, 200)}"\n'.encode()


def output_name_problem(path: str | Path, fmt: str, explicit: bool = False) -> str | None:
    """Why a track output file name does not fit its format ``fmt``, or None: ``.gz`` on a bigWig (compressed
    already), or, when the format was not given (``explicit`` False) but taken from the name, an extension that
    names no track format (``x.bed`` is BED: it would silently get bedGraph). A name without extension is fine."""
    chosen, suffix = TRACK_FORMATS[fmt], track_suffix(path)
    if is_bgzf_name(path) and not chosen.streams:
        return f"{path}: a {chosen.title} file is compressed already: drop the .gz"
    if suffix and suffix not in chosen.suffixes and not explicit:
        other = format_for_path(path)
        said = f"names {TRACK_FORMATS[other].title}" if other else f"is not a {chosen.title} extension"
        return (f"{path}: {suffix!r} {said}; name the {chosen.title} output {chosen.extension}"
                f"{' or ' + chosen.extension + '.gz' if chosen.streams else ''}, or give --format")  # fmt: skip
    return None


HEADER_WORDS = ("track", "browser", "fixedStep", "variableStep")
"""First words that make a bedGraph/WIG line a header (UCSC, bedtools and ``iter_intervals`` agree)."""


def track_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a record (chromosome) name in a track file, or None when it can.

    A data line starting with ``track``, ``browser`` or ``#`` is a header or comment to every bedGraph/WIG
    reader, ``fixedStep``/``variableStep`` open a WIG block, whitespace splits a line's fields, and a NUL
    ends a bigWig name. Such names are refused rather than escaped: an escaped name would no longer match
    the record in the FASTA, a GFF3 annotation or a ``--region``.
    """
    if name in HEADER_WORDS:
        return f"is a track header word (a line starting with {name!r} is a header to bedGraph/WIG readers)"
    if name.startswith("#"):
        return "starts with '#' (a comment line to bedGraph/WIG readers)"
    bad = next((c for c in name if c.isspace() or not c.isprintable()), None)
    if bad is not None:
        what = "whitespace" if bad.isspace() else "a control or invisible character"
        return f"contains {what} ({bad!r}), which breaks track lines and bigWig names"
    return None


# ---- reading tracks back (plot, annotation reports, tests) ---------------------------------------------
BIGWIG_MAGIC = bytes.fromhex("26fc8f88")  # 0x888FFC26, little-endian: the first 4 bytes of every bigWig
CHROM_TREE_MAGIC = 0x78CA8C91  # the chromosome B+ tree's header


def bed_rows(path: str | Path, error: type[Exception], label: str | None = None) -> Iterator[tuple[int, list[str]]]:
    """(line number, fields) of every data line of a BED file, in order: blank, ``#``, ``track`` and ``browser``
    lines skipped; fields split on tabs (on any whitespace in a line without a tab).

    A file that cannot be read, or is not UTF-8, raises ``error`` with one line that starts with ``label``
    (default: the path). Each caller checks the columns it needs.
    """
    label = str(path) if label is None else label
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as e:
        raise error(f"{label}: not a text BED file (invalid UTF-8 at byte {e.start})") from None
    except OSError as e:
        raise error(f"{label}: cannot read it ({e.strerror or e})") from None
    for n, line in enumerate(lines, 1):
        if line.strip() and not line.startswith(("#", "track", "browser")):
            yield n, line.split("\t") if "\t" in line else line.split()


def parse_region(region: str) -> tuple[str, int | None, int | None]:
    """CHROM:START-END (0-based half-open, commas allowed) or CHROM -> (chrom, start, end)."""
    chrom, _, span = region.rpartition(":") if ":" in region else (region, "", "")
    if not chrom:
        raise TrackError(f"bad region {region!r}; expected CHROM:START-END or CHROM")
    if not span:
        return chrom, None, None
    try:
        a, b = (int(x.replace(",", "")) for x in span.split("-"))
    except ValueError:
        raise TrackError(f"bad region {region!r}; expected CHROM:START-END") from None
    if a < 0 or b <= a:
        raise TrackError(f"bad region {region!r}: need 0 <= START < END")
    return chrom, a, b


def is_bigwig(path: str | Path) -> bool:
    """True when the file starts with the bigWig magic number (whatever its name says)."""
    with open(path, "rb") as f:
        return f.read(4) == BIGWIG_MAGIC


def _open_track(path: str | Path) -> bool:
    """Check that ``path`` is a readable track file; returns whether it is a bigWig."""
    p = Path(path)
    if not p.exists():
        raise TrackError(f"{path}: no such track file")
    if p.is_dir():
        raise TrackError(f"{path}: is a directory, expected a track file")
    try:
        big = is_bigwig(p)
    except OSError as e:
        raise TrackError(f"{path}: cannot read ({e.strerror or e})") from None
    if not big and p.suffix.lower() in BIGWIG.suffixes:
        raise TrackError(f"{path}: not a bigWig file (no bigWig header), though named like one")
    return big


def iter_intervals(path: str | Path, block: int = 1 << 16) -> Iterator[tuple[str, np.ndarray, np.ndarray, np.ndarray]]:
    """Stream a bedGraph, WIG (fixedStep/variableStep) or bigWig file as (chrom, starts, ends, values) blocks.

    Coordinates are 0-based half-open whatever the format; at most ``block`` intervals per block, so memory
    stays flat in the track's size. Raises ``TrackError`` with the file and line of anything malformed.
    """
    if _open_track(path):
        yield from _iter_bigwig(path, block)
        return
    rows: list[tuple[int, int, float]] = []
    cur = None
    for chrom, s, e, v in _iter_text_track(Path(path)):
        if rows and (chrom != cur or len(rows) >= block):
            yield cur, *_arrays(rows)
            rows = []
        cur = chrom
        rows.append((s, e, v))
    if rows:
        yield cur, *_arrays(rows)


def _arrays(rows: list[tuple[int, int, float]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    arr = np.array(rows, dtype=np.float64).reshape(-1, 3)
    return arr[:, 0].astype(np.int64), arr[:, 1].astype(np.int64), arr[:, 2].astype(np.float32)


def _iter_bigwig(path, block: int, chrom: str | None = None, lo: int = 0, hi: int | None = None):
    with open_bigwig(path) as bw:
        chroms = bw.chroms()
        for name in [chrom] if chrom is not None else list(chroms):
            end = min(hi if hi is not None else chroms[name], chroms[name])
            for a in range(lo, end, block):  # by ranges: a chromosome's per-base list would not fit in memory
                with _silenced_stderr():  # libBigWig's messages on a corrupt block: the TrackError says it
                    iv = bw.intervals(name, a, min(a + block, end)) or []
                iv = [x for x in iv if x[0] >= a or a == lo]  # an interval straddling a cut comes once
                if iv:
                    arr = np.array(iv, dtype=INTERVAL_DTYPE)
                    yield name, arr["start"], arr["end"], arr["value"]


@contextmanager
def open_bigwig(path: str | Path):
    """A pyBigWig reader of ``path``, closed on exit; a file pyBigWig cannot read is a one-line ``TrackError``.

    Refused: a truncated or corrupt file (pyBigWig's RuntimeError, and libBigWig's own messages on stderr
    are kept off the terminal), and a file whose chromosome list has more entries than pyBigWig returns
    names: two names that differ only after a NUL byte, which pyBigWig would read as one record.
    """
    try:
        pbw = require_pybigwig()
    except ImportError:
        raise TrackError(f"{path}: reading a bigWig needs pyBigWig: pip install 'strandline[bigwig]'") from None
    try:
        with _silenced_stderr():
            bw = pbw.open(str(path))
    except RuntimeError:
        bw = None
    if bw is None:
        raise TrackError(f"{path}: truncated or corrupt bigWig (pyBigWig cannot open it)")
    try:
        n = _bigwig_chrom_count(path)
        if n != len(bw.chroms()):
            raise TrackError(
                f"{path}: {n} chromosome entries but {len(bw.chroms())} distinct names (names that differ only after"
                " a NUL byte?); this bigWig cannot be read unambiguously"
            )
        yield bw
    except RuntimeError as e:
        raise TrackError(f"{path}: truncated or corrupt bigWig ({first_line(e)})") from None
    finally:
        bw.close()


def _bigwig_chrom_count(path: str | Path) -> int:
    """The item count of a bigWig's chromosome B+ tree (header offset 8 -> tree header, count at +16)."""
    with open(path, "rb") as f:
        f.seek(8)
        tree = f.read(8)
        f.seek(struct.unpack("<Q", tree)[0] if len(tree) == 8 else 0)
        head = f.read(24) if len(tree) == 8 else b""
    if len(head) < 24 or struct.unpack("<I", head[:4])[0] != CHROM_TREE_MAGIC:
        raise TrackError(f"{path}: truncated or corrupt bigWig (no chromosome list)")
    return struct.unpack("<Q", head[16:24])[0]


@contextmanager
def _silenced_stderr():
    """Send file descriptor 2 to /dev/null for the block (libBigWig prints failures there, not to Python)."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _open_maybe_gzip(path: Path):
    """The file's bytes, through gzip when it starts with the gzip magic (a BGZF track is gzip)."""
    with open(path, "rb") as f:
        gz = f.read(2) == b"\x1f\x8b"
    return gzip.open(path, "rb") if gz else open(path, "rb")


def _numbered_lines(path: Path, f) -> Iterator[tuple[int, bytes]]:
    """(line number, line) of ``f``; a damaged or truncated gzip stream is one TrackError."""
    n = 0
    try:
        for n, raw in enumerate(f, 1):
            yield n, raw
    except (EOFError, OSError, zlib.error) as e:
        raise TrackError(f"{path}: compressed data is damaged or truncated after line {n} ({e})") from None


def _iter_text_track(path: Path) -> Iterator[tuple[str, int, int, float]]:
    """(chrom, start, end, value) of every bedGraph or WIG data line, 0-based half-open."""
    cur, pos, step, span, variable = None, 0, 1, 1, False
    with _open_maybe_gzip(path) as f:
        for n, raw in _numbered_lines(path, f):
            try:
                line = raw.decode("utf-8")
                if "\0" in line:
                    raise UnicodeDecodeError("utf-8", raw, 0, 1, "NUL byte")
            except UnicodeDecodeError:
                raise TrackError(f"{path}: line {n}: not text (a binary file, not bedGraph/WIG?)") from None
            parts = line.split()
            if not parts or parts[0] in ("track", "browser") or parts[0].startswith("#"):
                continue
            try:
                if parts[0] in ("fixedStep", "variableStep"):
                    kv = dict(x.split("=", 1) for x in parts[1:])
                    cur, variable = kv["chrom"], parts[0] == "variableStep"
                    span = int(kv.get("span", 1))
                    if not variable:
                        pos, step = int(kv["start"]) - 1, int(kv.get("step", 1))  # WIG is 1-based
                    if span < 1 or (not variable and step < 1):
                        raise ValueError
                    continue
                if len(parts) == 4:  # bedGraph
                    chrom, s, e, v = parts[0], int(parts[1]), int(parts[2]), float(parts[3])
                elif len(parts) == 2 and variable and cur is not None:
                    chrom, s, v = cur, int(parts[0]) - 1, float(parts[1])
                    e = s + span
                elif len(parts) == 1 and cur is not None and not variable:
                    chrom, s, e, v = cur, pos, pos + span, float(parts[0])
                    pos += step
                else:
                    raise ValueError
            except (ValueError, KeyError):
                what = "a FASTA header" if line.startswith(">") else repr(line.strip()[:40])
                raise TrackError(f"{path}: line {n}: {what} is not a bedGraph or WIG line") from None
            if s < 0 or e <= s:  # a negative or empty interval (WIG's 1-based start 0 is one)
                raise TrackError(f"{path}: line {n}: bad interval [{s}, {e}) (0-based; needs 0 <= start < end)")
            yield chrom, s, e, v


def read_region(track: str | Path, region: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Intervals (starts, ends, values), 0-based half-open, of a bedGraph/WIG/bigWig file over a region."""
    chrom, a, b = parse_region(region)
    lo, hi = a or 0, b if b is not None else np.iinfo(np.int64).max
    parts, found = [], False
    if _open_track(track):
        with open_bigwig(track) as bw:
            found = chrom in bw.chroms()
        blocks = _iter_bigwig(track, 1 << 16, chrom, lo, b) if found else iter(())
    else:
        blocks = iter_intervals(track)
    seen_any = False
    for c, s, e, v in blocks:
        seen_any = True
        if c != chrom:
            continue
        found = True
        keep = (e > lo) & (s < hi)
        parts.append((s[keep], e[keep], v[keep]))
    if not found:
        empty = not seen_any and not is_bigwig(track)
        raise TrackError(
            f"{track}: no bedGraph/WIG data lines (empty file?)" if empty else f"{track}: no record {chrom!r}"
        )
    if not parts:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32)
    return tuple(np.concatenate(x) for x in zip(*parts, strict=True))  # type: ignore[return-value]
