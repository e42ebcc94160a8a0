"""The genome-scan engine: one plain Python API, ``scan(ScanArgs(model, inputs, output, ...))``.

Everything that can be checked is checked before the first base is scored: the options, every output
path (not an input, not a directory, in a writable folder), the model (loaded once, a DNA model), the
inputs (surveyed: readable, records, unique names across files, not all empty, ``region`` and annotation
record names), the work folder (locked against a second scan; ``--resume`` only of the same scan). Then
the records are dealt to shards (in-process, worker processes, or Lightning predict ranks, ``strandline.tasks.scan.predict``), each a ``ScanJob``
writing part files in ``.<OUT>.scan/`` (``strandline.tasks.scan.workdir``), and the parts are merged in input order
into outputs that appear only when complete. User problems raise ``ScanError`` (a ``UserInputError``:
one line); bad input found mid-scan removes the work folder, a kill or crash keeps it for ``resume``.
"""

from __future__ import annotations

import errno
import os
import shutil
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path

import torch

from strandline.data.fasta import FastaError
from strandline.data.tracks import (
    DEFAULT_FORMAT,
    TRACK_FORMATS,
    format_for_path,
    output_name_problem,
    track_format,
)
from strandline.errors import UserInputError
from strandline.files import check_output, reads_once
from strandline.tasks.scan import workdir as scan_workdir
from strandline.tasks.scan.args import ScanArgs
from strandline.tasks.scan.inputs import SurveyedRecord, survey_inputs
from strandline.tasks.scan.job import (
    TRACKS,
    ScanCheckpointError,
    ScanError,
    ScanJob,
    ScanOptions,
    base_scores,
    load_for_scan,
    part_paths,
    score_chunk,
    score_sequence,
)

__all__ = [
    "TRACKS", "RecordSummary", "ScanArgs", "ScanCheckpointError", "ScanError", "ScanJob", "ScanOptions", "base_scores",
    "load_for_scan", "scan", "score_chunk", "score_sequence", "track_paths",
]  # fmt: skip

ACCELERATORS = ("cpu", "gpu", "cuda", "auto")
DISK_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
MAX_PROCESSES_PER_CORE = 4  # --workers / CPU --devices beyond this many per core: refused (100000 forked away)
PLOT_SPAN = 10_000  # bases --plot draws by default
TEMP_EXTRA = len("..XXXXXXXX.tmp")  # what strandline.files.atomic_output adds to a name for its temporary


@dataclass
class RecordSummary:
    """One scanned record, in input order: what the summary TSV writes."""

    name: str
    length: int
    n_count: int  # N and IUPAC-ambiguous bases (no value)
    scored: int  # bases with a value
    sum_bits: float  # sum of surprisal (-log2 P) over scored bases
    sum_entropy: float
    u_as_t: int = 0  # RNA U bases read as T
    first_scored: int | None = None  # offset of the first base with a value

    @property
    def mean_bits(self) -> float | None:
        return self.sum_bits / self.scored if self.scored else None

    @property
    def mean_entropy(self) -> float | None:
        return self.sum_entropy / self.scored if self.scored else None


def track_paths(output: str, tracks: list[str]) -> list[Path]:
    """One output per track: ``output`` itself for one track, else ``stem.TRACK.ext`` (e.g. out.entropy.bedGraph)."""
    out = Path(output)
    if len(tracks) == 1:
        return [out]
    gz = ".gz" if out.suffix.lower() == ".gz" else ""
    base = out.with_suffix("") if gz else out  # out.bedGraph.gz -> out.entropy.bedGraph.gz
    return [base.with_name(f"{base.stem}.{t}{base.suffix}{gz}") for t in tracks]


