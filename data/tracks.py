"""Track writers and the reader: bedGraph (0-based half-open), WIG fixedStep (1-based), bigWig (pyBigWig).

The reader (``iter_intervals``, ``read_region``) streams any of the three back as 0-based half-open blocks,
recognising bigWig by its magic bytes; anything else that is not a track raises ``TrackError``.

Everything inside Strandline is 0-based half-open ``[start, end)``; the writers convert. Writers take
sorted, non-overlapping intervals of one record at a time (``write``), may be called many times per
record (a chunk at a time), and must be told where a record ends (``end_record``). Their carried state
(the open bedGraph run, the open WIG block) is a small JSON-able dict (``get_state`` / ``set_state``) so
that a killed scan can resume and still write byte-identical output.

Gaps (N bases, windows with no scored base) are simply absent intervals: bedGraph skips them, WIG starts
a new ``fixedStep`` block after them, bigWig stores nothing there.

Text values are written with ``%.6g`` (far below the model's own float32 noise of ~1e-6 relative);
bigWig stores the float32 values exactly. bedGraph merges adjacent intervals only when their float32
values are identical, so a per-base track stays per-base.
"""

from __future__ import annotations

import os
import struct
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

import numpy as np

from strandline.errors import UserInputError, first_line
from strandline.files import atomic_output

INTERVAL_DTYPE = np.dtype([("start", "<i8"), ("end", "<i8"), ("value", "<f4")])
"""Binary interval records: the intermediate of a bigWig (exact float32, resumable by byte offset)."""

FORMATS = ("bedgraph", "wig", "bigwig")
EXTENSIONS = {"bedgraph": ".bedGraph", "wig": ".wig", "bigwig": ".bw"}


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


def _fmt(v: float) -> str:
    return f"{v:.6g}"


class BedGraphWriter:
    """bedGraph lines ``chrom start end value`` (0-based half-open); identical adjacent values merge."""

    def __init__(self, fh: BinaryIO):
        self.fh = fh
        self.run: list | None = None  # [chrom, start, end, value] not yet written

    def write(self, chrom: str, starts: np.ndarray, ends: np.ndarray, values: np.ndarray) -> None:
        """Append intervals of ``chrom``; starts/ends int [n], values float32 [n], sorted, disjoint."""
        if not len(starts):
            return
        starts, ends = np.asarray(starts, np.int64), np.asarray(ends, np.int64)
        values = np.asarray(values, np.float32)
        # a new run starts where the value changes or a gap opens
        new = np.ones(len(starts), bool)
        new[1:] = (values[1:] != values[:-1]) | (starts[1:] != ends[:-1])
        run = self.run
        if run is not None and run[0] == chrom and run[2] == starts[0] and np.float32(run[3]) == values[0]:
            new[0] = False  # continues the open run
        heads = np.flatnonzero(new)
        lines = []
        if run is not None:
            if not new[0]:  # extend the open run through the intervals before the first new head
                run[2] = int(ends[heads[0] - 1 if len(heads) else -1])
            if len(heads):
                lines.append(f"{run[0]}\t{run[1]}\t{run[2]}\t{_fmt(run[3])}\n")
        if len(heads):
            run_end = np.append(heads[1:], len(starts)) - 1  # last interval of each run
            s, e, v = starts[heads].tolist(), ends[run_end].tolist(), values[heads].tolist()
            lines += [f"{chrom}\t{a}\t{b}\t{_fmt(x)}\n" for a, b, x in zip(s[:-1], e[:-1], v[:-1], strict=True)]
            self.run = [chrom, s[-1], e[-1], v[-1]]
        self.fh.write("".join(lines).encode())

    def end_record(self) -> None:
        if self.run is not None:
            c, s, e, v = self.run
            self.fh.write(f"{c}\t{s}\t{e}\t{_fmt(v)}\n".encode())
        self.run = None

    def get_state(self) -> dict:
        return {"run": self.run}

    def set_state(self, state: dict) -> None:
        self.run = state["run"]


