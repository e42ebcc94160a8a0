"""Draw a track (bedGraph, WIG or bigWig) over a region to a PNG: ``strandline plot`` and ``scan --plot``."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from strandline.data.tracks import TrackError, read_region
from strandline.files import atomic_output, check_output


def draw_track(track: str | Path, region: str, output: str | Path, title: str | None = None) -> Path:
    """Plot the values of ``track`` over ``region`` (CHROM:START-END, 0-based half-open, or CHROM) as a step line.

    N gaps (no interval) stay blank. The PNG appears only when complete.

    Raises:
        TrackError: the track is not a bedGraph/WIG/bigWig file, has no such record, or no values there.
    """
    check_output(output, [track], what="plot")
    s, e, v = read_region(track, region)
    if len(s) == 0:
        raise TrackError(f"{track}: no values in {region}")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(12, 3))
    x = np.stack([s, e], 1).ravel().astype(float)  # a step per interval
    y = np.repeat(v, 2).astype(float)
    brk = np.flatnonzero(s[1:] != e[:-1]) + 1  # NaN between non-touching intervals: gaps stay blank
    x, y = np.insert(x, 2 * brk, np.nan), np.insert(y, 2 * brk, np.nan)
    ax.plot(x, y, lw=0.6)
    # record names, file names and titles are shown as typed: '$' would start matplotlib's math mode
    ax.set_xlabel(f"{region.partition(':')[0]} position (0-based)", parse_math=False)
    ax.set_ylabel(Path(track).name, parse_math=False)
    ax.set_title(title or f"{Path(track).name}  {region}", parse_math=False)
    fig.tight_layout()
    out = Path(output)
    try:
        with atomic_output(out) as tmp:  # a device or FIFO (/dev/null) gets the finished file copied in, never replaced
            fig.savefig(tmp, format="png", dpi=120)
    finally:
        plt.close(fig)
    return out
