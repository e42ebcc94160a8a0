"""Scan defects: everything checked before work starts, nothing lost, resume that refuses to stitch,
empty inputs, stdout, and one line + exit 2 (never a traceback) for every bad input or option."""

import contextlib
import io
import os
import stat
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from test_scan import Killed, _write_fasta, kill_after, save_tiny_model

import strandline.tasks.scan.job
from strandline.app.cli import main
from strandline.data.fasta import FastaError
from strandline.data.tracks import TrackError
from strandline.errors import UserInputError
from strandline.models import LinearTransformerLM, ModelConfig
from strandline.tasks.scan import ScanArgs, ScanCheckpointError, ScanError, scan

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread is faster


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("m"))


@pytest.fixture
def fasta(tmp_path):
    rng = np.random.default_rng(0)
    recs = {f"r{i}": "".join(rng.choice(list("ACGT"), 150 + 7 * i)) for i in range(3)}
    return _write_fasta(tmp_path / "g.fa", recs)


@pytest.fixture
def no_scoring(monkeypatch):
    """Fail loudly if the model scores anything: the check under test must come before the scan."""

    def forbidden(*a, **k):
        raise AssertionError("the scan started before the bad input was refused")

    monkeypatch.setattr(strandline.tasks.scan.job, "score_chunk", forbidden)


