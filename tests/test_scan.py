"""Genome scanning: exactness (chunk-recurrent vs step), record boundaries, N runs, stdin, windows,
reverse-complement re-alignment, resume after a kill, bad input, workers and the CLI."""

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import strandline.tasks.scan.job
from strandline.app.cli import main
from strandline.data.fasta import FastaError, iter_records
from strandline.data.tokenizers import COMPLEMENT, DNATokenizer, N
from strandline.data.tracks import iter_intervals, read_region
from strandline.models import LinearTransformerLM, ModelConfig
from strandline.tasks.scan import (
    TRACKS,
    ScanArgs,
    ScanCheckpointError,
    load_for_scan,
    scan,
    score_chunk,
    score_sequence,
)

ROOT = Path(__file__).resolve().parents[1]
LAMBDA = ROOT / "data" / "genomes" / "lambda.fasta.gz"
TOK = DNATokenizer()


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread is faster


def save_tiny_model(folder: Path) -> str:
    """A tiny random DNA model directory (seed 0): the model of every scan test."""
    torch.manual_seed(0)
    m = LinearTransformerLM(ModelConfig(d_model=32, n_layers=2, n_heads=2, chunk_size=16))
    m.save(folder / "tiny", tokenizer="dna")
    return str(folder / "tiny")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("m"))


@pytest.fixture(scope="module")
def model(model_dir):
    return load_for_scan(model_dir)


def _seq(rng, n, lower=False):
    s = "".join(rng.choice(list("ACGT"), n))
    return s.lower() if lower else s


@pytest.fixture(scope="module")
def records():
    rng = np.random.default_rng(0)
    return {
        "chr1": _seq(rng, 420) + "N" * 37 + _seq(rng, 150, lower=True) + "RY" + _seq(rng, 90),
        "chr2": "ACGTNNACGT",
        "empty": "",
        "chr3": _seq(rng, 333),
    }


def _write_fasta(path, recs: dict, width=60):
    with open(path, "w") as f:
        for name, s in recs.items():
            f.write(f">{name} desc\n")
            f.writelines(s[i : i + width] + "\n" for i in range(0, len(s), width))
    return str(path)


@pytest.fixture
def fasta(tmp_path, records):
    return _write_fasta(tmp_path / "g.fa", records)


class Killed(Exception):
    """A simulated kill between two chunks (raised from inside the scoring call, after a checkpoint)."""


def kill_after(monkeypatch, n_calls: int) -> None:
    """Make the scan die in its ``n_calls + 1``-th model call, as a kill between two chunks would."""
    real, calls = strandline.tasks.scan.job.score_chunk, [0]

    def dying(*args, **kw):
        calls[0] += 1
        if calls[0] > n_calls:
            raise Killed(f"killed after {n_calls} model calls")
        return real(*args, **kw)

    monkeypatch.setattr(strandline.tasks.scan.job, "score_chunk", dying)


def _ids(s: str) -> np.ndarray:
    return TOK.encode(s)


def _bedgraph(path) -> dict:
    """{chrom: {pos: value}} of a per-base bedGraph."""
    out = {}
    for line in Path(path).read_text().splitlines():
        c, s, e, v = line.split("\t")
        for p in range(int(s), int(e)):
            out.setdefault(c, {})[p] = float(v)
    return out


def test_chunk_recurrent_matches_step_on_a_real_sequence(model):
    assert LAMBDA.exists(), f"{LAMBDA} (the shipped phage genome) is missing"
    ids = next(iter_records(LAMBDA, 200)).ids  # the first 200 bases of phage lambda
    step = score_sequence(model, ids, chunk=10**6, mode="step")
    for chunk in (200, 77, 64):  # one pass; chunk boundaries inside and on the model's chunk size
        got = score_sequence(model, ids, chunk=chunk)
        np.testing.assert_allclose(got, step, atol=1e-4, rtol=0)
    assert model.config.state_dtype == "float64"
    _, state, _ = score_chunk(model, ids[:10], None, 1)
    assert state.layers[0].S.dtype == torch.float64  # the carried state accumulates in float64


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_float64_state_keeps_adding_after_2_to_the_25_tokens(model_dir, dtype):
    """A chromosome-length prefix leaves z ~ 2^25 per feature; float32 then drops O(1) terms, float64 does not."""
    m = load_for_scan(model_dir, state_dtype=dtype)
    ids = _ids("ACGTTGCAAGGCTTAC" * 40)
    _, fresh, _ = score_chunk(m, ids, None, 1)
    big = m.init_state(1)._replace(layers=tuple(st._replace(z=st.z + 2.0**25) for st in m.init_state(1).layers))
    _, cont, _ = score_chunk(m, ids, big, 1)
    added = cont.layers[0].z.double() - 2.0**25
    err = float((added - fresh.layers[0].z.double()).abs().max() / fresh.layers[0].z.double().abs().max())
    if dtype == "float64":
        assert cont.layers[0].z.dtype == torch.float64 and err < 1e-9
    else:
        assert err > 1e-4  # the stall this guards against (docs/architecture.md section 2)


