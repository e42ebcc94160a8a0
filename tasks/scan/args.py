"""``ScanArgs``: every option of a genome scan, in one place.

The engine (``strandline.tasks.scan.scan``) takes a ``ScanArgs``, and ``strandline scan`` builds its parser from
it (``strandline.app.cli``: fields are options, attribute docstrings their help, fields without a default
positionals), so an option is added, documented and defaulted once. ``ScanOptions`` (``strandline.tasks.scan.job``)
is the narrower part that changes the output and is stored in a work folder's signature.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class ScanArgs:
    """What to scan, where to write it, and how (``strandline scan MODEL INPUT... -o OUT [options]``)."""

    model: str
    """model directory or Lightning checkpoint (DNA tokenizer)."""
    inputs: list[str]
    """FASTA (plain, gzip/BGZF, xz, bz2), GenBank or EMBL files, or '-' for stdin; scanned in order. A pipe
    (<(zcat genome.fa.gz), a FIFO) is read once, as stdin is."""
    output: str
    """output path (-o); '-' writes bedGraph/WIG to stdout; several tracks: one file each, stem.TRACK.ext."""
    track: str | list[str] = "logprob"
    """tracks, comma-separated: logprob (log2 P of the observed base, bits), entropy, A, C, G, T."""
    format: str | None = None
    """bedgraph (0-based half-open), wig (fixedStep, 1-based) or bigwig; default: from the output name."""
    window: int = 1
    """mean over windows of this many bases (1 = per base); windows with no scored base are gaps."""
    mode: str = "chunk"
    """'chunk' (chunked parallel, carrying the state) or 'step' (one base at a time; same numbers, slow)."""
    strand_average: bool = False
    """average with a reverse-complement pass re-aligned to forward coordinates."""
    summary: str | None = None
    """write a per-record TSV (name, length, N count, scored bases, mean bits/base, mean entropy, U as T)."""
    annotation: str | None = None
    """GFF3, GenBank or EMBL features for --annotation_report (default: those of GenBank/EMBL inputs)."""
    annotation_report: str | None = None
    """write a TSV of each track's mean inside vs outside each feature type (CDS, tRNA, intergenic...)."""
    feature_report: str | None = None
    """write a TSV of every feature (gene, tRNA, ...): its mean per track and its rank by surprise (1: most)."""
    calls: str | None = None
    """write BED6 regions whose surprisal departs from the record's background (robust z of window means)."""
    call_window: int = 1000
    """--calls: window in bases."""
    call_z: float = 3.5
    """--calls: the robust z (median/MAD over the record's windows) beyond which a window is called."""
    rename: str | None = None
    """rename records in every output: 'accession' (NCBI ``gi|…|ref|NC_000913.3|`` -> ``NC_000913.3``) or a TSV of
    ``INPUT_NAME<TAB>NAME_TO_WRITE`` lines (a chromAlias table; names not listed are kept); annotation names too."""
    track_line: bool = False
    """start each bedGraph/WIG output with a UCSC ``track type=... name=... description=...`` line."""
    plot: str | None = None
    """also draw the tracks to this PNG/SVG/PDF (over --region, default the first 10 kb)."""
    region: str | None = None
    """scan only this region, CHROM:START-END (0-based half-open) or CHROM, read through an index (plain or
    bgzip FASTA); --plot draws it. Without it --plot draws the first 10 kb."""
    regions: str | None = None
    """scan only the spans of this BED file (chrom, start, end), read through an index; merged when they overlap."""
    warmup: int = 20000
    """--region/--regions: bases the model reads before each span from a fresh state (scores dropped); once it
    covers the model's memory the span's values equal a whole-record scan's; >= the span's start: exact."""
    resume: bool = False
    """continue a killed scan of the same model, inputs and options from its last checkpoint."""
    checkpoint_every: float = 60.0
    """seconds between state checkpoints (0 = after every chunk)."""
    workers: int = 1
    """worker processes; records are dealt round-robin, outputs merged in input order."""
    chunk: int = 8192
    """bases fed to the model per call (the state is carried across calls); 8192 suits CPUs, use 65536 on a GPU."""
    state_dtype: str = "float64"
    """accumulation dtype of the carried state (float32 or float64); float64 keeps chromosomes exact."""
    devices: int = 0
    """> 0 runs Lightning predict on this many devices (DDP, one rank per device, whole records)."""
    accelerator: str = "cpu"
    """cpu, gpu (cuda) or auto; gpu without --devices scans in this process on the GPU."""
    threads: int | None = None
    """torch CPU threads (default: torch's; 1 is faster on a busy shared machine); at most the cores available."""

    @property
    def tracks(self) -> list[str]:
        """``track`` as a list of names: a comma-separated string is split, a list kept (each name stripped)."""
        names = self.track.split(",") if isinstance(self.track, str) else list(self.track)
        return [t.strip() for t in names] or ["logprob"]
