"""``strandline scan`` and ``strandline plot``: per-base tracks of whole genomes in constant memory.

``scan`` is the entry point: it checks the options, splits the records over worker processes (a record
stays whole on one worker), runs ``tasks.scan.ScanJob`` in each, and merges the part files in input
order into the final outputs, which appear only when complete (temp file, then rename). Work in progress
lives in ``.<OUT>.scan/`` next to the output: part files and state checkpoints, so ``--resume`` can pick
up a killed scan. Bad input (unreadable FASTA, invalid bases, bad options) removes that folder and is
reported as one line (the CLI exits 2); other failures keep it for ``--resume``.
"""

from __future__ import annotations

import os
import shutil
import sys
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import numpy as np

from app.errors import USER_ERRORS, UserError
from data.tracks import FORMATS, INTERVAL_DTYPE, atomic_output, require_pybigwig, write_bigwig

TRACK_NAMES = ("logprob", "entropy", "A", "C", "G", "T")


def track_paths(output: str, tracks: list[str]) -> list[Path]:
    """One output per track: ``output`` itself for one track, else ``stem.TRACK.ext`` (e.g. out.entropy.bedGraph)."""
    out = Path(output)
    if len(tracks) == 1:
        return [out]
    return [out.with_name(f"{out.stem}.{t}{out.suffix}") for t in tracks]


def scan(
    model: str,
    inputs: list[str],
    output: str,
    track: list[str] | None = None,
    format: str = "bedgraph",
    window: int = 1,
    mode: str = "chunk",
    strand_average: bool = False,
    summary: str | None = None,
    resume: bool = False,
    checkpoint_every: float = 60.0,
    workers: int = 1,
    chunk: int = 8192,
    state_dtype: str = "float64",
    plot: str | None = None,
    region: str | None = None,
    devices: int = 0,
    accelerator: str = "cpu",
    threads: int | None = None,
) -> list[dict]:
    """Score every base of FASTA records with a DNA model and write tracks (bedGraph, WIG or bigWig).

    Args:
        model: model directory or Lightning checkpoint (DNA tokenizer).
        inputs: FASTA files (plain, gzip/BGZF, xz, bz2) or '-' for stdin; records are scanned in order.
        output: output path (-o); with several tracks, one file per track named ``stem.TRACK.ext``.
        track: tracks to write: logprob (log2 P of the observed base, bits), entropy, A, C, G, T.
        format: bedgraph (0-based half-open), wig (fixedStep, 1-based) or bigwig (needs pyBigWig).
        window: mean over windows of this many bases (1 = per base); windows with no scored base are gaps.
        mode: 'chunk' (chunked parallel, carrying the state) or 'step' (one base at a time; same numbers, slow).
        strand_average: average with a reverse-complement pass re-aligned to forward coordinates.
        summary: write a per-record TSV (name, length, N count, scored bases, mean bits/base, mean entropy).
        resume: continue a killed scan of the same inputs and options from its last checkpoint.
        checkpoint_every: seconds between state checkpoints (0 = after every chunk).
        workers: worker processes; records are dealt round-robin, outputs merged in input order.
        chunk: bases fed to the model per call (the state is carried across calls); 8192 suits CPUs, use 65536 on a GPU.
        state_dtype: accumulation dtype of the carried state; float64 keeps chromosome-length records exact.
        plot: also draw the first track to this PNG (over ``region``, default the first 10 kb).
        region: region for ``plot``: CHROM:START-END (0-based half-open) or CHROM.
        devices: > 0 runs Lightning predict on this many devices (DDP, one rank per device, whole records).
        accelerator: Lightning accelerator for ``devices`` (cpu, gpu, auto).
        threads: torch CPU threads per process (default: torch's; 1 is faster on a busy shared machine).

    Returns:
        The per-record summaries (dicts) in input order.
    """
    if threads:
        import torch

        torch.set_num_threads(threads)
    tracks = list(track or ["logprob"])
    _check_options(inputs, tracks, format, window, mode, workers, chunk, state_dtype, devices)
    outs = track_paths(output, tracks)
    workdir = Path(output).with_name(f".{Path(output).name}.scan")
    if workdir.exists() and not resume:
        shutil.rmtree(workdir)
    if "-" in inputs:
        workers = 1  # stdin can be read only once, by one process
    from tasks.scan import ScanCheckpointError, ScanOptions

    opts = ScanOptions(tracks, format, window, mode, strand_average, chunk, checkpoint_every)
    try:
        if devices > 0:
            from tasks.scan import predict_scan

            shards = predict_scan(model, inputs, workdir, opts, state_dtype, devices, accelerator, resume)
            if shards is None:  # a non-zero rank: rank 0 merges
                return []
        else:
            shards = _run_jobs(model, inputs, workdir, opts, state_dtype, workers, resume)
    except USER_ERRORS:
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    except ScanCheckpointError as e:  # --resume with other inputs or options: keep the folder, say why
        raise UserError(f"{e}; rerun without --resume to start over") from None
    records = _merge(shards, outs, format)
    if summary:
        _write_summary(summary, records)
    shutil.rmtree(workdir, ignore_errors=True)
    if plot:
        first = next((r for r in records if r["length"]), None)
        if first is not None:
            draw_track(str(outs[0]), region or f"{first['name']}:0-{min(first['length'], 10_000)}", plot)
    return records


