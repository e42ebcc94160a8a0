"""Regions whose surprisal departs from their record's background: ``scan --calls OUT.bed``.

A genome is read by a model that knows DNA; most of it scores near the record's typical bits/base, and what
departs marks something: DNA from elsewhere (genomic islands, prophages, plasmid insertions) reads as more
surprising, repeats and low-complexity stretches as less. The record is cut into windows of ``window``
bases; each window's mean surprisal x (bits/base, -log2 P, over its scored bases) is compared with the
record's windows by a robust z-score, z = (x - median) / (1.4826 * MAD), which a few large islands do not
inflate as a standard deviation would. Windows with |z| >= ``threshold`` are called, adjacent ones of the
same sign merged, and written as BED6: ``chrom start end name score strand`` with name ``high:Z`` (more
surprising than the background) or ``low:Z`` (less), Z the largest |z| of the merged windows, score
min(1000, 100 * Z) and strand ``.``. Windows with fewer than half their bases scored (N runs, a record's
end) are not called, and a record with fewer than ``MIN_WINDOWS`` windows gets no calls: its background
cannot be estimated.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from strandline.data.annotations import step_integral
from strandline.data.tracks import TrackError, iter_intervals
from strandline.files import atomic_write_text

MAD_TO_SD = 1.4826  # the MAD of a normal distribution times this is its standard deviation
MIN_WINDOWS = 10


def window_surprisal(
    track: str | Path, lengths: dict[str, int], window: int, logprob: bool = True, strict: bool = False
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """record -> (scored bases, mean value) of each ``window``-base window, read block by block (memory: the
    windows). With ``logprob`` the values are log2 P and the means are returned as surprisal (-log2 P).

    Records of the track not in ``lengths`` are skipped, or with ``strict`` refused (``TrackError``), as are
    values past a record's end: the track was written for another genome."""
    acc = {c: (np.zeros(-(-n // window)), np.zeros(-(-n // window))) for c, n in lengths.items()}
    for chrom, s, e, v in iter_intervals(track):
        if strict and chrom not in acc:
            raise TrackError(
                f"{track}: record {chrom!r} is not in the genome (records: {', '.join(list(lengths)[:3])}); "
                "give the genome the scan read, with the scan's --rename"
            )
        if strict and len(s) and int(e[-1]) > lengths[chrom]:
            raise TrackError(f"{track}: {chrom} has values past its end ({lengths[chrom]:,} bases): another genome?")
        if chrom not in acc or not len(s):
            continue
        lo, hi = int(s[0]), int(e[-1])
        k0, k1 = lo // window, (hi - 1) // window
        edges = np.clip(np.arange(k0, k1 + 2, dtype=np.int64) * window, lo, hi)
        w = (e - s).astype(np.float64)
        for a, y in zip(acc[chrom], (w, w * v.astype(np.float64)), strict=True):
            a[k0 : k1 + 1] += np.diff(step_integral(s, e, y, edges))
    sign = -1.0 if logprob else 1.0
    return {c: (b, sign * sm / np.maximum(b, 1)) for c, (b, sm) in acc.items()}


def robust_z(x: np.ndarray) -> np.ndarray:
    """(x - median) / (1.4826 * MAD); all zeros when the MAD is 0 (a flat record)."""
    med = np.median(x)
    mad = MAD_TO_SD * np.median(np.abs(x - med))
    return (x - med) / mad if mad > 0 else np.zeros_like(x)


def call_regions(
    windows: dict[str, tuple[np.ndarray, np.ndarray]], lengths: dict[str, int], window: int, threshold: float
) -> list[tuple[str, int, int, str, int]]:
    """(record, start, end, name, score) of the merged called windows, records in the given order."""
    rows = []
    for chrom, (bases, x) in windows.items():
        sizes = np.minimum(window, lengths[chrom] - np.arange(len(x)) * window)
        ok = bases >= sizes / 2
        if ok.sum() < MIN_WINDOWS:
            continue
        z = np.zeros(len(x))
        z[ok] = robust_z(x[ok])
        hit = ok & (np.abs(z) >= threshold)
        i = 0
        while i < len(x):
            if not hit[i]:
                i += 1
                continue
            j, sign = i, np.sign(z[i])
            while j + 1 < len(x) and hit[j + 1] and np.sign(z[j + 1]) == sign:
                j += 1
            peak = float(np.abs(z[i : j + 1]).max())
            end = min(lengths[chrom], (j + 1) * window)
            rows.append(
                (chrom, i * window, end, f"{'high' if sign > 0 else 'low'}:{peak:.1f}", min(1000, round(100 * peak)))
            )
            i = j + 1
    return rows


def write_calls(
    out: str | Path, track: str | Path, lengths: dict[str, int], window: int = 1000, threshold: float = 3.5,
    logprob: bool = True,
) -> int:  # fmt: skip
    """Write the BED6 calls of one track (see the module docstring); returns how many regions were called."""
    rows = call_regions(window_surprisal(track, lengths, window, logprob), lengths, window, threshold)
    atomic_write_text(out, "".join(f"{c}\t{s}\t{e}\t{n}\t{sc}\t.\n" for c, s, e, n, sc in rows))
    return len(rows)