def test_resume_with_other_options_is_refused(model_dir, fasta, tmp_path, monkeypatch):
    out = tmp_path / "o.bedGraph"
    kill_after(monkeypatch, 2)
    with pytest.raises(Killed):
        scan(ScanArgs(model_dir, [fasta], str(out), chunk=64, checkpoint_every=0))
    monkeypatch.undo()
    with pytest.raises(ScanCheckpointError, match=r"--window \(1 then, 10 now\)"):
        scan(ScanArgs(model_dir, [fasta], str(out), chunk=64, window=10, resume=True))
    scan(ScanArgs(model_dir, [fasta], str(out), chunk=64, window=10))  # without --resume: starts over
    assert out.exists() and not (tmp_path / ".o.bedGraph.scan").exists()


def test_scan_matches_whole_record_scores_and_resets_at_record_boundaries(model, model_dir, fasta, records, tmp_path):
    out = tmp_path / "o.bedGraph"
    recs = scan(ScanArgs(model_dir, [fasta], str(out), chunk=100, summary=str(tmp_path / "s.tsv")))
    got = _bedgraph(out)
    for name, s in records.items():
        ids = _ids(s)
        ref = score_sequence(model, ids)  # the record alone, from a fresh state: proves the reset
        scored = np.flatnonzero(ids != N)
        assert sorted(got.get(name, {})) == scored.tolist()  # every base once, N bases absent
        if len(scored):
            np.testing.assert_allclose([got[name][p] for p in scored], ref[scored, 0], atol=1e-4)
    assert [r.name for r in recs] == list(records)
    rows = [line.split("\t") for line in (tmp_path / "s.tsv").read_text().splitlines()[1:]]
    chr1 = _ids(records["chr1"])
    assert rows[0][:4] == ["chr1", str(len(chr1)), str(int((chr1 == N).sum())), str(int((chr1 != N).sum()))]
    ref = score_sequence(model, chr1)
    assert float(rows[0][4]) == pytest.approx(
        np.nanmean(ref[:, 0].astype(np.float64)), abs=1e-5
    )  # the logprob track's mean
    assert rows[2][1:4] == ["0", "0", "0"] and rows[2][4] == "NA"  # the empty record


def test_n_runs_are_gaps_and_the_state_runs_through_them(model, model_dir, tmp_path):
    s = "ACGTTGCA" * 10 + "N" * 50 + "GGCATT" * 10
    fa = _write_fasta(tmp_path / "n.fa", {"r": s})
    scan(ScanArgs(model_dir, [fa], str(tmp_path / "o.bedGraph"), chunk=64))
    lines = (tmp_path / "o.bedGraph").read_text().splitlines()
    starts = [int(line.split("\t")[1]) for line in lines]
    assert 80 not in starts and 130 in starts and all(not 80 <= p < 130 for p in starts)
    # the base after the run is scored with the N run in its context (not from a reset state)
    ids = _ids(s)
    with_ctx = score_sequence(model, ids)[130, 0]
    fresh = score_sequence(model, ids[130:])[0, 0]
    assert float(lines[starts.index(130)].split("\t")[3]) == pytest.approx(with_ctx, abs=1e-4)
    assert abs(with_ctx - fresh) > 1e-4


def test_stdin_gives_the_same_output(model_dir, fasta, tmp_path, monkeypatch):
    scan(ScanArgs(model_dir, [fasta], str(tmp_path / "a.bedGraph"), chunk=100))
    data = Path(fasta).read_bytes()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BufferedReader(io.BytesIO(data))))
    scan(ScanArgs(model_dir, ["-"], str(tmp_path / "b.bedGraph"), chunk=100, workers=2))  # stdin: one worker
    assert (tmp_path / "a.bedGraph").read_bytes() == (tmp_path / "b.bedGraph").read_bytes()


