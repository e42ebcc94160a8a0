"""``strandline scan`` and ``strandline plot``: parse, call the engine (``strandline.tasks.scan``), report.

The engine checks everything and raises ``UserInputError`` subclasses for user problems; the CLI
(``strandline.app.cli``) builds the parser from these signatures (``scan MODEL INPUT... -o OUT [options]``), prints
those errors as one line and exits 2. ``scan`` adds the notes a user should see (empty records, RNA U).
"""

from __future__ import annotations

import sys

from strandline.tasks.scan import RecordSummary


def scan(
    model: str,
    inputs: list[str],
    output: str,
    track: str | list[str] = "logprob",
    format: str | None = None,
    window: int = 1,
    mode: str = "chunk",
    strand_average: bool = False,
    summary: str | None = None,
    annotation: str | None = None,
    annotation_report: str | None = None,
    plot: str | None = None,
    region: str | None = None,
    resume: bool = False,
    checkpoint_every: float = 60.0,
    workers: int = 1,
    chunk: int = 8192,
    state_dtype: str = "float64",
    devices: int = 0,
    accelerator: str = "cpu",
    threads: int | None = None,
) -> list[RecordSummary]:
    """Score every base of FASTA/GenBank/EMBL records with a DNA model and write tracks (bedGraph, WIG, bigWig).

    Args:
        model: model directory or Lightning checkpoint (DNA tokenizer).
        inputs: FASTA (plain, gzip/BGZF, xz, bz2), GenBank or EMBL files, or '-' for stdin; scanned in order.
        output: output path (-o); '-' writes bedGraph/WIG to stdout; several tracks: one file each, stem.TRACK.ext.
        track: tracks, comma-separated: logprob (log2 P of the observed base, bits), entropy, A, C, G, T.
        format: bedgraph (0-based half-open), wig (fixedStep, 1-based) or bigwig; default: from the output name.
        window: mean over windows of this many bases (1 = per base); windows with no scored base are gaps.
        mode: 'chunk' (chunked parallel, carrying the state) or 'step' (one base at a time; same numbers, slow).
        strand_average: average with a reverse-complement pass re-aligned to forward coordinates.
        summary: write a per-record TSV (name, length, N count, scored bases, mean bits/base, mean entropy, U as T).
        annotation: GFF3, GenBank or EMBL features for --annotation_report (default: those of GenBank/EMBL inputs).
        annotation_report: write a TSV of each track's mean inside vs outside each feature type (CDS, tRNA, intergenic...).
        plot: also draw the first track to this PNG (over --region, default the first 10 kb).
        region: region for --plot: CHROM:START-END (0-based half-open) or CHROM.
        resume: continue a killed scan of the same model, inputs and options from its last checkpoint.
        checkpoint_every: seconds between state checkpoints (0 = after every chunk).
        workers: worker processes; records are dealt round-robin, outputs merged in input order.
        chunk: bases fed to the model per call (the state is carried across calls); 8192 suits CPUs, use 65536 on a GPU.
        state_dtype: accumulation dtype of the carried state (float32 or float64); float64 keeps chromosomes exact.
        devices: > 0 runs Lightning predict on this many devices (DDP, one rank per device, whole records).
        accelerator: cpu, gpu (cuda) or auto; gpu without --devices scans in this process on the GPU.
        threads: torch CPU threads (default: torch's; 1 is faster on a busy shared machine); at most the cores available.

    Returns:
        The per-record summaries in input order.
    """
    from strandline.tasks.scan import ScanError, available_cores
    from strandline.tasks.scan import scan as run_scan

    if not checkpoint_every >= 0:  # -1 was taken silently as 0 (after every chunk)
        raise ScanError(f"--checkpoint_every must be >= 0 seconds (0 = after every chunk), got {checkpoint_every}")
    if threads is not None and threads > (cores := available_cores()):
        print(f"strandline scan: note: --threads {threads} is more than the {cores} cores available; using {cores}",
              file=sys.stderr)  # fmt: skip
    tracks = track.split(",") if isinstance(track, str) else list(track)
    records = run_scan(
        model, inputs, output, tracks=[t.strip() for t in tracks], format=format, window=window, mode=mode,
        strand_average=strand_average, chunk=chunk, state_dtype=state_dtype, summary=summary,
        annotation=annotation, annotation_report=annotation_report, plot=plot, region=region, resume=resume,
        checkpoint_every=checkpoint_every, workers=workers, devices=devices, accelerator=accelerator,
        threads=threads,
    )  # fmt: skip
    empty = [r.name for r in records if r.length == 0]
    if empty:
        shown = ", ".join(empty[:5]) + (f" and {len(empty) - 5} more" if len(empty) > 5 else "")
        print(
            f"strandline scan: note: {len(empty)} empty record(s) with no bases, in no track: {shown}", file=sys.stderr
        )
    u = sum(r.u_as_t for r in records)
    if u:
        print(f"strandline scan: note: {u} RNA U base(s) read as T (counted per record in --summary)", file=sys.stderr)
    return records


def plot(track: str, region: str, output: str, title: str | None = None) -> None:
    """Draw a track (bedGraph, WIG or bigWig) over a region to a PNG.

    Args:
        track: the track file.
        region: CHROM:START-END (0-based half-open) or CHROM.
        output: PNG path.
        title: plot title (default: the file and region).
    """
    from strandline.tasks.scan.plot import draw_track

    draw_track(track, region, output, title)
    print(f"wrote {output}", file=sys.stderr)