def _cli_error(argv, capsys) -> str:
    """Run the CLI; assert exit 2 with exactly one line on stderr, and return it."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("strandline ") and "Traceback" not in err, err
    return err


# ---- item 2: an output that is an input ---------------------------------------------------------------
def test_scan_refuses_output_that_is_an_input(model_dir, fasta, tmp_path, capsys, no_scoring):
    before = Path(fasta).read_bytes()
    link = tmp_path / "link.fa"
    link.symlink_to(fasta)
    for out in (fasta, str(link)):  # the input itself, and a link that resolves to it
        assert "is also an input" in _cli_error(["scan", model_dir, fasta, "-o", out], capsys)
    # several tracks write stem.TRACK.ext: g.logprob.fa and g.entropy.fa; one of them is an input here
    other = _write_fasta(tmp_path / "g.logprob.fa", {"x": "ACGT"})
    err = _cli_error(["scan", model_dir, fasta, other, "-o", fasta, "--track", "logprob,entropy"], capsys)
    assert "g.logprob.fa" in err and "is also an input" in err
    for opt in ("--summary", "--plot"):
        err = _cli_error(["scan", model_dir, fasta, "-o", str(tmp_path / "o.bedGraph"), opt, fasta], capsys)
        assert "is also an input" in err
    err = _cli_error(["scan", model_dir, fasta, "-o", str(Path(model_dir) / "config.json")], capsys)
    assert "is also an input" in err
    assert Path(fasta).read_bytes() == before and not list(tmp_path.glob(".*.scan"))


def test_scan_refuses_the_same_file_as_two_outputs(model_dir, fasta, tmp_path, no_scoring):
    out = str(tmp_path / "o.bedGraph")
    with pytest.raises(ScanError, match="given as two outputs"):
        scan(ScanArgs(model_dir, [fasta], out, summary=out))


# ---- item 3: resume must not stitch two runs ------------------------------------------------------------
def _killed_scan(model_dir, fasta, out, monkeypatch, calls=1, **kw):
    kill_after(monkeypatch, calls)
    with pytest.raises(Killed):
        scan(ScanArgs(model_dir, [fasta], str(out), chunk=64, checkpoint_every=0, **kw))
    monkeypatch.undo()
    assert out.with_name(f".{out.name}.scan").is_dir()


def test_resume_refuses_another_model_of_the_same_shape(model_dir, fasta, tmp_path, monkeypatch):
    out = tmp_path / "o.bedGraph"
    _killed_scan(model_dir, fasta, out, monkeypatch)
    torch.manual_seed(123)  # same config, other weights
    LinearTransformerLM(ModelConfig(d_model=32, n_layers=2, n_heads=2, chunk_size=16)).save(
        tmp_path / "other", tokenizer="dna"
    )
    with pytest.raises(ScanCheckpointError, match="the model"):
        scan(ScanArgs(str(tmp_path / "other"), [fasta], str(out), chunk=64, resume=True))
    bigger = tmp_path / "bigger"  # another size: refused the same way, before any state is loaded
    LinearTransformerLM(ModelConfig(d_model=48, n_layers=3, n_heads=2, chunk_size=16)).save(bigger, tokenizer="dna")
    with pytest.raises(ScanCheckpointError, match="the model"):
        scan(ScanArgs(str(bigger), [fasta], str(out), chunk=64, resume=True))
    assert not out.exists()


def test_resume_refuses_another_state_dtype(model_dir, fasta, tmp_path, monkeypatch):
    out = tmp_path / "o.bedGraph"
    _killed_scan(model_dir, fasta, out, monkeypatch)
    with pytest.raises(ScanCheckpointError, match=r"--state_dtype \(float64 then, float32 now\)"):
        scan(ScanArgs(model_dir, [fasta], str(out), chunk=64, state_dtype="float32", resume=True))


def test_resume_refuses_an_input_replaced_at_the_same_path(model_dir, fasta, tmp_path, monkeypatch):
    out = tmp_path / "o.bedGraph"
    _killed_scan(model_dir, fasta, out, monkeypatch)
    _write_fasta(fasta, {"r0": "ACGT" * 10})  # other content, same name
    with pytest.raises(ScanCheckpointError, match="g.fa changed since"):
        scan(ScanArgs(model_dir, [fasta], str(out), chunk=64, resume=True))
    assert not out.exists()


def test_resume_accepts_harmless_differences(model_dir, fasta, tmp_path, monkeypatch):
    """--checkpoint_every and a relative vs absolute spelling of the same input do not change the output."""
    ref = tmp_path / "ref.bedGraph"
    scan(ScanArgs(model_dir, [fasta], str(ref), chunk=64))
    out = tmp_path / "o.bedGraph"
    _killed_scan(model_dir, fasta, out, monkeypatch)
    monkeypatch.chdir(tmp_path)
    scan(ScanArgs(model_dir, [os.path.relpath(fasta)], str(out), chunk=64, checkpoint_every=30, resume=True))
    assert out.read_bytes() == ref.read_bytes()


def test_resume_refuses_a_part_file_shorter_than_its_checkpoint(model_dir, fasta, tmp_path, monkeypatch):
    out = tmp_path / "o.bedGraph"
    _killed_scan(model_dir, fasta, out, monkeypatch, calls=4)
    part = out.with_name(".o.bedGraph.scan") / "part0.logprob.bedGraph"
    part.write_bytes(part.read_bytes()[:10])  # damaged: shorter than the checkpointed length
    with pytest.raises(ScanCheckpointError, match="has 10 bytes, its checkpoint says"):
        scan(ScanArgs(model_dir, [fasta], str(out), chunk=64, resume=True))
    assert not out.exists() and b"\0" not in part.read_bytes()  # never padded with NUL bytes


def test_a_checkpoint_temporary_left_by_a_kill_is_ours(model_dir, fasta, tmp_path, monkeypatch):
    """A kill while a state checkpoint is written leaves atomic_output's ``.state0...tmp``: resume and restart work."""
    ref = tmp_path / "ref.bedGraph"
    scan(ScanArgs(model_dir, [fasta], str(ref), chunk=64))
    for resume in (True, False):
        out = tmp_path / f"o{resume}.bedGraph"
        _killed_scan(model_dir, fasta, out, monkeypatch)
        (out.with_name(f".{out.name}.scan") / ".state0.safetensors.k1ll3d.tmp").write_bytes(b"half a state")
        scan(ScanArgs(model_dir, [fasta], str(out), chunk=64, resume=resume))
        assert out.read_bytes() == ref.read_bytes()
        assert not out.with_name(f".{out.name}.scan").exists()