def cli_args(argv: list[str]) -> list[str]:
    """``MODEL IN... -o OUT [--opt V]`` -> jsonargparse's ``MODEL '["IN", ...]' OUT [--opt V]``.

    jsonargparse takes a list positional only as one JSON value; users type several paths. Bare boolean
    flags (``--resume``) get ``true``.
    """
    import inspect
    import json

    bools = {f"--{n}" for n, p in inspect.signature(scan).parameters.items() if p.annotation == "bool"}
    pos, opts, output, i = [], [], None, 0
    while i < len(argv):
        a = argv[i]
        if a.startswith("--"):  # --strand-average is --strand_average (the CLI converts the rest)
            name, eq, value = a.partition("=")
            a = name.replace("-", "_").replace("__", "--", 1) + eq + value
        if a in ("-h", "--help", "--print_config") or a.startswith("--print_config="):
            return argv  # let jsonargparse show the help as usual
        if a in ("-o", "--output"):
            if i + 1 >= len(argv):
                raise UserError(f"{a} needs a path")
            output, i = argv[i + 1], i + 2
        elif a.startswith("--output="):
            output, i = a.split("=", 1)[1], i + 1
        elif a.startswith("--") and "=" not in a:
            if a in bools and (i + 1 >= len(argv) or argv[i + 1].lower() not in ("true", "false")):
                opts += [a, "true"]
                i += 1
            elif a == "--track" and i + 1 < len(argv) and not argv[i + 1].startswith("["):
                opts += [a, json.dumps(argv[i + 1].split(","))]  # --track logprob,entropy
                i += 2
            else:
                opts += argv[i : i + 2]
                i += 2
        elif a.startswith("--"):
            opts.append(a)
            i += 1
        else:
            pos.append(a)
            i += 1
    if len(pos) < 2:
        raise UserError("usage: strandline scan MODEL FASTA... -o OUT [options] (see --help)")
    if output is None:
        raise UserError("missing -o OUT (the output track file)")
    return [pos[0], json.dumps(pos[1:]), output, *opts]


def _check_options(inputs, tracks, fmt, window, mode, workers, chunk, state_dtype, devices) -> None:
    if not inputs:
        raise UserError("no input FASTA given")
    bad = [t for t in tracks if t not in TRACK_NAMES]
    if bad:
        raise UserError(f"unknown track {bad[0]!r}; expected some of {', '.join(TRACK_NAMES)}")
    if len(set(tracks)) != len(tracks):
        raise UserError("a track is listed twice")
    if fmt not in FORMATS:
        raise UserError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    if fmt == "bigwig":
        try:
            require_pybigwig()
        except ImportError as e:
            raise UserError(str(e)) from None
    if window < 1 or chunk < 1 or workers < 1 or devices < 0:
        raise UserError("--window, --chunk and --workers must be >= 1 (and --devices >= 0)")
    if mode not in ("chunk", "step"):
        raise UserError(f"--mode must be 'chunk' or 'step', got {mode!r}")
    if state_dtype not in ("float32", "float64"):
        raise UserError(f"--state_dtype must be float32 or float64, got {state_dtype!r}")
    if inputs.count("-") > 1:
        raise UserError("stdin ('-') can be given only once")
    for p in inputs:
        if p != "-" and not os.path.isfile(p):
            raise UserError(f"{p}: no such file")


