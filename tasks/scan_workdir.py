"""A scan's work folder ``.<OUT>.scan/``: its signature, resume checks, merging its parts, removing it.

The folder holds the part files and state checkpoints of every shard plus ``scan.json``, the scan's
signature: a hash of the model's weights and config, every option that changes the output, and each
input's resolved path, size and modification time. ``--resume`` continues only a folder whose signature
equals the new one and otherwise says what differs; ``--checkpoint_every`` and how a path is spelled
(relative, absolute, through a link) are not in it. The folder is removed only when it holds nothing but
the files a scan writes, so a user's folder that happens to have the name is never deleted.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

from data.tracks import write_bigwig
from models import LinearTransformerLM
from models.files import atomic_output, atomic_write_text

from .scan_job import ScanCheckpointError, ScanError, ScanOptions

OURS = ("part", "state", "index", "rec", "scan.json")  # prefixes of the files a scan writes
OPTION_FLAGS = {"tracks": "--track", "fmt": "--format"}


def _is_ours(name: str) -> bool:
    """A file a scan writes, or the temporary of one (``models.files.atomic_output``: ``.NAME.XXXX.tmp``),
    which a kill during a checkpoint leaves behind."""
    temporary = name.startswith(".") and name.endswith(".tmp") and name[1:].startswith(OURS)
    return name.startswith(OURS) or temporary


def model_digest(model: LinearTransformerLM) -> str:
    """SHA-256 of the model's config and every weight's bytes (names in order): two models differ iff it does."""
    h = hashlib.sha256()
    cfg = {k: v for k, v in asdict(model.config).items() if k != "state_dtype"}  # state_dtype is a scan option
    h.update(json.dumps(cfg, sort_keys=True, default=str).encode())
    for name, t in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def input_stamp(path: str) -> dict:
    """How an input is recognised again: resolved path, size and mtime (stdin: only its name)."""
    if path == "-":
        return {"path": "-"}
    st = os.stat(path)
    return {"path": os.path.realpath(path), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def signature(model_hash: str, inputs: list[str], opts: ScanOptions, n_shards: int) -> dict:
    options = {k: v for k, v in asdict(opts).items() if k != "checkpoint_every"}
    return {"version": 2, "model": model_hash, "inputs": [input_stamp(p) for p in inputs], "options": options,
            "shards": n_shards}  # fmt: skip


def scan_id(sig: dict) -> str:
    return hashlib.sha256(json.dumps(sig, sort_keys=True).encode()).hexdigest()[:20]


def differences(old: dict, new: dict) -> list[str]:
    """What makes a saved signature differ from the new one, in words."""
    out = []
    if old.get("version") != new["version"]:
        return ["it was written by another version of strandline"]
    if old["model"] != new["model"]:
        out.append("the model (its weights or config)")
    oi, ni = old["inputs"], new["inputs"]
    if [i["path"] for i in oi] != [i["path"] for i in ni]:
        out.append(f"the inputs ({', '.join(i['path'] for i in oi)} then)")
    else:
        out += [f"{n['path']} changed since (size or modification time)" for o, n in zip(oi, ni, strict=True) if o != n]
    for k, v in new["options"].items():
        if old["options"].get(k) != v:
            out.append(f"{OPTION_FLAGS.get(k, '--' + k)} ({old['options'].get(k)} then, {v} now)")
    if old["shards"] != new["shards"]:
        out.append(f"the number of workers/devices ({old['shards']} then, {new['shards']} now)")
    return out


def prepare(workdir: Path, sig: dict, resume: bool) -> bool:
    """Make the work folder for a scan with signature ``sig``; returns True when resuming a previous run.

    Raises:
        ScanCheckpointError: ``resume`` and the folder is another scan's (the message says what differs).
        ScanError: the folder exists and holds files that are not a scan's.
    """
    marker = workdir / "scan.json"
    if resume and marker.is_file():
        old = json.loads(marker.read_text())
        diff = differences(old, sig)
        if diff:
            raise ScanCheckpointError(f"{workdir}: cannot resume: {'; '.join(diff)} differ(s) from the killed scan")
        return True
    if resume and workdir.exists():
        raise ScanCheckpointError(f"{workdir}: not a resumable scan folder (no scan.json)")
    remove(workdir)
    workdir.mkdir(parents=True)
    atomic_write_text(workdir / "scan.json", json.dumps(sig, sort_keys=True))
    return False


def remove(workdir: Path) -> None:
    """Delete a work folder, but only if every entry in it is a file a scan writes."""
    if not workdir.exists():
        return
    if not workdir.is_dir():
        raise ScanError(f"{workdir}: exists and is not a scan work folder; move it away")
    foreign = [p.name for p in workdir.iterdir() if not p.is_file() or not _is_ours(p.name)]
    if foreign:
        raise ScanError(f"{workdir}: holds files a scan did not write ({foreign[0]}, ...); move it away")
    shutil.rmtree(workdir)


def merge(shards: list[tuple[list[dict], list[Path]]], outs: list[Path | None], fmt: str) -> list[dict]:
    """Concatenate the shards' records in input order into each output (None: stdout); records in order.

    A regular file appears only when complete (``atomic_output``); a device or pipe is written in place.
    """
    spans = []  # (record, shard, byte offset of the record in each of the shard's parts)
    for k, (index, _) in enumerate(shards):
        offs = np.zeros(len(outs), np.int64)
        for rec in index:
            spans.append((rec, k, offs.copy()))
            offs += rec["bytes"]
    spans.sort(key=lambda s: s[0]["ordinal"])
    for t, out in enumerate(outs):
        if fmt == "bigwig":
            write_bigwig(
                out, [(r["name"], r["length"], shards[k][1][t], int(o[t]), r["bytes"][t]) for r, k, o in spans]
            )
        elif out is None:
            _concat(spans, shards, t, sys.stdout.buffer)
            sys.stdout.buffer.flush()
        elif out.exists() and not out.is_file():  # a device or pipe (/dev/null, a FIFO): written in place
            with open(out, "wb") as dst:
                _concat(spans, shards, t, dst)
        elif len(shards) == 1:
            with atomic_output(out) as tmp:  # the part is complete and in order: a rename, no copy
                os.replace(shards[0][1][t], tmp)
        else:
            with atomic_output(out) as tmp, open(tmp, "wb") as dst:
                _concat(spans, shards, t, dst)
    return [s[0] for s in spans]


def _concat(spans, shards, t: int, dst, block: int = 1 << 22) -> None:
    for r, k, o in spans:
        with open(shards[k][1][t], "rb") as src:
            src.seek(int(o[t]))
            n = r["bytes"][t]
            while n > 0:
                buf = src.read(min(block, n))
                if not buf:
                    raise ScanCheckpointError(f"{shards[k][1][t]}: part file ends early (damaged work folder)")
                dst.write(buf)
                n -= len(buf)