def scan(args: ScanArgs, *, progress: bool = True) -> list[RecordSummary]:
    """Score every base of the records of ``args.inputs`` with a DNA model and write tracks.

    Args:
        args: every option (``ScanArgs``, the same as ``strandline scan --help``); ``output`` '-' is stdout
            (bedGraph/WIG, one track).
        progress: show progress on stderr: a labelled bar on a terminal, else a plain line every 30 seconds.

    Returns:
        The records in input order (empty records included, with length 0).

    Raises:
        ScanError, FastaError, ModelLoadError, TrackError, AnnotationError: user problems, one line each.
    """
    fmt = _check_options(args)
    model, inputs, output, tracks, threads = args.model, list(args.inputs), args.output, args.tracks, args.threads
    summary, annotation, annotation_report, plot, region = (
        args.summary, args.annotation, args.annotation_report, args.plot, args.region
    )  # fmt: skip
    if threads:
        torch.set_num_threads(min(threads, available_cores()))  # far more threads than cores crashed torch
    to_stdout = is_stream(output)  # '-', or a device or pipe such as /dev/null: written in place, never replaced
    outs = [None if output == "-" else Path(output)] if to_stdout else track_paths(output, tracks)
    feature_report, calls = args.feature_report, args.calls
    extra = {"--summary": summary, "--annotation_report": annotation_report, "--plot": plot,
             "--feature_report": feature_report, "--calls": calls}  # fmt: skip
    if calls and "logprob" not in tracks:
        raise ScanError("--calls reads the logprob track: add logprob to --track")
    if calls and (args.call_window < 1 or not args.call_z > 0):
        raise ScanError(f"--call_window must be >= 1 and --call_z > 0, got {args.call_window} and {args.call_z}")
    _check_outputs(outs, {k: v for k, v in extra.items() if v}, model, [*inputs, *([annotation] if annotation else [])])
    if args.track_line and not track_format(fmt).streams:
        raise ScanError(
            f"--track_line: a {track_format(fmt).title} file has no track line (its header says what it is)"
        )
    if not to_stdout and (problem := output_name_problem(output, fmt, args.format is not None)):
        raise ScanError(problem)  # after the checks of what the output is (an input, a folder): those say more
    if plot:
        from strandline.tasks.scan.plot import plot_format

        plot_format(plot)  # an unknown extension is refused before the scan, not after it
    regional = bool(region or args.regions)
    streaming = any(map(reads_once, inputs))  # stdin or a pipe: no survey, read once by one process
    if regional and (args.strand_average or args.devices > 0):
        raise ScanError("--region/--regions scan in this process, one strand: drop --strand_average and --devices")
    if regional and args.warmup < 0:
        raise ScanError(f"--warmup must be >= 0 bases, got {args.warmup}")
    if to_stdout and (plot or annotation_report or feature_report or calls):
        raise ScanError("--plot and the reports read the track file: give -o FILE, not a stream")
    lm = load_for_scan(model, args.state_dtype)
    if lm.meta.get("streaming"):
        print(f"strandline scan: note: {lm.meta['streaming']}", file=sys.stderr)
    if (lm.meta.get("tokenizer") or "dna") != "dna":
        raise ScanError(f"{model}: a {lm.meta.get('tokenizer')!r} model cannot scan DNA (needs tokenizer 'dna')")
    from strandline.data.names import RecordNames

    names = RecordNames.from_option(args.rename)
    spans = None
    if regional:  # through an index: the spans, not the files, are read
        from strandline.tasks.scan.regions import IndexedGenome, plan_spans

        genome = IndexedGenome(inputs, names)
        surveyed = [SurveyedRecord(genome.paths[n], n, length) for n, length in genome.lengths.items()]
        spans = plan_spans(region, args.regions, genome.lengths)
        if plot and not region:
            name, ((a, b), *_) = spans[0]
            region = f"{name}:{a}-{min(b, a + PLOT_SPAN)}"
    else:
        surveyed = survey_inputs(inputs, names)
        if not streaming and not any(r.length for r in surveyed):
            raise ScanError(f"{', '.join(inputs)}: no bases to scan (every record is empty)")
    if plot and not region and not streaming:
        region = plot_region([(r.name, r.length, r.first_base) for r in surveyed])
    listed = {} if feature_report else None  # --feature_report's rows, filled by the same read of the features
    features = _load_features(annotation, annotation_report or feature_report, inputs, surveyed, names, listed)
    opts = ScanOptions(tracks, fmt, args.window, args.mode, args.strand_average, args.chunk, args.state_dtype,
                       args.checkpoint_every, names.signature() if names else None)  # fmt: skip
    total = None if streaming else sum(r.length for r in surveyed)
    if spans is not None:
        from strandline.tasks.scan.regions import warmed_bases

        opts.regions = [[name, [list(sp) for sp in sps]] for name, sps in spans]
        opts.warmup, total = args.warmup, warmed_bases(spans, args.warmup)
    devices, resume = args.devices, args.resume
    n_shards = devices if devices > 0 else (1 if streaming else args.workers)  # stdin or a pipe: read by one process
    sig = scan_workdir.signature(scan_workdir.model_digest(lm), inputs, opts, n_shards)
    workdir = Path(tempfile.mkdtemp(prefix=".strandline-scan-"), "work") if to_stdout else _workdir(output)
    folder, merged = scan_workdir.WorkFolder(workdir), False
    try:
        if os.environ.get("LOCAL_RANK", "0") == "0":  # DDP ranks > 0 are launched into rank 0's folder
            resume = folder.open(sig, resume)
        job = _Job(lm, model, inputs, workdir, opts, n_shards, scan_workdir.scan_id(sig), resume, devices,
                   args.accelerator, progress, total,
                   {r.name: r.path for r in surveyed}, _track_lines(args, fmt, outs, tracks))  # fmt: skip
        records = _execute(job, outs, folder)
        if records is None:  # a DDP rank > 0: rank 0 merges and writes the rest
            return []
        merged = True
        from strandline.data.annotations import annotation_sources

        lanes = annotation_sources(annotation, inputs) if plot else []
        _write_reports(records, outs, tracks, summary, annotation_report, features, plot, region, lanes, names)
        if calls:
            from strandline.data.calls import write_calls

            write_calls(calls, outs[list(tracks).index("logprob")], {r.name: r.length for r in records},
                        args.call_window, args.call_z)  # fmt: skip
        if feature_report:
            from strandline.data.annotations import write_feature_report

            write_feature_report(feature_report, dict(zip(tracks, outs, strict=True)), listed)
        folder.remove()
    except OSError as e:
        if e.errno not in DISK_FULL:
            raise
        raise ScanError(_disk_full(e, output, None if to_stdout else workdir, merged)) from None
    finally:
        folder.close()
        if to_stdout:  # our own temporary folder: nothing to resume without an output file
            shutil.rmtree(workdir.parent, ignore_errors=True)
    return records


