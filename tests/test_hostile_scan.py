"""Hostile cases of the genome scan's work folder, resume and output checks: two scans of one output, folders
that only look like ours, damaged work folders, a full disk, absurd thread counts and refusals that came late."""

import dataclasses
import errno
import io
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import test_scan_checks
import torch
from test_scan import Killed, _write_fasta, kill_after
from test_scan_checks import _cli_error

import strandline.tasks.scan.job
from strandline.app.cli import main
from strandline.data.tracks import BEDGRAPH, TRACK_FORMATS, BedGraphWriter
from strandline.tasks.scan import ScanArgs, ScanCheckpointError, ScanError, scan

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread is faster

model_dir, fasta = test_scan_checks.model_dir, test_scan_checks.fasta  # the tiny model, three short records


@pytest.fixture
def ref(model_dir, fasta, tmp_path) -> bytes:
    """The bedGraph of an uninterrupted scan of ``fasta`` at chunk 64."""
    out = tmp_path / "ref" / "o.bedGraph"
    scan(ScanArgs(model_dir, [fasta], str(out), chunk=64))
    return out.read_bytes()


def _work(out: Path) -> Path:
    return out.with_name(f".{out.name}.scan")


def _snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` with its bytes: what 'touching nothing' is checked against."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _killed(model_dir, fasta, out: Path, monkeypatch, calls: int = 2) -> dict[str, bytes]:
    """A scan killed after ``calls`` chunks (checkpointing after each): returns its work folder's snapshot."""
    kill_after(monkeypatch, calls)
    with pytest.raises(Killed):
        scan(ScanArgs(model_dir, [fasta], str(out), chunk=64, checkpoint_every=0))
    monkeypatch.undo()
    return _snapshot(_work(out))


def _forbid_scoring(monkeypatch) -> None:
    """Fail loudly if the model scores anything from now on (after a killed scan has made its folder)."""

    def forbidden(*a, **k):
        raise AssertionError("the scan started before the bad input was refused")

    monkeypatch.setattr(strandline.tasks.scan.job, "score_chunk", forbidden)


@pytest.fixture
def no_scoring(monkeypatch):
    _forbid_scoring(monkeypatch)


# ---- concurrency: two scans of the same output ----------------------------------------------------------
def test_a_second_scan_of_the_same_output_is_refused_and_the_first_finishes(model_dir, fasta, tmp_path, ref, capsys):
    out = tmp_path / "o.bedGraph"
    started, go, result = threading.Event(), threading.Event(), {}
    real = strandline.tasks.scan.job.score_chunk

    def held(*a, **k):  # the first scan pauses mid-record, its lock held, until the second has tried
        if threading.current_thread().name == "first":
            started.set()
            go.wait(60)
        return real(*a, **k)

    def first():
        try:
            result["records"] = scan(ScanArgs(model_dir, [fasta], str(out), chunk=64, checkpoint_every=0))
        except BaseException as e:  # reported by the assert below
            result["error"] = e

    strandline.tasks.scan.job.score_chunk = held
    t = threading.Thread(target=first, name="first")
    try:
        t.start()
        assert started.wait(60)
        before = _snapshot(_work(out))
        err = _cli_error(["scan", model_dir, fasta, "-o", str(out), "--chunk", "64"], capsys)
        assert "in use by another scan" in err and f"pid {os.getpid()}" in err
        with pytest.raises(ScanError, match="in use by another scan"):
            scan(ScanArgs(model_dir, [fasta], str(out), chunk=64, resume=True))
        assert _snapshot(_work(out)) == before  # nothing of the first's touched
    finally:
        go.set()
        t.join(60)
        strandline.tasks.scan.job.score_chunk = real
    assert "error" not in result, result.get("error")
    assert out.read_bytes() == ref and not _work(out).exists()


def test_a_lock_held_by_another_process_names_it(model_dir, fasta, tmp_path, monkeypatch):
    out = tmp_path / "o.bedGraph"
    _killed(model_dir, fasta, out, monkeypatch)
    _forbid_scoring(monkeypatch)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl,sys; f=open(sys.argv[1],'r+'); fcntl.flock(f, fcntl.LOCK_EX); "
         "f.seek(0); f.truncate(); f.write('{\"pid\": 4242, \"host\": \"h\", \"command\": \"strandline scan x\"}'); "
         "f.flush(); print('locked', flush=True); sys.stdin.read()", str(_work(out) / "lock")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline() == "locked\n"
        before = _snapshot(_work(out))
        for resume in (False, True):
            with pytest.raises(ScanError, match="in use by another scan \\(pid 4242 on h: strandline scan x\\)"):
                scan(ScanArgs(model_dir, [fasta], str(out), chunk=64, resume=resume))
        assert _snapshot(_work(out)) == before
    finally:
        holder.communicate("")


# ---- a folder named like the work folder is not ours ----------------------------------------------------
def test_a_user_folder_with_scan_like_names_is_never_deleted(model_dir, fasta, tmp_path, capsys, no_scoring):
    out = tmp_path / "o.bedGraph"
    work = _work(out)
    work.mkdir()
    for name in ("part0.logprob.bedGraph", "part_of_my_thesis.txt", "state0.safetensors", "index0.json"):
        (work / name).write_text("mine")
    before = _snapshot(work)
    for extra in ([], ["--resume"]):
        err = _cli_error(["scan", model_dir, fasta, "-o", str(out), *extra], capsys)
        assert str(work) in err
    assert _snapshot(work) == before and not out.exists()


def test_a_user_file_dropped_into_our_folder_is_kept(model_dir, fasta, tmp_path, monkeypatch):
    out = tmp_path / "o.bedGraph"
    _killed(model_dir, fasta, out, monkeypatch)
    (_work(out) / "notes.txt").write_text("mine")
    before = _snapshot(_work(out))
    _forbid_scoring(monkeypatch)
    with pytest.raises(ScanError, match="holds files a scan did not write \\(notes.txt"):
        scan(ScanArgs(model_dir, [fasta], str(out), chunk=64))
    assert _snapshot(_work(out)) == before


def test_a_symlink_or_file_named_like_the_work_folder_is_refused(model_dir, fasta, tmp_path, no_scoring):
    out = tmp_path / "o.bedGraph"
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "part0.logprob.bedGraph").write_text("mine")
    _work(out).symlink_to(mine)
    with pytest.raises(ScanError, match="not a scan work folder"):
        scan(ScanArgs(model_dir, [fasta], str(out)))
    assert (mine / "part0.logprob.bedGraph").read_text() == "mine" and _work(out).is_symlink()


# ---- resume checks the bytes of the part files -------------------------------------------------------------
def test_resume_refuses_a_part_changed_inside_its_checkpointed_prefix(model_dir, fasta, tmp_path, monkeypatch, capsys):
    out = tmp_path / "o.bedGraph"
    _killed(model_dir, fasta, out, monkeypatch, calls=3)
    part = _work(out) / "part0.logprob.bedGraph"
    data = bytearray(part.read_bytes())
    data[20:25] = b"99999" if data[20:25] != b"99999" else b"11111"  # same length, other bytes
    part.write_bytes(bytes(data))
    before = _snapshot(_work(out))
    err = _cli_error(["scan", model_dir, fasta, "-o", str(out), "--chunk", "64", "--resume"], capsys)
    assert "part0.logprob.bedGraph: part file was changed since its checkpoint" in err
    assert not out.exists() and _snapshot(_work(out)) == before


# ---- a damaged scan.json -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "content",
    [b"{bad", b"[]", b'{"version": 3}', b'{"version": 2}', b"\x89\xff\x00binary", b""],
    ids=["not-json", "a-list", "fields-missing", "old-version", "binary", "empty"],
)
def test_a_damaged_signature_is_one_line_and_nothing_is_deleted(model_dir, fasta, tmp_path, monkeypatch, capsys, content):  # fmt: skip
    out = tmp_path / "o.bedGraph"
    _killed(model_dir, fasta, out, monkeypatch)
    (_work(out) / "scan.json").write_bytes(content)
    before = _snapshot(_work(out))
    for extra in (["--resume"], []):
        err = _cli_error(["scan", model_dir, fasta, "-o", str(out), "--chunk", "64", *extra], capsys)
        assert "scan.json" in err
    assert _snapshot(_work(out)) == before and not out.exists()


def test_a_damaged_state_checkpoint_keeps_the_folder(model_dir, fasta, tmp_path, monkeypatch, capsys):
    out = tmp_path / "o.bedGraph"
    _killed(model_dir, fasta, out, monkeypatch)
    (_work(out) / "state0.safetensors").write_bytes(b"\0garbage")
    before = _snapshot(_work(out))
    err = _cli_error(["scan", model_dir, fasta, "-o", str(out), "--chunk", "64", "--resume"], capsys)
    assert "state0.safetensors: not a readable saved state" in err
    assert _snapshot(_work(out)) == before


# ---- a full disk ---------------------------------------------------------------------------------------------
class _FullAfter(io.RawIOBase):
    """A writable file that takes ``room`` bytes, then fails as a full disk does."""

    def __init__(self, fh, room: int):
        self.fh, self.room = fh, room

    def write(self, b) -> int:
        if len(b) > self.room:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.room -= len(b)
        return self.fh.write(b)

    def __getattr__(self, name):
        return getattr(self.fh, name)


def test_a_full_disk_mid_scan_is_one_line_and_resumable(model_dir, fasta, tmp_path, monkeypatch, capsys, ref):
    out = tmp_path / "o.bedGraph"
    full = dataclasses.replace(BEDGRAPH, writer=lambda fh: BedGraphWriter(_FullAfter(fh, 3000)))
    monkeypatch.setitem(TRACK_FORMATS, "bedgraph", full)  # the registry is the one place the scan asks
    err = _cli_error(["scan", model_dir, fasta, "-o", str(out), "--chunk", "64", "--checkpoint_every", "0"], capsys)
    assert "No space left on device" in err and "--resume" in err
    assert not out.exists() and (_work(out) / "scan.json").is_file()
    monkeypatch.undo()
    assert main(["scan", model_dir, fasta, "-o", str(out), "--chunk", "64", "--resume"]) == 0
    assert out.read_bytes() == ref


def test_a_full_stdout_is_one_line(model_dir, fasta, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    with open("/dev/full", "wb", buffering=0) as full:
        monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(io.BufferedWriter(full)))
        err = _cli_error(["scan", model_dir, fasta, "-o", "-", "--chunk", "64"], capsys)
    assert "-: No space left on device" in err and "incomplete" in err
    assert list((tmp_path / "tmp").iterdir()) == []


@pytest.fixture
def small_tmpfs(tmp_path):
    """A 64 KiB tmpfs (root only); yields (its path, a function that grows it)."""
    d = tmp_path / "small"
    d.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(d)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"mount not permitted here: {r.stderr.decode().strip()}")

    def grow(size: str) -> None:
        subprocess.run(["mount", "-o", f"remount,size={size}", str(d)], check=True)

    yield d, grow
    subprocess.run(["umount", str(d)], check=True)


def test_a_real_full_file_system_is_one_line_and_resumable(model_dir, tmp_path, small_tmpfs, capsys):
    d, grow = small_tmpfs
    big = _write_fasta(tmp_path / "big.fa", {f"c{i}": "ACGTTGCAAG" * 300 for i in range(2)})  # ~170 KB of bedGraph
    argv = ["scan", model_dir, big, "--chunk", "256", "--checkpoint_every", "0"]
    assert main([*argv, "-o", str(tmp_path / "ref.bedGraph")]) == 0
    capsys.readouterr()
    out = d / "o.bedGraph"
    err = _cli_error([*argv, "-o", str(out)], capsys)
    assert "No space left on device" in err and not out.exists()
    grow("4m")
    assert main([*argv, "-o", str(out), "--resume"]) == 0
    assert out.read_bytes() == (tmp_path / "ref.bedGraph").read_bytes() and os.listdir(d) == ["o.bedGraph"]


# ---- --threads ----------------------------------------------------------------------------------------------------
def test_threads_far_beyond_the_cores_are_capped_with_a_note(model_dir, fasta, tmp_path, capsys):
    assert main(["scan", model_dir, fasta, "-o", str(tmp_path / "o.bedGraph"), "--threads", "100000"]) == 0
    assert f"more than the {len(os.sched_getaffinity(0))} cores available" in capsys.readouterr().err
    assert torch.get_num_threads() <= len(os.sched_getaffinity(0))
    assert "--threads must be >= 1" in _cli_error(["scan", model_dir, fasta, "-o", "x", "--threads", "0"], capsys)


# ---- refusals that came after the scan ------------------------------------------------------------------------------
def test_plot_default_skips_records_and_leading_runs_with_no_value(model_dir, tmp_path):
    rng = np.random.default_rng(1)
    body = "".join(rng.choice(list("ACGT"), 300))
    fa = _write_fasta(tmp_path / "g.fa", {"gap": "N" * 200, "chr1": "N" * 150 + body, "empty": ""})
    scan(ScanArgs(model_dir, [fa], str(tmp_path / "o.bedGraph"), plot=str(tmp_path / "p.png")))
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"


def test_plot_default_from_stdin_skips_an_all_n_record(model_dir, tmp_path, monkeypatch):
    stdin = b">gap\n" + b"N" * 100 + b"\n>r\n" + b"ACGT" * 40 + b"\n"
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BufferedReader(io.BytesIO(stdin))))
    scan(ScanArgs(model_dir, ["-"], str(tmp_path / "o.bedGraph"), plot=str(tmp_path / "p.png")))
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"


def test_plot_of_input_with_no_value_is_refused_before_the_scan(model_dir, tmp_path, no_scoring):
    fa = _write_fasta(tmp_path / "g.fa", {"gap": "N" * 200, "iupac": "RYKM" * 10})
    with pytest.raises(ScanError, match="--plot: no record has a base with a value"):
        scan(ScanArgs(model_dir, [fa], str(tmp_path / "o.bedGraph"), plot=str(tmp_path / "p.png")))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.fa"]


@pytest.mark.parametrize("opt", ["-o", "--summary", "--plot"])
def test_a_name_too_long_for_its_temporary_is_refused_before_the_scan(model_dir, fasta, tmp_path, capsys, no_scoring, opt):  # fmt: skip
    long = str(tmp_path / ("x" * 245 + ".bedGraph"))
    argv = ["scan", model_dir, fasta, "-o", str(tmp_path / "o.bedGraph"), opt, long]
    if opt == "-o":
        argv = ["scan", model_dir, fasta, "-o", long]
    err = _cli_error(argv, capsys)
    assert "name is too long" in err and "x" * 245 in err and ".tmp" not in err
    deep = str(tmp_path / ("d" * 300) / "o.bedGraph")  # a folder atomic_output would have to make
    assert "too long" in _cli_error(["scan", model_dir, fasta, "-o", deep], capsys)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.fa"]


# ---- resume signature holes ------------------------------------------------------------------------------------
def test_resume_refuses_another_stdin(model_dir, tmp_path, monkeypatch):
    rng = np.random.default_rng(2)
    first, other = ("".join(rng.choice(list("ACGT"), 400)) for _ in range(2))
    out = tmp_path / "o.bedGraph"

    def stdin(seq: str) -> None:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BufferedReader(io.BytesIO(f">r\n{seq}\n".encode()))))

    stdin(first)
    kill_after(monkeypatch, 3)
    with pytest.raises(Killed):
        scan(ScanArgs(model_dir, ["-"], str(out), chunk=64, checkpoint_every=0))
    monkeypatch.undo()
    stdin(other)  # the same name and length, other bases
    with pytest.raises(ScanCheckpointError, match="the input read up to the checkpoint differs"):
        scan(ScanArgs(model_dir, ["-"], str(out), chunk=64, resume=True))
    assert not out.exists() and _work(out).is_dir()


def test_resume_refuses_a_file_edited_with_its_size_and_mtime_kept(model_dir, fasta, tmp_path, monkeypatch):
    out = tmp_path / "o.bedGraph"
    _killed(model_dir, fasta, out, monkeypatch, calls=3)
    st = os.stat(fasta)
    text = Path(fasta).read_text()
    Path(fasta).write_text(text[:10] + ("A" if text[10] != "A" else "C") + text[11:])
    os.utime(fasta, ns=(st.st_atime_ns, st.st_mtime_ns))
    with pytest.raises(ScanCheckpointError, match="the input read up to the checkpoint differs"):
        scan(ScanArgs(model_dir, [fasta], str(out), chunk=64, resume=True))


def test_resume_refuses_a_part_replaced_by_a_link(model_dir, fasta, tmp_path, monkeypatch):
    out = tmp_path / "o.bedGraph"
    _killed(model_dir, fasta, out, monkeypatch)
    mine = tmp_path / "mine.txt"
    mine.write_text("x" * 100_000)
    part = _work(out) / "part0.logprob.bedGraph"
    part.unlink()
    part.symlink_to(mine)
    with pytest.raises(ScanError, match="holds files a scan did not write \\(part0.logprob.bedGraph"):
        scan(ScanArgs(model_dir, [fasta], str(out), chunk=64, resume=True))
    assert mine.read_text() == "x" * 100_000  # not truncated through the link


# ---- late or missing refusals of paths and options -----------------------------------------------------------------
def test_an_output_inside_a_work_folder_is_refused(model_dir, fasta, tmp_path, monkeypatch, capsys):
    out = tmp_path / "o.bedGraph"
    before = _killed(model_dir, fasta, out, monkeypatch)
    _forbid_scoring(monkeypatch)
    for inside in ("part0.logprob.bedGraph", "x.bedGraph"):
        err = _cli_error(["scan", model_dir, fasta, "-o", str(_work(out) / inside)], capsys)
        assert "inside a scan's work folder" in err
    assert _snapshot(_work(out)) == before


@pytest.mark.parametrize("opt", ["--workers", "--devices"])
def test_absurd_process_counts_are_refused_before_the_scan(model_dir, fasta, tmp_path, capsys, no_scoring, opt):
    err = _cli_error(["scan", model_dir, fasta, "-o", str(tmp_path / "o.bedGraph"), opt, "100000"], capsys)
    assert f"{opt} 100000: far more than the" in err


def test_a_file_system_without_locks_is_one_line(model_dir, fasta, tmp_path, monkeypatch, capsys, no_scoring):
    def no_locks(fd, op):
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr("fcntl.flock", no_locks)
    err = _cli_error(["scan", model_dir, fasta, "-o", str(tmp_path / "o.bedGraph")], capsys)
    assert "cannot lock the work folder" in err and sorted(os.listdir(tmp_path)) == ["g.fa"]


def test_a_full_disk_after_the_tracks_says_so(model_dir, fasta, tmp_path, monkeypatch, capsys):
    def full(path, records):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr("strandline.tasks.scan.write_summary", full)
    out, tsv = tmp_path / "o.bedGraph", tmp_path / "s.tsv"
    err = _cli_error(["scan", model_dir, fasta, "-o", str(out), "--summary", str(tsv)], capsys)
    assert f"{tsv}: No space left on device after the tracks were written" in err and out.is_file()
