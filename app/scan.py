"""``strandline scan`` and ``strandline plot``: parse, call the engine (``strandline.tasks.scan``), report.

The engine checks everything and raises ``UserInputError`` subclasses for user problems; the CLI
(``strandline.app.cli``) builds the parser from these signatures (``scan MODEL INPUT... -o OUT [options]``), prints
those errors as one line and exits 2. ``scan`` adds the notes a user should see (empty records, RNA U). Its
options are the fields of ``ScanArgs`` (``strandline.tasks.scan.args``), which the engine takes too.
"""

from __future__ import annotations

import sys

from strandline.tasks.scan import RecordSummary
from strandline.tasks.scan.args import ScanArgs


def scan(args: ScanArgs) -> list[RecordSummary]:
    """Score every base of FASTA/GenBank/EMBL records with a DNA model and write tracks (bedGraph, WIG, bigWig).

    Args:
        args: the options (``strandline.tasks.scan.args.ScanArgs``: each field is an option of ``strandline scan``).

    Returns:
        The per-record summaries in input order.
    """
    from strandline.tasks.scan import available_cores
    from strandline.tasks.scan import scan as run_scan

    if args.threads is not None and args.threads > (cores := available_cores()):
        print(f"strandline scan: note: --threads {args.threads} is more than the {cores} cores available; using {cores}",
              file=sys.stderr)  # fmt: skip
    records = run_scan(args)
    empty = [r.name for r in records if r.length == 0]
    if empty:
        shown = ", ".join(empty[:5]) + (f" and {len(empty) - 5} more" if len(empty) > 5 else "")
        print(
            f"strandline scan: note: {len(empty)} empty record(s) with no bases, in no track: {shown}", file=sys.stderr
        )
    u = sum(r.u_as_t for r in records)
    if u:
        print(f"strandline scan: note: {u} RNA U base(s) read as T (counted per record in --summary)", file=sys.stderr)
    if records:  # DDP ranks > 0 return none: rank 0 says what was written
        scored = sum(r.scored for r in records)
        bits = sum(r.sum_bits for r in records) / scored if scored else float("nan")
        from strandline.tasks.scan import track_paths

        where = "stdout" if args.output == "-" else ", ".join(map(str, track_paths(args.output, args.tracks)))
        print(f"strandline scan: wrote {where}: {len(records):,} record(s), {scored:,} bases scored, "
              f"mean logprob {-bits:.4f} bits/base", file=sys.stderr)  # fmt: skip
    return records


def plot(
    track: str, region: str, output: str, title: str | None = None, also: str | None = None,
    annotation: str | None = None,
) -> None:  # fmt: skip
    """Draw tracks (bedGraph, WIG or bigWig) over a region to a PNG, SVG or PDF (by the output's extension).

    Args:
        track: the track file (a scan output; its quantity is read from its name, e.g. x.entropy.bedGraph).
        region: CHROM:START-END (0-based half-open) or CHROM (the whole record, drawn binned).
        output: .png, .svg or .pdf path.
        title: a line over the plot (default: the record and region only).
        also: more track files, comma-separated, each in its own panel under the first.
        annotation: a GFF3, GenBank or EMBL file whose features are drawn in a lane under the tracks.
    """
    from strandline.tasks.scan.plot import draw_tracks

    tracks = [track, *(t for t in (also or "").split(",") if t)]
    draw_tracks(tracks, region, output, title, annotation=[annotation] if annotation else None)
    print(f"wrote {output}", file=sys.stderr)


def report(
    genome: str, tracks: list[str], output: str, annotation: str | None = None, calls: str | None = None,
    top: int = 25, window: int = 5000, threshold: float = 4.0, rename: str | None = None, title: str | None = None,
) -> None:  # fmt: skip
    """Write one self-contained HTML page (igv.js, inlined: no network needed) with the genome, the tracks, the
    features and a table of the most anomalous regions; a click on a row moves the browser there.

    Args:
        genome: the FASTA/GenBank/EMBL file the scan read (its sequence is embedded; up to 50 Mb).
        tracks: the scan's track files (bedGraph, WIG or bigWig), each drawn as a panel (binned on large genomes).
        output: the .html path.
        annotation: a GFF3, GenBank or EMBL file of features (default: the genome's own, when GenBank/EMBL).
        calls: the BED of ``scan --calls``; without it the regions are called here from the first logprob track.
        top: rows in the table of anomalous regions.
        window: without --calls: window of the calls (bases).
        threshold: without --calls: robust |z| from which a window is called.
        rename: the scan's --rename (``accession`` or a two-column TSV), so that the genome's records carry the
            tracks' names.
        title: the page's heading (default: the track names).
    """
    from strandline.data.names import RecordNames
    from strandline.tasks.report import build_report

    info = build_report(tracks, genome, output, annotation, calls, top, window, threshold,
                        RecordNames.from_option(rename), title)  # fmt: skip
    print(f"strandline report: wrote {output} ({info['bytes'] / 1e6:.1f} MB: {info['records']} record(s), "
          f"{info['bases']:,} bases, {info['regions']} anomalous region(s), {info['features']:,} features)",
          file=sys.stderr)  # fmt: skip