class WigWriter:
    """WIG ``fixedStep`` (1-based starts); a new block after every gap or change of interval length."""

    def __init__(self, fh: BinaryIO):
        self.fh = fh
        self.block: list | None = None  # [chrom, next 0-based start, span] of the open block

    def write(self, chrom: str, starts: np.ndarray, ends: np.ndarray, values: np.ndarray) -> None:
        if not len(starts):
            return
        starts, ends = np.asarray(starts, np.int64), np.asarray(ends, np.int64)
        span = ends - starts
        new = np.ones(len(starts), bool)  # a fixedStep block needs contiguous intervals of one span
        new[1:] = (starts[1:] != ends[:-1]) | (span[1:] != span[:-1])
        b = self.block
        if b is not None and b[0] == chrom and b[1] == starts[0] and b[2] == span[0]:
            new[0] = False
        text = [f"{_fmt(x)}\n" for x in np.asarray(values, np.float32).tolist()]
        for i in np.flatnonzero(new).tolist():  # 1-based start in the header; step = span
            text[i] = (
                f"fixedStep chrom={chrom} start={int(starts[i]) + 1} step={int(span[i])} span={int(span[i])}\n"
                + text[i]
            )
        self.block = [chrom, int(ends[-1]), int(span[-1])]
        self.fh.write("".join(text).encode())

    def end_record(self) -> None:
        self.block = None

    def get_state(self) -> dict:
        return {"block": self.block}

    def set_state(self, state: dict) -> None:
        self.block = state["block"]


class IntervalWriter:
    """Binary ``INTERVAL_DTYPE`` records (no merging); ``write_bigwig`` turns them into a bigWig."""

    def __init__(self, fh: BinaryIO):
        self.fh = fh

    def write(self, chrom: str, starts: np.ndarray, ends: np.ndarray, values: np.ndarray) -> None:
        rec = np.empty(len(starts), INTERVAL_DTYPE)
        rec["start"], rec["end"], rec["value"] = starts, ends, values
        self.fh.write(rec.tobytes())

    def end_record(self) -> None:
        pass

    def get_state(self) -> dict:
        return {}

    def set_state(self, state: dict) -> None:
        pass


def make_writer(fmt: str, fh: BinaryIO) -> BedGraphWriter | WigWriter | IntervalWriter:
    """The writer of a format; bigWig output is staged as binary intervals (see ``write_bigwig``)."""
    if fmt == "bedgraph":
        return BedGraphWriter(fh)
    if fmt == "wig":
        return WigWriter(fh)
    if fmt == "bigwig":
        return IntervalWriter(fh)
    raise ValueError(f"unknown track format {fmt!r}; expected one of {FORMATS}")


def require_pybigwig():
    """Import pyBigWig or raise ImportError with the install hint (it is an optional extra)."""
    try:
        import pyBigWig
    except ImportError:
        raise ImportError("bigWig output needs pyBigWig: pip install 'strandline[bigwig]'") from None
    return pyBigWig


def write_bigwig(out: str | Path, records: list[tuple[str, int, str | Path, int, int]], block: int = 1 << 20) -> None:
    """Write a bigWig from staged interval files, atomically.

    Args:
        out: the .bw path.
        records: (chrom, length, interval file, byte offset, byte length) per record, in output order.
        block: intervals passed to pyBigWig per call (bounds memory).
    """
    pbw = require_pybigwig()
    header = [(name, int(length)) for name, length, *_ in records if length > 0]
    with atomic_output(out) as tmp:
        bw = pbw.open(str(tmp), "w")
        try:
            bw.addHeader(header, maxZooms=10)
            for name, _, path, offset, nbytes in records:
                n = nbytes // INTERVAL_DTYPE.itemsize
                for i in range(0, n, block):
                    k = min(block, n - i)
                    rec = np.fromfile(path, INTERVAL_DTYPE, count=k, offset=offset + i * INTERVAL_DTYPE.itemsize)
                    bw.addEntries(
                        [name] * k, rec["start"].tolist(), ends=rec["end"].tolist(), values=rec["value"].tolist()
                    )
        finally:
            bw.close()