def test_window_aggregation_is_the_mean_of_scored_bases(model, model_dir, fasta, records, tmp_path):
    W = 50
    scan(ScanArgs(model_dir, [fasta], str(tmp_path / "w.bedGraph"), chunk=64, window=W, track=["entropy"]))
    ids = _ids(records["chr1"])
    ent = score_sequence(model, ids)[:, 1].astype(np.float64)
    s, e, v = read_region(str(tmp_path / "w.bedGraph"), "chr1")
    ref = [(a, min(a + W, len(ids)), np.nanmean(ent[a : a + W])) for a in range(0, len(ids), W)]
    assert s.tolist() == [r[0] for r in ref] and e.tolist() == [r[1] for r in ref]  # last window cut
    np.testing.assert_allclose(v, [r[2] for r in ref], atol=1e-5)
    s2, _, _ = read_region(str(tmp_path / "w.bedGraph"), "chr2")
    assert s2.tolist() == [0]  # 8 scored bases, one partial window


def test_strand_average_realigns_the_reverse_complement(model, model_dir, tmp_path):
    rng = np.random.default_rng(3)
    s = _seq(rng, 120) + "NNN" + _seq(rng, 61)
    ids = _ids(s)
    rc_ids = COMPLEMENT[ids[::-1]]
    fa = _write_fasta(tmp_path / "r.fa", {"r": s})
    out = tmp_path / "avg.bedGraph"
    scan(ScanArgs(model_dir, [fa], str(out), chunk=50, strand_average=True, track=list(TRACKS)))
    fwd, rc = score_sequence(model, ids), score_sequence(model, rc_ids)
    n = len(ids)
    for t, col in enumerate(TRACKS):  # base b on the forward strand is comp(b) on the reverse strand
        rc_col = {"A": "T", "C": "G", "G": "C", "T": "A"}.get(col, col)
        expect = (fwd[:, t] + rc[::-1, TRACKS.index(rc_col)]) / 2
        got = _bedgraph(tmp_path / f"avg.{col}.bedGraph")["r"]
        assert sorted(got) == np.flatnonzero(ids != N).tolist()
        np.testing.assert_allclose([got[p] for p in sorted(got)], expect[ids != N], atol=1e-4)
    # symmetry: the averaged logprob of the reverse complement is the mirror image
    fa2 = _write_fasta(tmp_path / "rc.fa", {"r": TOK.decode(rc_ids)})
    scan(ScanArgs(model_dir, [fa2], str(tmp_path / "avg_rc.bedGraph"), chunk=50, strand_average=True))
    a, b = _bedgraph(tmp_path / "avg.logprob.bedGraph")["r"], _bedgraph(tmp_path / "avg_rc.bedGraph")["r"]
    assert all(abs(a[p] - b[n - 1 - p]) < 1e-4 for p in a)


def test_wig_coordinates_are_1_based(model_dir, fasta, tmp_path):
    scan(ScanArgs(model_dir, [fasta], str(tmp_path / "o.bedGraph"), chunk=100))
    scan(ScanArgs(model_dir, [fasta], str(tmp_path / "o.wig"), chunk=100, format="wig"))
    wig = (tmp_path / "o.wig").read_text()
    assert wig.startswith("fixedStep chrom=chr1 start=1 step=1 span=1\n")
    assert "fixedStep chrom=chr1 start=458 " in wig  # after 420 bases + 37 N: 0-based 457
    for chrom in ("chr1", "chr2", "chr3"):
        b, w = read_region(str(tmp_path / "o.bedGraph"), chrom), read_region(str(tmp_path / "o.wig"), chrom)
        assert b[0].tolist() == w[0].tolist() and b[1].tolist() == w[1].tolist()
        np.testing.assert_allclose(b[2], w[2])