def test_a_folder_that_is_not_ours_is_never_deleted(model_dir, fasta, tmp_path):
    work = tmp_path / ".o.bedGraph.scan"
    work.mkdir()
    (work / "notes.txt").write_text("mine")
    with pytest.raises(ScanError, match="holds files a scan did not write"):
        scan(ScanArgs(model_dir, [fasta], str(tmp_path / "o.bedGraph")))
    assert (work / "notes.txt").read_text() == "mine"


# ---- item 10 / 13: inputs with no bases -------------------------------------------------------------------
@pytest.mark.parametrize("fmt", ["bedgraph", "wig", "bigwig"])
def test_header_only_fasta_is_refused_with_no_output(model_dir, tmp_path, capsys, fmt):
    if fmt == "bigwig":
        pytest.importorskip("pyBigWig", reason="pyBigWig (the bigwig extra) is not installed")
    fa = tmp_path / "h.fa"
    fa.write_text(">a\n>b some description\n")
    out = tmp_path / f"o.{ {'bedgraph': 'bedGraph', 'wig': 'wig', 'bigwig': 'bw'}[fmt] }"
    err = _cli_error(["scan", model_dir, str(fa), "-o", str(out)], capsys)
    assert "no bases to scan" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["h.fa"]


def test_header_only_stdin_is_refused_after_reading_with_no_output(model_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BufferedReader(io.BytesIO(b">a\n>b\n"))))
    with pytest.raises(ScanError, match="no bases to scan"):
        scan(ScanArgs(model_dir, ["-"], str(tmp_path / "o.bedGraph")))
    assert list(tmp_path.iterdir()) == []


def test_summary_and_last_line_give_the_logprob_tracks_mean_with_its_sign(model_dir, fasta, tmp_path, capsys):
    """One name and one sign for bits: the TSV's mean_logprob is the logprob track's mean over the record's
    bases (negative, like the track), and so is the last line's."""
    out, tsv = tmp_path / "o.bedGraph", tmp_path / "s.tsv"
    assert main(["scan", model_dir, fasta, "-o", str(out), "--summary", str(tsv)]) == 0
    sums: dict[str, list[float]] = {}
    for line in out.read_text().splitlines():
        chrom, a, b, v = line.split("\t")
        acc = sums.setdefault(chrom, [0.0, 0])
        acc[0] += (int(b) - int(a)) * float(v)
        acc[1] += int(b) - int(a)
    rows = [r.split("\t") for r in tsv.read_text().splitlines()]
    assert rows[0][4:6] == ["mean_logprob", "mean_entropy"]
    for r in rows[1:]:
        track_mean = sums[r[0]][0] / sums[r[0]][1]
        assert int(r[3]) == sums[r[0]][1] and track_mean < 0
        assert float(r[4]) == pytest.approx(track_mean, abs=1e-5)
    total = sum(s for s, _ in sums.values()) / sum(n for _, n in sums.values())
    assert f"mean logprob {total:.4f} bits/base" in capsys.readouterr().err


def test_empty_records_among_real_ones_are_reported(model_dir, tmp_path, capsys):
    fa = _write_fasta(tmp_path / "m.fa", {"e1": "", "real": "ACGTACGTAC", "e2": ""})
    assert main(["scan", model_dir, fa, "-o", str(tmp_path / "o.bedGraph"), "--summary", str(tmp_path / "s.tsv")]) == 0
    err = capsys.readouterr().err
    assert "2 empty record(s)" in err and "e1, e2" in err
    rows = [r.split("\t") for r in (tmp_path / "s.tsv").read_text().splitlines()]
    assert [r[:2] for r in rows[1:]] == [["e1", "0"], ["real", "10"], ["e2", "0"]]


# ---- item 11: unreadable inputs, unwritable outputs, before the scan ------------------------------------
def test_unreadable_input_is_one_line(model_dir, fasta, tmp_path, capsys, monkeypatch, no_scoring):
    real_open = open

    def deny(path, *a, **k):
        if str(path) == fasta:
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *a, **k)

    monkeypatch.setattr("builtins.open", deny)
    err = _cli_error(["scan", model_dir, fasta, "-o", str(tmp_path / "o.bedGraph")], capsys)
    assert "g.fa" in err and "ermission denied" in err


