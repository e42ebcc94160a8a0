"""A scan's work folder ``.<OUT>.scan/``: its lock, its signature, resume checks, merging its parts, removing it.

The folder holds the part files and state checkpoints of every shard, ``scan.json`` (the scan's signature:
a hash of the model's weights and config, every option that changes the output, each input's resolved path,
size and modification time, plus the run id of the scan that made the folder) and ``lock``, an OS lock
(``fcntl.flock``) held by the running scan for its whole run: a second scan of the same output is refused,
naming the first's pid, host and command, and touches nothing. ``--resume`` continues only a folder whose
signature equals the new one and otherwise says what differs; ``--checkpoint_every`` and how a path is
spelled (relative, absolute, through a link) are not in it. Only what a scan made is ever deleted: a
folder without a lock file and a readable ``scan.json`` is someone else's, and a folder is emptied file by
file, by the names its own signature says a scan writes, then removed with ``rmdir`` (which keeps
anything unknown).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import socket
import stat
import sys
import tempfile
import time
import uuid
from contextlib import suppress
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

from strandline.data.tracks import TRACK_FORMATS, PartFileError, PartSpan, TrackFormat
from strandline.files import atomic_write_text, reads_once
from strandline.models import LinearTransformerLM
from strandline.models.config import OLD_KEYS
from strandline.models.lm import WEIGHT_RENAMES
from strandline.tasks.scan.job import TRACKS, ScanCheckpointError, ScanError, ScanOptions, part_paths

VERSION = 3
MARKER, LOCK = "scan.json", "lock"
MAX_SHARDS = 4096  # a signature claiming more is not one of ours (it bounds the names a folder may hold)
OPTION_FLAGS = {"tracks": "--track", "fmt": "--format"}
TEMPORARY = re.compile(r"^\.(?P<name>[^/]+)\.[^./]+\.tmp$")  # strandline.files.atomic_output's .NAME.XXXX.tmp


def model_digest(model: LinearTransformerLM) -> str:
    """SHA-256 of the model's config and every weight's bytes (names in order): two models differ iff it does.

    Config keys and weights are hashed under the names they had when work folders of ``VERSION`` 3 were first
    written (the k-mer memory's ``recall_*`` keys and ``recall.*`` weights), so the rename to ``kmer_*`` and
    ``memory.*`` left those folders resumable.
    """
    h = hashlib.sha256()
    old_key = {new: old for old, new in OLD_KEYS.items()}
    cfg = {old_key.get(k, k): v for k, v in asdict(model.config).items() if k != "state_dtype"}  # a scan option
    h.update(json.dumps(cfg, sort_keys=True, default=str).encode())
    for name, t in sorted((_old_weight_name(k), t) for k, t in model.state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _old_weight_name(name: str) -> str:
    for old, new in WEIGHT_RENAMES.items():
        if name.startswith(new):
            return old + name[len(new) :]
    return name


def input_stamp(path: str) -> dict:
    """How an input is recognised again: resolved path, size and mtime (stdin or a pipe: only its name; what it
    gave is checked on resume by the bases read up to the checkpoint)."""
    if reads_once(path):
        return {"path": path}
    st = os.stat(path)
    return {"path": os.path.realpath(path), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def signature(model_hash: str, inputs: list[str], opts: ScanOptions, n_shards: int) -> dict:
    options = {k: v for k, v in asdict(opts).items() if k != "checkpoint_every"}
    for k in ("regions", "warmup"):  # whole-record scans: the signature (and scan id) of versions without regions
        if options[k] is None:
            del options[k]
    return {"version": VERSION, "model": model_hash, "inputs": [input_stamp(p) for p in inputs],
            "options": options, "shards": n_shards}  # fmt: skip


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


def marker_problem(data) -> str | None:
    """Why ``data`` (a parsed ``scan.json``) is not the signature of a scan of this version, or None."""
    if not isinstance(data, dict):
        return f"a JSON {type(data).__name__}, not a scan signature"
    if data.get("version") != VERSION:
        return "written by another version of strandline"
    opts, inputs, shards = data.get("options"), data.get("inputs"), data.get("shards")
    ok = (
        isinstance(data.get("model"), str) and isinstance(data.get("run"), str)
        and isinstance(inputs, list) and all(isinstance(i, dict) and isinstance(i.get("path"), str) for i in inputs)
        and isinstance(opts, dict) and opts.get("fmt") in TRACK_FORMATS
        and isinstance(opts.get("tracks"), list) and all(t in TRACKS for t in opts["tracks"])
        and type(shards) is int and 1 <= shards <= MAX_SHARDS
    )  # fmt: skip
    return None if ok else "fields missing or of the wrong type"


def known_names(sig: dict) -> set[str]:
    """Every file name a scan with signature ``sig`` writes in its work folder."""
    opts = ScanOptions(tracks=sig["options"]["tracks"], fmt=sig["options"]["fmt"])
    names = {MARKER, LOCK}
    for k in range(sig["shards"]):
        names |= {p.name for p in part_paths(Path("."), opts, k)}
        names |= {f"state{k}.safetensors", f"index{k}.json", f"rec{k}.ids", f"rec{k}.rc"}
    return names


def _is_known(name: str, known: set[str]) -> bool:
    """A file a scan writes, or the temporary of one that a kill during a write leaves behind."""
    m = TEMPORARY.match(name)
    return name in known or (m is not None and m["name"] in known)


def _owner() -> bytes:
    cmd = " ".join(["strandline", *sys.argv[1:]] if sys.argv and sys.argv[0].endswith(("cli.py", "strandline"))
                   else sys.argv)  # fmt: skip
    return json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "command": cmd[:300]}).encode()


class WorkFolder:
    """The work folder of one scan, locked by this process from ``open`` until ``remove`` or ``close``.

    Raises (``open``):
        ScanError: the folder is in use by another scan (its pid, host and command), or was not made by a
            scan (no lock file, not a folder), or holds files a scan does not write.
        ScanCheckpointError: ``scan.json`` is missing, unreadable or damaged, or ``resume`` and it is
            another scan's (the message says what differs). Nothing is deleted in any of these cases.
    """

    def __init__(self, path: Path):
        self.path = Path(path)
        self.fd: int | None = None

    def open(self, sig: dict, resume: bool) -> bool:
        """Lock the folder (making it if there is none) for a scan with signature ``sig``; True when resuming."""
        for attempt in range(50):  # another scan may be making or removing the folder right now
            if not os.path.lexists(self.path):
                try:
                    self._create(sig)
                    return False
                except FileExistsError:
                    continue
            if self._lock_existing(last=attempt == 49):
                break
            time.sleep(0.02)
        old = self._read_marker()
        if resume:
            diff = differences(old, sig)
            if diff:
                raise ScanCheckpointError(
                    f"{self.path}: cannot resume: {'; '.join(diff)} differ(s) from the killed scan"
                )
            self._refuse_foreign(known_names(old))  # a part replaced by a link would be truncated through it
            self._write_owner()
            return True
        self._empty(known_names(old), keep={LOCK})
        self._write_owner()
        atomic_write_text(self.path / MARKER, json.dumps({**sig, "run": uuid.uuid4().hex}, sort_keys=True))
        return False

    def _create(self, sig: dict) -> None:
        """mkdir, then the lock file appears already locked (a locked temporary linked into place), then the marker."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        os.mkdir(self.path)
        fd, tmp = tempfile.mkstemp(prefix=f".{LOCK}.", suffix=".tmp", dir=self.path)
        try:
            _flock(fd, self.path)
            os.write(fd, _owner())
            os.link(tmp, self.path / LOCK)
            os.unlink(tmp)
            self.fd = fd
            atomic_write_text(self.path / MARKER, json.dumps({**sig, "run": uuid.uuid4().hex}, sort_keys=True))
        except BaseException:
            for name in (MARKER, LOCK, os.path.basename(tmp)):
                with suppress(FileNotFoundError):
                    os.unlink(self.path / name)
            os.close(fd)
            self.fd = None
            os.rmdir(self.path)
            raise

    def _lock_existing(self, last: bool) -> bool:
        """Lock an existing folder's lock file; False to look again (it is being made or was just removed)."""
        st = os.lstat(self.path)
        if not stat.S_ISDIR(st.st_mode):
            raise ScanError(f"{self.path}: exists and is not a scan work folder; move it away")
        try:
            fd = os.open(self.path / LOCK, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            if not last:
                return False  # a scan that is making the folder links its lock file in a moment
            raise ScanError(
                f"{self.path}: holds files a scan did not write (it has no lock file: not made by this strandline); "
                "move it away"
            ) from None
        except OSError as e:
            raise ScanError(
                f"{self.path / LOCK}: not a scan's lock file ({e.strerror}); move the folder away"
            ) from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise ScanError(f"{self.path / LOCK}: not a scan's lock file; move the folder away")
        try:
            _flock(fd, self.path)
        except ScanError:
            os.close(fd)
            raise
        except BlockingIOError:
            who = _describe_owner(os.pread(fd, 4096, 0))
            os.close(fd)
            raise ScanError(
                f"{self.path}: in use by another scan ({who}); wait for it to finish or give another -o"
            ) from None
        try:
            same = os.stat(self.path / LOCK, follow_symlinks=False).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if not same:  # the scan that held it removed the folder meanwhile
            os.close(fd)
            return False
        self.fd = fd
        return True

    def _read_marker(self) -> dict:
        path = self.path / MARKER
        try:
            data = json.loads(path.read_bytes())
        except FileNotFoundError:
            raise ScanCheckpointError(
                f"{path}: missing (not a scan's work folder, or damaged); move the folder away"
            ) from None
        except (OSError, ValueError) as e:  # ValueError: JSONDecodeError and UnicodeDecodeError of binary bytes
            what = "not UTF-8 text" if isinstance(e, UnicodeDecodeError) else f"not JSON ({type(e).__name__})"
            raise ScanCheckpointError(f"{path}: damaged ({what}); move the folder away or remove it") from None
        problem = marker_problem(data)
        if problem:
            raise ScanCheckpointError(
                f"{path}: not this scan's signature ({problem}); move the folder away or remove it"
            )
        return data

    def _write_owner(self) -> None:
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, _owner(), 0)

    def _empty(self, known: set[str], keep: set[str] = frozenset()) -> None:
        """Delete the known files (refusing, before deleting any, if there is anything else) but ``keep``."""
        entries = self._refuse_foreign(known)
        for e in sorted(entries, key=lambda e: e.name == MARKER):  # the marker last: a kill midway leaves it ours
            if e.name not in keep:
                with suppress(FileNotFoundError):
                    os.unlink(e.path)

    def _refuse_foreign(self, known: set[str]) -> list[os.DirEntry]:
        """The folder's entries; ScanError if one is not a regular file of a known name (a link, a folder)."""
        entries = list(os.scandir(self.path))
        foreign = [e.name for e in entries if not e.is_file(follow_symlinks=False) or not _is_known(e.name, known)]
        if foreign:
            raise ScanError(f"{self.path}: holds files a scan did not write ({foreign[0]}, ...); move it away")
        return entries

    def remove(self) -> None:
        """Delete the folder (its known files, then ``rmdir``) and release the lock; a no-op if not held.

        Anything that is not a scan's file is kept, with the folder around it."""
        if self.fd is None:
            return
        try:
            sig = self._read_marker()
            self._empty(known_names(sig), keep={LOCK})
            os.unlink(self.path / LOCK)
            os.rmdir(self.path)
        except (ScanError, OSError):
            pass  # something of the user's turned up: the folder stays
        finally:
            self.close()

    def close(self) -> None:
        """Release the lock, keeping the folder (to resume)."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _flock(fd: int, folder: Path) -> None:
    """Take the exclusive lock without waiting: BlockingIOError if another scan holds it."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise
    except OSError as e:  # ENOLCK, EOPNOTSUPP: a file system without locks
        raise ScanError(f"{folder}: cannot lock the work folder ({e.strerror}); give -o on a local disk") from None


def is_work_folder(path: Path) -> bool:
    """True for a folder that a scan made (its lock file and signature are there)."""
    return path.name.endswith(".scan") and (path / LOCK).is_file() and (path / MARKER).is_file()


def _describe_owner(raw: bytes) -> str:
    try:
        o = json.loads(raw)
        return f"pid {o['pid']} on {o['host']}: {o['command']}"
    except (ValueError, KeyError, TypeError):
        return "its pid is not recorded yet"


def merge(
    shards: list[tuple[list[dict], list[Path]]], outs: list[Path | None], fmt: TrackFormat,
    headers: list[bytes] | None = None,
) -> list[dict]:  # fmt: skip
    """Assemble the shards' records in input order into each output (None: stdout); returns the records in order.

    Each output is ``fmt.finish``ed from its parts' record spans: a regular file appears only when complete,
    a device or pipe is written in place (streaming formats).
    """
    spans = []  # (record, shard, byte offset of the record in each of the shard's parts)
    for k, (index, _) in enumerate(shards):
        offs = np.zeros(len(outs), np.int64)
        for rec in index:
            spans.append((rec, k, offs.copy()))
            offs += rec["bytes"]
    spans.sort(key=lambda s: s[0]["ordinal"])
    for t, out in enumerate(outs):
        parts = [PartSpan(r["name"], r["length"], shards[k][1][t], int(o[t]), r["bytes"][t]) for r, k, o in spans]
        try:
            extra = {"header": headers[t]} if headers else {}  # a format without track lines needs no such argument
            fmt.finish(out, parts, whole=shards[0][1][t] if len(shards) == 1 else None, **extra)
        except PartFileError as e:  # kept a checkpoint error: the work folder is damaged, not the inputs
            raise ScanCheckpointError(str(e)) from None
    return [s[0] for s in spans]