def _track_lines(args: ScanArgs, fmt: str, outs: list, tracks: list[str]) -> list[bytes] | None:
    """The UCSC track line of each output (``--track_line``): its name from the output, its description the track
    and the model."""
    if not args.track_line:
        return None
    from strandline.data.tracks import track_line

    model = Path(args.model).name or str(args.model)
    from strandline.tasks.scan.plot import QUANTITIES

    return [
        track_line(fmt, _track_name(o) if o else "strandline", f"strandline {t} ({QUANTITIES[t]}), "
                   f"model {model}")
        for o, t in zip(outs, tracks if len(tracks) == len(outs) else tracks[:1], strict=True)
    ]  # fmt: skip


def _track_name(out) -> str:
    """An output's name without its format's extensions: ``o.logprob.bedGraph.gz`` -> ``o.logprob``."""
    name = Path(out).name
    for _ in range(2):
        if Path(name).suffix.lower() in (".gz", *(s for f in TRACK_FORMATS.values() for s in f.suffixes)):
            name = Path(name).stem
    return name


def _write_reports(
    records, outs, tracks, summary, annotation_report, features, plot, region, lanes=(), rename=None
) -> None:
    """What is written from the finished tracks: the summary TSV, the annotation report, the plot (every track,
    one panel each, and the features of ``lanes`` under them)."""
    if summary:
        write_summary(summary, records)
    if annotation_report:
        from strandline.data.annotations import write_annotation_report

        write_annotation_report(annotation_report, dict(zip(tracks, outs, strict=True)), features)
    if plot:
        from strandline.tasks.scan.plot import draw_tracks

        if region is None:  # stdin among the inputs: the region is known only now
            region = plot_region([(r.name, r.length, r.first_scored) for r in records])
        draw_tracks(outs, region, plot, quantities=list(tracks), annotation=list(lanes) or None, rename=rename)