def test_output_directory_or_read_only_folder_is_refused_before_the_scan(model_dir, fasta, tmp_path, capsys, no_scoring, monkeypatch):  # fmt: skip
    (tmp_path / "d").mkdir()
    assert "is a directory" in _cli_error(["scan", model_dir, fasta, "-o", str(tmp_path / "d")], capsys)
    err = _cli_error(["scan", model_dir, fasta, "-o", str(tmp_path / "o.bedGraph"), "--summary", str(tmp_path / "d")], capsys)  # fmt: skip
    assert "--summary file is a directory" in err
    ro = tmp_path / "ro"
    ro.mkdir()
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, m, **k: False if Path(p) == ro else real_access(p, m, **k))
    assert "permission denied" in _cli_error(["scan", model_dir, fasta, "-o", str(ro / "o.bedGraph")], capsys)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d", "g.fa", "ro"] and not list(ro.iterdir())


# ---- item 14: plot and option values ---------------------------------------------------------------------
def test_plot_refuses_files_that_are_not_tracks(tmp_path, capsys, fasta):
    (tmp_path / "bin.bedGraph").write_bytes(bytes(range(256)) * 4)
    (tmp_path / "fake.bw").write_text("chr1\t0\t1\t0.5\n")
    (tmp_path / "empty.wig").write_text("")
    for track, what in (
        (tmp_path / "bin.bedGraph", "not text"), (fasta, "FASTA header"), (tmp_path / "fake.bw", "not a bigWig"),
        (tmp_path / "empty.wig", "no bedGraph/WIG data lines"), (tmp_path, "is a directory"),
    ):  # fmt: skip
        err = _cli_error(["plot", str(track), "r0", str(tmp_path / "p.png")], capsys)
        assert what in err, err
    assert not (tmp_path / "p.png").exists()


@pytest.mark.parametrize(
    "opts,msg",
    [
        pytest.param(["--threads", "-3"], "--threads must be >= 1", id="threads-3"),
        pytest.param(["--threads", "0"], "--threads must be >= 1", id="threads0"),
        pytest.param(["--devices", "1", "--accelerator", "gpu"], "no CUDA GPU", id="gpu-on-cpu"),
        pytest.param(["--accelerator", "tpu9"], "--accelerator must be one of", id="bad-accelerator"),
        pytest.param(["--window", "0"], "--window must be >= 1", id="window0"),
        pytest.param(["--state_dtype", "float16"], "--state_dtype must be", id="dtype"),
        pytest.param(["--track", "logprob,bogus"], "unknown track 'bogus'", id="track"),
    ],
)
def test_bad_option_values_are_one_line_before_any_work(model_dir, fasta, tmp_path, capsys, no_scoring, opts, msg):
    if "gpu" in opts and torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert msg in _cli_error(["scan", model_dir, fasta, "-o", str(tmp_path / "o.bedGraph"), *opts], capsys)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.fa"]


# ---- item 15: checked before the first base ---------------------------------------------------------------
def test_region_is_checked_before_the_scan(model_dir, fasta, tmp_path, no_scoring):
    from strandline.tasks.scan.regions import RegionError

    png = str(tmp_path / "p.png")
    for region, needle in (("chrZ:0-10", "no record 'chrZ'"), ("r0:5000-6000", "starts beyond the end"),
                           ("r0:9-3", "bad region")):  # fmt: skip
        for plot in (png, None):  # --region restricts the scan (and is what --plot draws)
            with pytest.raises(RegionError, match=needle):
                scan(ScanArgs(model_dir, [fasta], str(tmp_path / "o.bedGraph"), plot=plot, region=region))


def test_duplicate_record_across_files_is_found_before_the_scan(model_dir, fasta, tmp_path, no_scoring):
    fa2 = _write_fasta(tmp_path / "h.fa", {"new": "ACGT", "r1": "GGCC"})
    with pytest.raises(FastaError, match="record 'r1' already read from"):
        scan(ScanArgs(model_dir, [fasta, fa2], str(tmp_path / "o.bedGraph")))
    tab = tmp_path / "tab.fa"
    tab.write_text(">x\tA\nACGT\n>x\tB\nACGT\n")  # a tab splits the name too
    with pytest.raises(FastaError, match="duplicate record name 'x'"):
        scan(ScanArgs(model_dir, [str(tab)], str(tmp_path / "o.bedGraph")))


