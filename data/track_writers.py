"""Track writers: bedGraph (0-based half-open), WIG fixedStep (1-based), and bigWig staged as binary intervals.

Everything inside Strandline is 0-based half-open ``[start, end)``; the writers convert. Writers take
sorted, non-overlapping intervals of one record at a time (``write``), may be called many times per
record (a chunk at a time), and must be told where a record ends (``end_record``). Their carried state
(the open bedGraph run, the open WIG block) is a small JSON-able dict (``get_state`` / ``set_state``) so
that a killed scan can resume and still write byte-identical output. Which writer a format uses, and how
its part files become the output, is the format's (``strandline.data.tracks.TrackFormat``).

Gaps (N bases, windows with no scored base) are simply absent intervals: bedGraph skips them, WIG starts
a new ``fixedStep`` block after them, bigWig stores nothing there.

Text values are written with ``%.6g`` (far below the model's own float32 noise of ~1e-6 relative);
bigWig stores the float32 values exactly. bedGraph merges adjacent intervals only when their float32
values are identical, so a per-base track stays per-base.
"""

from __future__ import annotations

from pathlib import Path
from typing import BinaryIO, Protocol

import numpy as np

from strandline.files import atomic_output

INTERVAL_DTYPE = np.dtype([("start", "<i8"), ("end", "<i8"), ("value", "<f4")])
"""Binary interval records: the intermediate of a bigWig (exact float32, resumable by byte offset)."""


class TrackWriter(Protocol):
    """What every writer offers: append a record's intervals, close the record, carry its state to a resume."""

    def write(self, chrom: str, starts: np.ndarray, ends: np.ndarray, values: np.ndarray) -> None: ...

    def end_record(self) -> None: ...

    def get_state(self) -> dict: ...

    def set_state(self, state: dict) -> None: ...


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
