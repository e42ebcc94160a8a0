"""Draw tracks (bedGraph, WIG or bigWig) over a region: ``strandline plot`` and ``scan --plot``.

One panel per track, sharing the x-axis, each labelled with its quantity and unit; a feature lane under them
when an annotation is given (genes by strand, RNA genes, repeats and mobile elements in their own colours).
A region with more intervals than ``max_points`` is binned: the mean of each bin (weighted by bases) drawn
as a line over the band from its minimum to its maximum, so a whole genome reads as a profile, not a solid
band. The format follows the output's extension: ``.png``, ``.svg`` or ``.pdf``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from strandline.data.tracks import TrackError, format_for_path, is_bgzf_name, parse_region, read_region
from strandline.files import atomic_output, check_output

FORMATS = {".png": "png", ".svg": "svg", ".pdf": "pdf"}
QUANTITIES = {  # a track's name (scan --track) -> what its values are, with the unit
    "logprob": "log2 P(base), bits",
    "entropy": "entropy of P(next base), bits",
    "A": "P(A)",
    "C": "P(C)",
    "G": "P(G)",
    "T": "P(T)",
}
FEATURE_COLOURS = {  # feature type -> colour of the lane; other types are grey
    "gene": "#1f77b4", "CDS": "#1f77b4", "mRNA": "#1f77b4",
    "rRNA": "#d62728", "tRNA": "#ff7f0e", "ncRNA": "#ff7f0e", "tmRNA": "#ff7f0e",
    "repeat_region": "#7f7f7f", "mobile_element": "#9467bd", "mobile_genetic_element": "#9467bd",
}  # fmt: skip
LANE_ORDER = ("gene", "CDS", "mRNA", "rRNA", "tRNA", "ncRNA", "tmRNA", "mobile_element",
              "mobile_genetic_element", "repeat_region")  # fmt: skip


BAND = (0.1, 0.9)  # the dark band of a binned track: the middle 80% of each bin's values


class PlotError(TrackError):
    """A plot that cannot be drawn as asked (format, region, inputs); one line for users."""


def plot_format(output: str | Path) -> str:
    """The image format of ``output`` from its extension; a device (``/dev/null``) gets PNG."""
    out = Path(output)
    fmt = FORMATS.get(out.suffix.lower())
    if fmt is None:
        if out.exists() and not out.is_file() and not out.is_dir():
            return "png"
        raise PlotError(f"{output}: a plot is written as .png, .svg or .pdf (by its extension), not {out.suffix or 'no extension'!r}")  # fmt: skip
    return fmt


def track_quantity(track: str | Path) -> str | None:
    """The track name (``logprob``, ``entropy``, ``A`` ..) in a scan output's name (``x.entropy.bedGraph``)."""
    name = Path(track).name
    if is_bgzf_name(name):
        name = Path(name).stem
    if format_for_path(name) is not None:
        name = Path(name).stem
    last = Path(name).suffix[1:]
    return last if last in QUANTITIES else None