def test_bw_name_means_bigwig_and_a_mismatch_is_refused(model_dir, fasta, tmp_path):
    pbw = pytest.importorskip("pyBigWig", reason="pyBigWig (the bigwig extra) is not installed")
    scan(ScanArgs(model_dir, [fasta], str(tmp_path / "o.bw"), chunk=100))
    bw = pbw.open(str(tmp_path / "o.bw"))  # a real bigWig, not text in a .bw file
    assert set(bw.chroms()) == {"r0", "r1", "r2"}
    bw.close()
    with pytest.raises(ScanError, match="the name says bigwig but --format is bedgraph"):
        scan(ScanArgs(model_dir, [fasta], str(tmp_path / "x.bw"), format="bedgraph"))
    with pytest.raises(ScanError, match="the name says wig"):
        scan(ScanArgs(model_dir, [fasta], str(tmp_path / "x.wig"), format="bigwig"))


# ---- ergonomics: -o -, --help ----------------------------------------------------------------------------
def test_output_dash_is_stdout(model_dir, fasta, tmp_path, capsysbinary, monkeypatch):
    scan(ScanArgs(model_dir, [fasta], str(tmp_path / "ref.bedGraph"), chunk=100))
    monkeypatch.chdir(tmp_path)
    assert main(["scan", model_dir, fasta, "-o", "-", "--chunk", "100"]) == 0
    assert capsysbinary.readouterr().out == (tmp_path / "ref.bedGraph").read_bytes()
    assert not (tmp_path / "-").exists() and not list(tmp_path.glob(".*scan*"))


@pytest.mark.parametrize(
    "opts,msg",
    [
        (["--format", "bigwig"], "bigWig cannot be written to stdout"),
        (["--track", "logprob,entropy"], "several tracks need several files"),
        (["--resume"], "--resume needs"),
        (["--plot", "p.png"], "--plot and the reports read the track file"),
    ],
)
def test_output_dash_refuses_what_stdout_cannot_hold(model_dir, fasta, capsys, no_scoring, opts, msg):
    assert msg in _cli_error(["scan", model_dir, fasta, "-o", "-", *opts], capsys)


def test_scan_help_shows_output_as_an_option(capsys):
    assert main(["scan", "--help"]) == 0
    usage = capsys.readouterr().out.split("\n\n")[0]
    assert "-o OUTPUT" in usage and "model inputs [inputs ...]" in usage
    assert not usage.rstrip().endswith("output")  # not a third positional


def test_every_scan_error_is_a_user_input_error():
    assert issubclass(ScanError, UserInputError) and issubclass(ScanCheckpointError, ScanError)
    assert issubclass(TrackError, UserInputError) and issubclass(FastaError, UserInputError)


def test_bad_input_files_are_refused_by_the_survey_before_the_scan(model_dir, fasta, tmp_path, capsys, no_scoring):
    """The second input is bad: it is found before the first is scanned (and before any output exists)."""
    import gzip

    data = gzip.compress(Path(fasta).read_bytes() * 50)
    (tmp_path / "trunc.fa.gz").write_bytes(data[: len(data) // 2])
    (tmp_path / "bin.fa").write_bytes(bytes(range(1, 256)))
    (tmp_path / "empty.fa").write_text("")
    (tmp_path / "dir").mkdir()
    for name, msg in (
        ("trunc.fa.gz", "truncated or corrupt"), ("bin.fa", "binary data before the first '>'"),
        ("empty.fa", "no FASTA records"), ("dir", "not a regular file"), ("missing.fa", "no such file"),
    ):  # fmt: skip
        err = _cli_error(["scan", model_dir, fasta, str(tmp_path / name), "-o", str(tmp_path / "o.bedGraph")], capsys)
        assert name in err and msg in err, err
    assert not list(tmp_path.glob("o.*")) and not list(tmp_path.glob(".o.*"))


def test_stdin_record_repeating_a_file_record_is_refused_at_its_header(model_dir, fasta, tmp_path, monkeypatch, no_scoring):  # fmt: skip
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BufferedReader(io.BytesIO(b">r1\nACGT\n"))))
    with pytest.raises(FastaError, match="-: record 'r1' is also in .*g.fa"):
        scan(ScanArgs(model_dir, ["-", fasta], str(tmp_path / "o.bedGraph")))
    with pytest.raises(ScanError, match="stdin or a pipe cannot be scanned with --devices"):
        scan(ScanArgs(model_dir, ["-"], str(tmp_path / "o.bedGraph"), devices=2))