@pytest.mark.parametrize(
    "stop,kw",
    [
        pytest.param(1, {}, id="kill-after-1-chunk"),
        pytest.param(5, {"window": 30, "track": ["logprob", "A"]}, id="kill-mid-record-window"),
        pytest.param(9, {"format": "wig"}, id="kill-late-wig"),
        pytest.param(2, {"strand_average": True}, id="kill-strand-average"),
    ],
)
def test_resume_after_kill_is_byte_identical(model_dir, fasta, tmp_path, monkeypatch, stop, kw):
    name = "o.wig" if kw.get("format") == "wig" else "o.bedGraph"
    ref = tmp_path / "ref" / name
    scan(ScanArgs(model_dir, [fasta], str(ref), chunk=64, summary=str(ref) + ".tsv", **kw))
    out = tmp_path / "run" / name
    kill_after(monkeypatch, stop)
    with pytest.raises(Killed):
        scan(ScanArgs(model_dir, [fasta], str(out), chunk=64, checkpoint_every=0, summary=str(out) + ".tsv", **kw))
    work = out.with_name(f".{name}.scan")
    assert work.is_dir() and not any(p.name.startswith(name) for p in out.parent.iterdir())
    for part in work.glob("part*"):  # bytes written after the last checkpoint must be dropped
        with open(part, "ab") as f:
            f.write(b"garbage from the killed run\n")
    monkeypatch.undo()
    scan(
        ScanArgs(
            model_dir, [fasta], str(out), chunk=64, checkpoint_every=0, summary=str(out) + ".tsv", resume=True, **kw
        )
    )
    names = sorted(p.name for p in ref.parent.iterdir())
    assert names == sorted(p.name for p in out.parent.iterdir())
    for name in names:
        assert (out.parent / name).read_bytes() == (ref.parent / name).read_bytes(), name


def _rss_mb() -> float:
    status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
    return int(status["VmRSS"].split()[0]) / 1024


def test_memory_stays_flat_over_many_records_of_distinct_lengths(model_dir, tmp_path):
    """Each record ends in a chunk of a new length; per-shape caches (oneDNN) must not grow with them."""
    fa = _write_fasta(tmp_path / "many.fa", {f"r{i}": "ACGT" * (10 + i) for i in range(300)})
    scan(ScanArgs(model_dir, [fa], str(tmp_path / "warm.bedGraph"), chunk=64))
    before = _rss_mb()
    scan(ScanArgs(model_dir, [fa], str(tmp_path / "o.bedGraph"), chunk=4096))  # 300 new lengths
    assert _rss_mb() - before < 40  # measured: +8.5 MB; with oneDNN on, +100 MB
    assert torch.backends.mkldnn.enabled  # restored after the scan


def test_bad_input_one_line_exit_2_no_output(model_dir, tmp_path, capsys):
    bad = tmp_path / "bad.fa"
    bad.write_text(">ok\n" + "ACGT" * 100 + "\n>broken\nACGT\nACXT\n")
    out = tmp_path / "o.bedGraph"
    with pytest.raises(FastaError, match="broken"):
        scan(ScanArgs(model_dir, [str(bad)], str(out), chunk=64))
    assert list(tmp_path.iterdir()) == [bad]  # no output, no work folder
    for argv in (
        ["scan", model_dir, str(bad), "-o", str(out)],
        ["scan", model_dir, str(tmp_path / "missing.fa"), "-o", str(out)],
        ["scan", str(tmp_path / "nomodel"), str(bad), "-o", str(out)],
        ["scan", model_dir, str(bad), "-o", str(out), "--window", "0"],
        ["scan", model_dir, str(bad)],
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("strandline scan: error:"), err
    assert list(tmp_path.iterdir()) == [bad]


@pytest.mark.slow  # spawns two worker processes (torch import in each)
def test_workers_merge_in_input_order(model_dir, fasta, tmp_path, records):
    fa2 = _write_fasta(tmp_path / "h.fa", {"p1": "ACGT" * 40, "p2": "GGCC" * 30})
    kw = {"chunk": 64, "track": ["logprob", "entropy"], "summary": None}
    scan(ScanArgs(model_dir, [fasta, fa2], str(tmp_path / "one" / "o.bedGraph"), **kw))
    recs = scan(ScanArgs(model_dir, [fasta, fa2], str(tmp_path / "two" / "o.bedGraph"), workers=2, **kw))
    assert [r.name for r in recs] == [*records, "p1", "p2"]
    for name in ("o.logprob.bedGraph", "o.entropy.bedGraph"):
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes()


@pytest.mark.skipif(shutil.which("bedtools") is None, reason="bedtools not installed (apt-get install bedtools)")
def test_bedtools_accepts_the_scan_bedgraph(model_dir, fasta, tmp_path, records):
    out = tmp_path / "o.bedGraph"
    scan(ScanArgs(model_dir, [fasta], str(out), chunk=100, window=25))
    r = subprocess.run(["bedtools", "merge", "-i", str(out), "-c", "4", "-o", "count"], capture_output=True, text=True)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    lengths = {c: int(e) for c, _, e, _ in (line.split("\t") for line in r.stdout.splitlines())}
    assert lengths == {"chr1": len(records["chr1"]), "chr2": 10, "chr3": 333}  # windows end at the record end


def test_bigwig_output_reads_back(model, model_dir, fasta, records, tmp_path):
    pbw = pytest.importorskip("pyBigWig", reason="pyBigWig (the bigwig extra) is not installed")
    scan(ScanArgs(model_dir, [fasta], str(tmp_path / "o.bw"), chunk=100, format="bigwig"))
    bw = pbw.open(str(tmp_path / "o.bw"))
    assert bw.chroms() == {k: len(v) for k, v in records.items() if v}
    ids = _ids(records["chr3"])
    vals = np.array([iv[2] for iv in bw.intervals("chr3")], np.float32)
    np.testing.assert_allclose(vals, score_sequence(model, ids)[:, 0], atol=1e-4)
    bw.close()
    s, e, v = read_region(str(tmp_path / "o.bw"), "chr3:10-20")
    assert s.tolist() == list(range(10, 20)) and e.tolist() == list(range(11, 21))
    np.testing.assert_array_equal(v, vals[10:20])


def test_cli_scan_and_plot(model_dir, fasta, tmp_path):
    out, png = tmp_path / "o.bedGraph", tmp_path / "o.png"
    assert main(["scan", model_dir, fasta, "--strand-average", "-o", str(tmp_path / "sa.bedGraph")]) == 0
    argv = ["scan", model_dir, fasta, "-o", str(out), "--chunk", "100", "--plot", str(png)]
    assert main(argv) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["plot", str(out), "chr3", str(tmp_path / "p.png")]) == 0
    assert (tmp_path / "p.png").stat().st_size > 1000
    png.unlink()
    assert main([*argv, "--region", "chr1:0-300"]) == 0  # the scan covers the region, and the plot draws it
    assert png.stat().st_size > 1000 and {c for c, *_ in iter_intervals(out)} == {"chr1"}