def bin_intervals(
    s: np.ndarray, e: np.ndarray, v: np.ndarray, lo: int, hi: int, n_bins: int, q: tuple[float, float] = (0.0, 1.0)
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(bin centres, mean, low, high) over ``n_bins`` equal bins of [lo, hi); an interval counts in the bin of its
    start, the mean weighted by its length (scan tracks are per base); low and high are the ``q`` quantiles of the
    bin's values (default: its minimum and maximum). Bins with no value are NaN (a gap)."""
    edges = np.linspace(lo, hi, n_bins + 1)
    b = np.clip(np.searchsorted(edges, s, side="right") - 1, 0, n_bins - 1)
    w = (np.minimum(e, hi) - np.maximum(s, lo)).astype(float)
    total = np.bincount(b, w * v, n_bins)
    weight = np.bincount(b, w, n_bins)
    order = np.lexsort((v, b))  # by bin, then by value: each bin's values sorted in place
    counts = np.bincount(b, minlength=n_bins)
    first = np.concatenate([[0], np.cumsum(counts)[:-1]])
    lo_v, hi_v = np.full(n_bins, np.nan), np.full(n_bins, np.nan)
    has = counts > 0
    for out, qq in ((lo_v, q[0]), (hi_v, q[1])):
        at = first[has] + np.round(qq * (counts[has] - 1)).astype(np.int64)
        out[has] = v[order[at]]
    empty = weight == 0
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(empty, np.nan, total / weight)
    lo_v[empty], hi_v[empty] = np.nan, np.nan
    return (edges[:-1] + edges[1:]) / 2, mean, lo_v, hi_v


def _steps(s: np.ndarray, e: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    x = np.stack([s, e], 1).ravel().astype(float)  # a step per interval
    y = np.repeat(v, 2).astype(float)
    brk = np.flatnonzero(s[1:] != e[:-1]) + 1  # NaN between non-touching intervals: gaps stay blank
    return np.insert(x, 2 * brk, np.nan), np.insert(y, 2 * brk, np.nan)


def _draw_track(ax, s, e, v, lo: int, hi: int, max_points: int) -> str:
    if len(s) <= max_points:
        ax.plot(*_steps(s, e, v), lw=0.6, color="#1f4e79")
        return "per base"
    n_bins = max_points // 4
    x, mean, mn, mx = bin_intervals(s, e, v, lo, hi, n_bins)
    _, _, q1, q9 = bin_intervals(s, e, v, lo, hi, n_bins, BAND)
    ax.fill_between(x, mn, mx, color="#deebf7", lw=0)
    ax.fill_between(x, q1, q9, color="#9ecae1", lw=0)
    ax.plot(x, mean, lw=0.8, color="#08306b")
    return f"{(hi - lo) / n_bins:,.0f}-base bins: mean, 10-90% of bases (dark band), min-max (light)"


def _draw_features(ax, spans: list[tuple[int, int, int, str]]) -> None:
    """Features as boxes: + strand above the axis, - strand below, unstranded on it; a legend of the types."""
    seen: dict[str, str] = {}
    for start, end, strand, ftype in spans:
        colour = FEATURE_COLOURS.get(ftype, "#bdbdbd")
        y = {1: 0.25, -1: -0.75}.get(strand, -0.25)
        ax.add_patch(_rect((start, y), end - start, 0.5, colour))
        seen.setdefault(ftype, colour)
    ax.set_ylim(-1, 1)
    ax.set_yticks([0.5, -0.5], ["+", "-"])
    ax.axhline(0, color="black", lw=0.4)
    ax.set_ylabel("features", parse_math=False)
    order = sorted(seen, key=lambda t: (LANE_ORDER.index(t) if t in LANE_ORDER else len(LANE_ORDER), t))[:8]
    if order:
        leg = ax.legend([_rect((0, 0), 1, 1, seen[t]) for t in order], order, loc="lower right", ncol=8,
                        bbox_to_anchor=(1.0, 1.0), frameon=False, prop={"size": 7}, borderaxespad=0.1)  # fmt: skip
        for text in leg.get_texts():  # feature types come from the user's file: no math mode
            text.set_parse_math(False)


def _rect(xy, w, h, colour):
    from matplotlib.patches import Rectangle

    return Rectangle(xy, w, h, facecolor=colour, edgecolor="none")


def draw_tracks(
    tracks: list[str | Path],
    region: str,
    output: str | Path,
    title: str | None = None,
    quantities: list[str | None] | None = None,
    annotation: list[str] | None = None,
    max_points: int = 4000,
    rename=None,
) -> Path:
    """Plot ``tracks`` over ``region`` (CHROM:START-END, 0-based half-open, or CHROM), one panel each.

    Args:
        tracks: bedGraph/WIG/bigWig files, drawn top to bottom on a shared x-axis.
        region: what to draw; a whole record when only CHROM is given.
        output: .png, .svg or .pdf; written only when complete.
        title: a line over the plot (default: the record and region).
        quantities: each track's name (``logprob``, ``entropy``, ``A``..) for its axis label; None: from the
            file's name (``x.entropy.bedGraph``), else the file's name.
        annotation: GFF3/GenBank/EMBL files whose features on the region are drawn in a lane below.
        max_points: above this many intervals in the region, a track is drawn binned (mean and min-max band).
        rename: how the scan renamed its records (``--rename``), applied to the annotation's record names.

    Raises:
        TrackError: a track is not a bedGraph/WIG/bigWig file, has no such record, or no values there.
        PlotError: an output extension other than .png/.svg/.pdf.
        AnnotationError: an unreadable annotation.
    """
    fmt = plot_format(output)
    check_output(output, [*map(str, tracks), *(annotation or [])], what="plot")
    chrom, a, b = parse_region(region)
    data = []
    for t in tracks:
        s, e, v = read_region(t, region)
        if len(s) == 0:
            raise TrackError(f"{t}: no values in {region}")
        data.append((s, e, v))
    lo = a if a is not None else int(min(d[0].min() for d in data))
    hi = b if b is not None else int(max(d[1].max() for d in data))
    spans = []
    if annotation:
        from strandline.data.annotations import feature_spans

        spans = feature_spans(list(annotation), chrom, lo, hi, rename)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    n = len(tracks) + bool(annotation)
    heights = [3] * len(tracks) + ([1.2] if annotation else [])
    fig, axes = plt.subplots(n, 1, figsize=(12, 0.6 + sum(heights) * 0.8), sharex=True,
                             gridspec_kw={"height_ratios": heights}, squeeze=False)  # fmt: skip
    axes = axes[:, 0]
    names = quantities or [None] * len(tracks)
    for ax, t, q, (s, e, v) in zip(axes, tracks, names, data, strict=False):
        q = q or track_quantity(t)
        how = _draw_track(ax, s, e, v, lo, hi, max_points)
        # record names, file names and titles are shown as typed: '$' would start matplotlib's math mode
        ax.set_ylabel(QUANTITIES.get(q, Path(t).name) if q else Path(t).name, parse_math=False, fontsize=8)
        ax.set_title(f"{Path(t).name} ({how})", parse_math=False, fontsize=8, loc="left")
        ax.grid(alpha=0.3, lw=0.4)
    if annotation:
        _draw_features(axes[-1], spans)
    axes[-1].set_xlim(lo, hi)
    axes[-1].xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda x, _: f"{x:,.0f}"))
    axes[-1].set_xlabel(f"{chrom} position (bp, 0-based)", parse_math=False)
    head = f"{chrom}:{lo:,}-{hi:,} ({hi - lo:,} bp)"
    fig.suptitle(f"{title}\n{head}" if title else head, fontsize=10, parse_math=False)
    fig.tight_layout()
    out = Path(output)
    try:
        with atomic_output(out) as tmp:  # a device or FIFO (/dev/null) gets the finished file copied in, never replaced
            fig.savefig(tmp, format=fmt, dpi=120)
    finally:
        plt.close(fig)
    return out


def draw_track(track: str | Path, region: str, output: str | Path, title: str | None = None) -> Path:
    """One track over a region (``draw_tracks`` with one track)."""
    return draw_tracks([track], region, output, title)