class WindowMean:
    """Mean of per-base values over fixed windows ``[kW, (k+1)W)`` of a record (NaN = no value).

    A window with no scored base yields no interval (a gap); the last window of a record is cut at the
    record's end. Sums are float64 and the open window is carried across chunks (``state``).
    """

    def __init__(self, width: int, n_tracks: int):
        self.width, self.n_tracks = width, n_tracks
        self.reset()

    def reset(self) -> None:
        self.win, self.sum, self.cnt = 0, [0.0] * self.n_tracks, [0] * self.n_tracks

    def add(self, offset: int, values: np.ndarray, record_end: int | None) -> list[tuple[np.ndarray, ...]]:
        """Add values [n, tracks] at ``offset``; return (starts, ends, means) per track for closed windows.

        ``record_end`` (the record length) closes the last window; pass None while the record goes on.
        """
        W, n = self.width, values.shape[0]
        w = (offset + np.arange(n)) // W - self.win  # window index relative to the open one
        n_win = int(w[-1]) + 1 if n else 1
        closed = n_win if record_end is not None else n_win - 1
        out = []
        for t in range(self.n_tracks):
            v = values[:, t].astype(np.float64)
            ok = ~np.isnan(v)
            sums = np.bincount(w[ok], weights=v[ok], minlength=n_win)
            cnts = np.bincount(w[ok], minlength=n_win)
            sums[0] += self.sum[t]
            cnts[0] += self.cnt[t]
            keep = np.flatnonzero(cnts[:closed] > 0)
            starts = (self.win + keep) * W
            ends = np.minimum(starts + W, record_end if record_end is not None else np.iinfo(np.int64).max)
            out.append((starts, ends, (sums[keep] / cnts[keep]).astype(np.float32)))
            self.sum[t], self.cnt[t] = (0.0, 0) if closed == n_win else (float(sums[-1]), int(cnts[-1]))
        self.win += closed
        return out

    def get_state(self) -> dict:
        return {"win": self.win, "sum": self.sum, "cnt": self.cnt}

    def set_state(self, state: dict) -> None:
        self.win, self.sum, self.cnt = state["win"], list(state["sum"]), list(state["cnt"])


# ---- reading tracks back (plot, annotation reports, tests) ---------------------------------------------
BIGWIG_MAGIC = bytes.fromhex("26fc8f88")  # 0x888FFC26, little-endian: the first 4 bytes of every bigWig
CHROM_TREE_MAGIC = 0x78CA8C91  # the chromosome B+ tree's header


class TrackError(UserInputError):
    """A track file that cannot be read (not bedGraph/WIG/bigWig, malformed line, missing record)."""


def format_for_path(path: str | Path) -> str | None:
    """The format a file name implies (``.bw`` -> bigwig, ``.wig`` -> wig, ``.bedGraph`` -> bedgraph), else None."""
    suffix = Path(path).suffix.lower()
    for fmt, exts in SUFFIXES.items():
        if suffix in exts:
            return fmt
    return None


SUFFIXES = {"bedgraph": (".bedgraph", ".bg", ".bdg"), "wig": (".wig",), "bigwig": (".bw", ".bigwig")}


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
    if not big and format_for_path(p) == "bigwig":
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


def _iter_text_track(path: Path) -> Iterator[tuple[str, int, int, float]]:
    """(chrom, start, end, value) of every bedGraph or WIG data line, 0-based half-open."""
    cur, pos, step, span, variable = None, 0, 1, 1, False
    with open(path, "rb") as f:
        for n, raw in enumerate(f, 1):
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