@pytest.mark.slow
def test_sigkill_then_resume_via_cli(model_dir, fasta, tmp_path):
    """A real SIGKILL mid-scan (subprocess), then --resume: the output equals an uninterrupted run."""
    big = _write_fasta(tmp_path / "big.fa", {f"c{i}": "ACGTTGCAAG" * 800 for i in range(4)})
    args = [
        sys.executable,
        "-m",
        "strandline.app.cli",
        "scan",
        model_dir,
        big,
        "--chunk",
        "256",
        "--checkpoint_every",
        "0",
    ]
    args += ["--threads", "1"]
    subprocess.run([*args, "-o", str(tmp_path / "ref.bedGraph")], check=True, cwd=ROOT)
    out = tmp_path / "o.bedGraph"
    p = subprocess.Popen([*args, "-o", str(out)], cwd=ROOT)
    work = tmp_path / ".o.bedGraph.scan"
    while not list(work.glob("state*")) and p.poll() is None:
        time.sleep(0.05)
    time.sleep(0.3)
    assert p.poll() is None, "the scan finished before it could be killed"
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    assert not out.exists()
    subprocess.run([*args, "-o", str(out), "--resume"], check=True, cwd=ROOT)
    assert out.read_bytes() == (tmp_path / "ref.bedGraph").read_bytes()


@pytest.mark.slow
def test_lightning_ddp_predict_two_ranks(model_dir, fasta, tmp_path):
    """Lightning predict with DDP on 2 CPU processes: whole records per rank, merged in input order."""
    ref = tmp_path / "ref.bedGraph"
    scan(ScanArgs(model_dir, [fasta], str(ref), chunk=64, summary=str(tmp_path / "ref.tsv")))
    out = tmp_path / "ddp.bedGraph"
    argv = ["scan", model_dir, fasta, "-o", str(out), "--chunk", "64", "--devices", "2", "--summary"]
    r = subprocess.run(
        [sys.executable, "-m", "strandline.app.cli", *argv, str(tmp_path / "ddp.tsv")], cwd=ROOT, timeout=600
    )
    assert r.returncode == 0
    assert out.read_bytes() == ref.read_bytes()
    assert (tmp_path / "ddp.tsv").read_text() == (tmp_path / "ref.tsv").read_text()
    assert json.dumps(sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("."))) == "[]"