def test_stdout_scan_leaves_no_temporary_folder_even_when_killed(model_dir, fasta, tmp_path, monkeypatch):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    kill_after(monkeypatch, 1)
    with pytest.raises(Killed):
        scan(ScanArgs(model_dir, [fasta], "-", chunk=64, checkpoint_every=0))
    assert list((tmp_path / "tmp").iterdir()) == []


@contextlib.contextmanager
def _fifo_reader(path: Path):
    """A FIFO at ``path`` with a reader thread; yields the list that receives what was written to it."""
    os.mkfifo(path)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(path.read_bytes()))
    reader.start()
    yield got
    reader.join(timeout=60)
    assert stat.S_ISFIFO(path.stat().st_mode)  # still a FIFO: written in place, not replaced by a file


def test_a_device_or_pipe_output_is_written_in_place_never_replaced(model_dir, fasta, tmp_path):
    """-o /dev/null (or a FIFO) must stay a device: a rename onto it would replace /dev/null, as root, with a file."""
    scan(ScanArgs(model_dir, [fasta], str(tmp_path / "ref.bedGraph"), chunk=100))
    fifo = tmp_path / "pipe"
    with _fifo_reader(fifo) as got:
        scan(ScanArgs(model_dir, [fasta], str(fifo), chunk=100))
    assert got == [(tmp_path / "ref.bedGraph").read_bytes()] and not list(tmp_path.glob(".*scan"))
    with pytest.raises(ScanError, match="--summary file is not a regular file"):
        scan(ScanArgs(model_dir, [fasta], str(tmp_path / "o.bedGraph"), summary=str(fifo)))


def test_plot_to_a_pipe_writes_in_place(model_dir, fasta, tmp_path):
    scan(ScanArgs(model_dir, [fasta], str(tmp_path / "o.bedGraph"), chunk=100))
    with _fifo_reader(tmp_path / "png.pipe") as got:
        assert main(["plot", str(tmp_path / "o.bedGraph"), "r0", str(tmp_path / "png.pipe")]) == 0
    assert got[0][:8] == b"\x89PNG\r\n\x1a\n"


def test_rna_u_read_as_t_is_counted_in_the_summary_and_said(model_dir, tmp_path, capsys):
    fa = _write_fasta(tmp_path / "rna.fa", {"rna": "ACGUACGUUU", "dna": "ACGTACGT"})
    ref = _write_fasta(tmp_path / "dna.fa", {"rna": "ACGTACGTTT", "dna": "ACGTACGT"})
    argv = ["-o", str(tmp_path / "u.bedGraph"), "--summary", str(tmp_path / "s.tsv")]
    assert main(["scan", model_dir, fa, *argv]) == 0
    assert "4 RNA U base(s) read as T" in capsys.readouterr().err
    rows = [r.split("\t") for r in (tmp_path / "s.tsv").read_text().splitlines()]
    assert rows[0][-1] == "u_read_as_t" and [r[-1] for r in rows[1:]] == ["4", "0"]
    scan(ScanArgs(model_dir, [ref], str(tmp_path / "t.bedGraph")))
    assert (tmp_path / "u.bedGraph").read_bytes() == (tmp_path / "t.bedGraph").read_bytes()  # scored as T