def plot_region(records: list[tuple[str, int, int | None]]) -> str:
    """``--plot``'s default region: PLOT_SPAN bases from the first base with a value (chr1 starts with N).

    Args:
        records: (name, length, offset of the first base with a value or None) in input order.
    """
    first = next((r for r in records if r[2] is not None), None)
    if first is None:
        raise ScanError("--plot: no record has a base with a value (all N or empty): nothing to draw")
    name, length, start = first
    return f"{name}:{start}-{min(length, start + PLOT_SPAN)}"


def _disk_full(e: OSError, output: str, workdir: Path | None, merged: bool) -> str:
    """The one line for a full disk (or quota, or file size limit) while the scan writes."""
    why = e.strerror or os.strerror(e.errno)
    if workdir is None:
        return f"{output}: {why} while writing the scan; the output is incomplete"
    if merged:  # the tracks are in place; the summary, report or plot is not
        return f"{e.filename or output}: {why} after the tracks were written; free space and write it again"
    return (f"{output}: {why} while writing the scan; no output was replaced; free space and rerun with --resume "
            f"(the work folder {workdir} is kept)")  # fmt: skip


@dataclass
class _Job:
    """Everything the shards need, checked: what ``_execute`` runs."""

    lm: object
    model: str
    inputs: list[str]
    workdir: Path
    opts: ScanOptions
    n_shards: int
    scan_id: str
    resume: bool
    devices: int
    accelerator: str
    progress: bool
    total: int | None
    file_records: dict[str, str]
    headers: list[bytes] | None = None  # a track line per output (--track_line)


def _execute(job: _Job, outs: list[Path | None], folder: scan_workdir.WorkFolder) -> list[RecordSummary] | None:
    """Run the shards and merge their parts into ``outs``; None on DDP ranks > 0.

    Bad input found mid-scan removes the work folder (nothing to resume); a checkpoint that does not fit
    keeps it; anything else (a kill, Ctrl-C, a crash, a full disk) keeps it for ``resume``.
    """
    try:
        shards = _run(job)
        if shards is None:
            return None
        if not any(r["length"] for index, _ in shards for r in index):
            raise ScanError(f"{', '.join(job.inputs)}: no bases to scan (every record is empty)")
    except ScanCheckpointError as e:
        raise ScanCheckpointError(f"{e}; rerun without --resume to start over") from None
    except (UserInputError, FastaError):
        folder.remove()
        raise
    return [_summary(r) for r in scan_workdir.merge(shards, outs, job.opts.track_format, job.headers)]


def _check_options(args: ScanArgs) -> str:
    """Refuse bad options (one line each); returns the format, inferred from the output name when not given."""
    inputs, tracks, fmt, output, resume = args.inputs, args.tracks, args.format, args.output, args.resume
    window, mode, chunk, state_dtype, workers, threads = (
        args.window, args.mode, args.chunk, args.state_dtype, args.workers, args.threads
    )  # fmt: skip
    if not args.checkpoint_every >= 0:  # -1 was taken silently as 0 (after every chunk)
        raise ScanError(f"--checkpoint_every must be >= 0 seconds (0 = after every chunk), got {args.checkpoint_every}")
    if not inputs:
        raise ScanError("no input given (FASTA, GenBank or EMBL files, or - for stdin)")
    if inputs.count("-") > 1:
        raise ScanError("stdin ('-') can be given only once")
    twice = [p for p in set(inputs) if inputs.count(p) > 1 and reads_once(p)]
    if twice:
        raise ScanError(f"{twice[0]}: a pipe can be read only once; it is given twice")
    bad = [t for t in tracks if t not in TRACKS]
    if bad:
        raise ScanError(f"unknown track {bad[0]!r}; expected some of {', '.join(TRACKS)}")
    if len(set(tracks)) != len(tracks):
        raise ScanError("a track is listed twice")
    implied = format_for_path(output)
    if fmt is None:
        fmt = implied or DEFAULT_FORMAT
    elif fmt not in TRACK_FORMATS:
        raise ScanError(f"--format must be one of {', '.join(TRACK_FORMATS)}, got {fmt!r}")
    elif implied is not None and implied != fmt:
        raise ScanError(f"{output}: the name says {implied} but --format is {fmt}; rename it or drop --format")
    chosen = track_format(fmt)
    if not chosen.streams and is_stream(output):
        raise ScanError(f"{chosen.title} cannot be written to stdout or a stream: give a {chosen.extension} file name")
    if problem := chosen.unavailable():
        raise ScanError(problem)
    if is_stream(output) and len(tracks) > 1:
        raise ScanError("several tracks need several files: give -o FILE, not stdout or a stream")
    if is_stream(output) and resume:
        raise ScanError("--resume needs the work folder of an output file: give -o FILE, not stdout or a stream")
    for name, v in (("--window", window), ("--chunk", chunk), ("--workers", workers)):
        if v < 1:
            raise ScanError(f"{name} must be >= 1, got {v}")
    if workers > MAX_PROCESSES_PER_CORE * available_cores():  # a process each, with its own model and parts
        raise ScanError(f"--workers {workers}: far more than the {available_cores()} CPU cores available here")
    if threads is not None and threads < 1:
        raise ScanError(f"--threads must be >= 1, got {threads}")
    if mode not in ("chunk", "step"):
        raise ScanError(f"--mode must be 'chunk' or 'step', got {mode!r}")
    if state_dtype not in ("float32", "float64"):
        raise ScanError(f"--state_dtype must be float32 or float64, got {state_dtype!r}")
    _check_devices(args.devices, args.accelerator, workers, inputs)
    return fmt