def _run_jobs(model, inputs, workdir, opts, state_dtype, workers, resume) -> list[tuple[list[dict], list[Path]]]:
    """Run the shards (in-process for one worker) and return (index, part paths) per shard."""
    if workers == 1:
        return [_job(model, inputs, workdir, opts, state_dtype, 0, 1, resume, progress=True)]
    threads = max(1, (os.cpu_count() or 1) // workers)
    args = [(model, inputs, workdir, opts, state_dtype, k, workers, resume, False, threads) for k in range(workers)]
    with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as ex:  # spawn: no forked OpenMP pools
        return list(ex.map(_job_star, args))


def _job_star(args):
    return _job(*args)


def _job(model, inputs, workdir, opts, state_dtype, shard, n_shards, resume, progress, threads=None):
    import torch
    from tqdm import tqdm

    from models import ModelLoadError
    from tasks.scan import ScanJob, load_for_scan

    if threads:
        torch.set_num_threads(threads)
    lm = load_for_scan(model, state_dtype)
    if (lm.meta.get("tokenizer") or "dna") != "dna":
        raise ModelLoadError(f"{model}: a {lm.meta.get('tokenizer')!r} model cannot scan DNA (needs tokenizer 'dna')")
    job = ScanJob(lm, inputs, workdir, opts, shard, n_shards)
    with tqdm(total=_total_bases(inputs), unit="b", unit_scale=True, disable=None if progress else True) as bar:
        job.progress = bar
        index = job.run(resume=resume)
    return index, job.part_paths


def _total_bases(inputs: list[str]) -> int | None:
    """Bases to scan for the ETA: exact from .fai indexes, else the size of plain files (an upper bound)."""
    total = 0
    for p in inputs:
        fai = Path(f"{p}.fai")
        if fai.is_file():
            total += sum(int(line.split("\t")[1]) for line in fai.read_text().splitlines() if line)
        elif p != "-" and not p.endswith((".gz", ".xz", ".bz2", ".bgz")):
            total += os.path.getsize(p)
        else:
            return None
    return total


def _merge(shards: list[tuple[list[dict], list[Path]]], outs: list[Path], fmt: str) -> list[dict]:
    """Concatenate the shards' records in input order into each output; returns the records in order."""
    spans = []  # (record, shard, byte offset of the record in each of the shard's parts)
    for k, (index, _) in enumerate(shards):
        offs = np.zeros(len(outs), np.int64)
        for rec in index:
            spans.append((rec, k, offs.copy()))
            offs += rec["bytes"]
    spans.sort(key=lambda s: s[0]["ordinal"])
    for t, out in enumerate(outs):
        if fmt == "bigwig":
            items = [(r["name"], r["length"], shards[k][1][t], int(o[t]), r["bytes"][t]) for r, k, o in spans]
            write_bigwig(out, items)
        elif len(shards) == 1:
            out.parent.mkdir(parents=True, exist_ok=True)
            os.replace(shards[0][1][t], out)  # already complete and in order
        else:
            with atomic_output(out) as tmp, open(tmp, "wb") as dst:
                for r, k, o in spans:
                    with open(shards[k][1][t], "rb") as src:
                        src.seek(int(o[t]))
                        _copy(src, dst, r["bytes"][t])
    return [s[0] for s in spans]


def _copy(src, dst, n: int, block: int = 1 << 22) -> None:
    while n > 0:
        buf = src.read(min(block, n))
        dst.write(buf)
        n -= len(buf)


def _write_summary(path: str, records: list[dict]) -> None:
    with atomic_output(path) as tmp, open(tmp, "w") as f:
        f.write("name\tlength\tn_count\tscored\tmean_bits_per_base\tmean_entropy_bits\n")
        for r in records:
            k = r["scored"]
            bits = f"{r['sum_bits'] / k:.6f}" if k else "NA"
            ent = f"{r['sum_entropy'] / k:.6f}" if k else "NA"
            f.write(f"{r['name']}\t{r['length']}\t{r['n_count']}\t{k}\t{bits}\t{ent}\n")


def parse_region(region: str) -> tuple[str, int | None, int | None]:
    """CHROM:START-END (0-based half-open, commas allowed) or CHROM -> (chrom, start, end)."""
    chrom, _, span = region.rpartition(":") if ":" in region else (region, "", "")
    if not span:
        return chrom, None, None
    try:
        a, b = (int(x.replace(",", "")) for x in span.split("-"))
    except ValueError:
        raise UserError(f"bad region {region!r}; expected CHROM:START-END") from None
    if a < 0 or b <= a:
        raise UserError(f"bad region {region!r}: need 0 <= START < END")
    return chrom, a, b


def read_region(track: str, region: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Intervals (starts, ends, values), 0-based half-open, of a bedGraph/WIG/bigWig file over a region."""
    chrom, a, b = parse_region(region)
    path = Path(track)
    if not path.is_file():
        raise UserError(f"{track}: no such track file")
    lo, hi = a or 0, b if b is not None else np.iinfo(np.int64).max
    if path.suffix.lower() in (".bw", ".bigwig"):
        bw = require_pybigwig().open(str(path))
        n = bw.chroms().get(chrom)
        if n is None:
            raise UserError(f"{track}: no record {chrom!r}")
        iv = bw.intervals(chrom, lo, min(hi, n)) or []
        bw.close()
        arr = np.array(list(iv), dtype=INTERVAL_DTYPE)
        return arr["start"], arr["end"], arr["value"]
    rows = list(_iter_text_track(path, chrom, lo, hi))
    s, e, v = (np.array(x) for x in zip(*rows, strict=True)) if rows else (np.zeros(0),) * 3
    return s, e, v


def _iter_text_track(path: Path, chrom: str, lo: int, hi: int):
    """(start, end, value) of bedGraph or WIG fixedStep lines on ``chrom`` overlapping [lo, hi)."""
    cur, pos, step, span = None, 0, 1, 1
    with open(path) as f:
        for line in f:
            if line.startswith("fixedStep"):
                kv = dict(x.split("=") for x in line.split()[1:])
                cur, pos = kv["chrom"], int(kv["start"]) - 1  # WIG is 1-based
                step, span = int(kv.get("step", 1)), int(kv.get("span", 1))
                continue
            if line.startswith(("track", "browser", "#")):
                continue
            parts = line.split()
            if len(parts) == 4:  # bedGraph
                c, s, e, v = parts[0], int(parts[1]), int(parts[2]), float(parts[3])
            else:
                c, s, e, v = cur, pos, pos + span, float(parts[0])
                pos += step
            if c == chrom and e > lo and s < hi:
                yield s, e, v


def plot(track: str, region: str, output: str, title: str | None = None) -> None:
    """Draw a track (bedGraph, WIG or bigWig) over a region to a PNG.

    Args:
        track: the track file.
        region: CHROM:START-END (0-based half-open) or CHROM.
        output: PNG path.
        title: plot title (default: the file and region).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s, e, v = read_region(track, region)
    if len(s) == 0:
        raise UserError(f"{track}: no values in {region}")
    fig, ax = plt.subplots(figsize=(12, 3))
    x = np.stack([s, e], 1).ravel().astype(float)  # a step per interval; gaps (N) stay blank
    y = np.repeat(v, 2).astype(float)
    brk = np.flatnonzero(s[1:] != e[:-1]) + 1  # NaN between non-touching intervals
    x, y = np.insert(x, 2 * brk, np.nan), np.insert(y, 2 * brk, np.nan)
    ax.plot(x, y, lw=0.6)
    ax.set_xlabel(f"{region.partition(':')[0]} position (0-based)")
    ax.set_ylabel(Path(track).name)
    ax.set_title(title or f"{Path(track).name}  {region}")
    fig.tight_layout()
    with atomic_output(output) as tmp:
        fig.savefig(tmp, format="png", dpi=120)
    plt.close(fig)
    print(f"wrote {output}", file=sys.stderr)


draw_track = plot  # ``scan``'s own ``plot`` argument shadows the function's name inside it