@contextlib.contextmanager
def _fifo_writer(path: Path, data: bytes):
    """A FIFO at ``path`` that a thread fills with ``data`` once a reader opens it."""
    os.mkfifo(path)
    writer = threading.Thread(target=lambda: path.write_bytes(data))
    writer.start()
    try:
        yield str(path)
    finally:
        if writer.is_alive():  # nobody opened it (a refused scan): open it once so the writer ends
            with contextlib.suppress(OSError), open(path, "rb") as fh:
                fh.read()
        writer.join(timeout=60)


def test_a_pipe_input_is_read_once_as_stdin_is(model_dir, fasta, tmp_path):
    """<(zcat genome.fa.gz) or a FIFO: streamed like stdin (no survey pass), the same tracks as the file."""
    scan(ScanArgs(model_dir, [fasta], str(tmp_path / "ref.bedGraph"), chunk=100))
    data = Path(fasta).read_bytes()
    with _fifo_writer(tmp_path / "in.pipe", data) as pipe:
        records = scan(ScanArgs(model_dir, [pipe], str(tmp_path / "p.bedGraph"), chunk=100, workers=2))
    assert [r.name for r in records] == ["r0", "r1", "r2"]
    assert (tmp_path / "p.bedGraph").read_bytes() == (tmp_path / "ref.bedGraph").read_bytes()
    other = _write_fasta(tmp_path / "o.fa", {"r9": "ACGT" * 30})
    with _fifo_writer(tmp_path / "in2.pipe", data) as pipe:  # a file and a pipe: the pipe's records stream too
        scan(ScanArgs(model_dir, [other, pipe], str(tmp_path / "q.bedGraph"), chunk=100))
    assert (tmp_path / "q.bedGraph").read_text().endswith((tmp_path / "ref.bedGraph").read_text())


def test_a_pipe_given_twice_or_with_an_index_is_refused(model_dir, fasta, tmp_path, no_scoring):
    data = Path(fasta).read_bytes()
    with _fifo_writer(tmp_path / "in.pipe", data) as pipe:
        with pytest.raises(ScanError, match="a pipe can be read only once"):
            scan(ScanArgs(model_dir, [pipe, pipe], str(tmp_path / "p.bedGraph")))
        with pytest.raises(UserInputError, match="not stdin or a pipe"):
            scan(ScanArgs(model_dir, [pipe], str(tmp_path / "p.bedGraph"), region="r0:1-50"))
    assert not (tmp_path / "p.bedGraph").exists()


@pytest.mark.parametrize("pipe_first", [True, False])
def test_a_pipe_record_repeating_a_file_record_is_refused(model_dir, fasta, tmp_path, pipe_first):
    said = r"in\.pipe: record 'r0' is also in .*g\.fa" if pipe_first else r"in\.pipe: record 'r0' already read from"
    with (
        _fifo_writer(tmp_path / "in.pipe", Path(fasta).read_bytes()) as pipe,
        pytest.raises(FastaError, match=said),
    ):
        inputs = [pipe, fasta] if pipe_first else [fasta, pipe]
        scan(ScanArgs(model_dir, inputs, str(tmp_path / "p.bedGraph"), chunk=100))
    assert not (tmp_path / "p.bedGraph").exists()


@pytest.mark.skipif(not os.path.exists("/bin/bash"), reason="process substitution needs bash")
def test_process_substitution_on_the_command_line(model_dir, fasta, tmp_path):
    """What a user types: strandline scan MODEL <(zcat genome.fa.gz) -o out.bedGraph."""
    import gzip
    import shlex
    import subprocess

    gz = tmp_path / "g.fa.gz"
    gz.write_bytes(gzip.compress(Path(fasta).read_bytes()))
    scan(ScanArgs(model_dir, [str(gz)], str(tmp_path / "ref.bedGraph")))
    cmd = (f"{shlex.quote(sys.executable)} -m strandline scan {shlex.quote(model_dir)} <(gzip -dc {shlex.quote(str(gz))})"
           f" -o {shlex.quote(str(tmp_path / 'p.bedGraph'))} --threads 1")  # fmt: skip
    run = subprocess.run(["/bin/bash", "-c", cmd], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "p.bedGraph").read_bytes() == (tmp_path / "ref.bedGraph").read_bytes()