def _check_devices(devices: int, accelerator: str, workers: int, inputs: list[str]) -> None:
    if devices < 0:
        raise ScanError(f"--devices must be >= 0, got {devices}")
    if accelerator not in ACCELERATORS:
        raise ScanError(f"--accelerator must be one of {', '.join(ACCELERATORS)}, got {accelerator!r}")
    if devices > 0 and any(map(reads_once, inputs)):
        raise ScanError("stdin or a pipe cannot be scanned with --devices (every rank reads the inputs): give files")
    if devices > 0 and workers > 1:
        raise ScanError("--workers and --devices both split the records: give one of them")
    on_cpu = accelerator == "cpu" or (accelerator == "auto" and not torch.cuda.is_available())
    if on_cpu and devices > MAX_PROCESSES_PER_CORE * available_cores():  # one DDP rank (a process) per device
        raise ScanError(f"--devices {devices}: far more than the {available_cores()} CPU cores available here")
    if accelerator in ("gpu", "cuda"):
        have = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if have == 0:
            raise ScanError(f"--accelerator {accelerator}: no CUDA GPU is available on this machine (use cpu)")
        if devices > have:
            raise ScanError(f"--devices {devices}: only {have} GPU(s) on this machine")


def _check_outputs(outs: list[Path | None], extra: dict[str, str], model: str, inputs: list[str]) -> None:
    """Every output: not an input or the model's files, not a directory, writable folder, all distinct."""
    m = Path(model)
    model_files = [m / n for n in ("config.json", "model.safetensors")] if m.is_dir() else [m]
    named = [(str(p), "output") for p in outs if p is not None] + [(p, f"{k} file") for k, p in extra.items()]
    for path, what in named:
        check_output(path, [*inputs, *model_files], what=what)
        if what != "output" and is_stream(path):  # atomic_output would replace a device node with a file
            raise ScanError(f"{path}: the {what} is not a regular file (a device or pipe); give a file name")
    for path, what in named:
        _check_name_lengths(path, what)
        if scan_workdir.is_work_folder(Path(os.path.abspath(path)).parent):  # it would land among a scan's parts
            raise ScanError(f"{path}: the {what} is inside a scan's work folder; give a path outside it")
    resolved = [os.path.realpath(p) for p, _ in named]
    for i, r in enumerate(resolved):
        if r in resolved[:i]:
            raise ScanError(f"{named[i][0]}: given as two outputs ({named[resolved.index(r)][1]} and {named[i][1]})")


def _check_name_lengths(path: str, what: str) -> None:
    """Refuse, before any work, a name whose temporary (or work folder) would not fit the file system's NAME_MAX."""
    p = Path(os.path.abspath(path))
    existing = next(d for d in p.parents if d.exists())
    try:
        name_max = os.pathconf(existing, "PC_NAME_MAX")
    except (OSError, ValueError):
        name_max = 255
    n = len(os.fsencode(p.name))
    if n + TEMP_EXTRA > name_max and not is_stream(path):
        raise ScanError(f"{path}: the {what} name is too long ({n} bytes; at most {name_max - TEMP_EXTRA} here, "
                        "to leave room for its temporary name)")  # fmt: skip


def available_cores() -> int:
    """CPU cores this process may run on (its affinity mask, e.g. under taskset or a container's cpuset)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _load_features(annotation, report, inputs, surveyed, rename=None, listed=None):
    """Features for ``--annotation_report`` (and ``listed``, the ``--feature_report``'s rows, in the same read):
    from ``annotation`` or from the GenBank/EMBL inputs."""
    if not report:
        if annotation:
            raise ScanError("--annotation needs --annotation_report OUT.tsv or --feature_report OUT.tsv")
        return None
    from strandline.data.annotations import load_features

    return load_features(annotation, {r.name: r.length for r in surveyed}, inputs, rename, listed)


def is_stream(output: str) -> bool:
    """'-' (stdout) or an existing output that is not a regular file (/dev/null, a FIFO, /dev/stdout)."""
    p = Path(output)
    return output == "-" or (p.exists() and not p.is_file() and not p.is_dir())


def _workdir(output: str) -> Path:
    out = Path(output)
    return out.with_name(f".{out.name}.scan")


def _run(job: _Job) -> list[tuple[list[dict], list[Path]]] | None:
    """Run the shards: Lightning predict (``devices``), worker processes, or one job in this process."""
    if job.devices > 0:
        from strandline.tasks.scan.predict import predict_scan

        return predict_scan(job.model, job.inputs, job.workdir, job.opts, job.scan_id, job.devices, job.accelerator,
                            job.resume)  # fmt: skip
    if job.n_shards > 1:
        threads = max(1, (os.cpu_count() or 1) // job.n_shards)
        args = [(job.model, job.inputs, job.workdir, job.opts, k, job.n_shards, job.scan_id, job.resume, threads)
                for k in range(job.n_shards)]  # fmt: skip
        with ProcessPoolExecutor(job.n_shards, mp_context=get_context("spawn")) as ex:  # spawn: no forked OpenMP
            return list(ex.map(_worker, args))
    lm = job.lm
    if job.accelerator in ("gpu", "cuda") or (job.accelerator == "auto" and torch.cuda.is_available()):
        lm = lm.to("cuda")
    from strandline.progress import progress

    with progress("scan", job.total, "bases", enabled=job.progress) as bar:
        shard = ScanJob(lm, job.inputs, job.workdir, job.opts, 0, 1, job.scan_id, bar.update, job.file_records)
        return [(shard.run(resume=job.resume), shard.part_paths)]


def _worker(args) -> tuple[list[dict], list[Path]]:
    model, inputs, workdir, opts, shard, n_shards, sid, resume, threads = args
    torch.set_num_threads(threads)
    job = ScanJob(load_for_scan(model, opts.state_dtype), inputs, workdir, opts, shard, n_shards, sid)
    return job.run(resume=resume), part_paths(workdir, opts, shard)


def _summary(rec: dict) -> RecordSummary:
    return RecordSummary(rec["name"], rec["length"], rec["n_count"], rec["scored"], rec["sum_bits"],
                         rec["sum_entropy"], rec.get("u_as_t", 0), rec.get("first_scored"))  # fmt: skip


def write_summary(path: str, records: list[RecordSummary]) -> None:
    """The per-record TSV: name length n_count scored mean_logprob mean_entropy u_read_as_t; the means are those of
    the ``logprob`` and ``entropy`` tracks over the record's scored bases, with the tracks' signs and unit (bits)."""
    from strandline.files import atomic_write_text

    rows = ["name\tlength\tn_count\tscored\tmean_logprob\tmean_entropy\tu_read_as_t\n"]
    for r in records:
        bits = f"{-r.mean_bits:.6f}" if r.scored else "NA"
        ent = f"{r.mean_entropy:.6f}" if r.scored else "NA"
        rows.append(f"{r.name}\t{r.length}\t{r.n_count}\t{r.scored}\t{bits}\t{ent}\t{r.u_as_t}\n")
    atomic_write_text(path, "".join(rows))
