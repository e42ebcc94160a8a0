"""Hostile inputs to the readers and to the names they carry: record names that track files cannot hold,
training caches fooled by links, annotations that count the wrong bases, encodings and compressions named
as "binary", and track files that pyBigWig cannot read. Each case: the right answer, or one line and exit 2
before any work, with no output left behind."""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path

import numpy as np
import pytest
from Bio import SeqIO
from Bio.Seq import Seq
from Bio.SeqFeature import CompoundLocation, SeqFeature, SimpleLocation
from Bio.SeqRecord import SeqRecord
from test_scan import _write_fasta, save_tiny_model

import strandline.tasks.scan.job
from strandline.app.cli import main
from strandline.data.annotations import INTERGENIC, AnnotationError, load_features
from strandline.data.dna import GenomeCache
from strandline.data.fasta import FastaError, read_fasta
from strandline.data.fasta_survey import survey
from strandline.data.tracks import TrackError, read_region
from strandline.tasks.scan import ScanArgs, scan

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread is faster

RNG = np.random.default_rng(3)


def _dna(n: int) -> str:
    return "".join(RNG.choice(list("ACGT"), n))


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("m"))


@pytest.fixture
def no_scoring(monkeypatch):
    """Fail loudly if the model scores anything: the check under test must come before the scan."""
    monkeypatch.setattr(
        strandline.tasks.scan.job, "score_chunk", lambda *a, **k: pytest.fail("scanned before refusing")
    )


def _one_line_error(argv, capfd) -> str:
    """Run the CLI; exit 2, exactly one line on stderr (file descriptor 2 included), no traceback."""
    assert main(argv) == 2
    err = capfd.readouterr().err
    assert err.count("\n") == 1 and err.startswith("strandline ") and "Traceback" not in err, err
    return err


def _left(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(("out", ".out")))


# ---- record names that bedGraph/WIG/bigWig cannot hold -------------------------------------------------
HEADER_NAMES = [
    pytest.param("track", id="track"),
    pytest.param("browser", id="browser"),
    pytest.param("#chr2", id="hash"),
    pytest.param("fixedStep", id="fixedStep"),
    pytest.param("variableStep", id="variableStep"),
    pytest.param("chr\x00b", id="NUL"),
    pytest.param("chr\x01b", id="control"),
    pytest.param("chr\x7fb", id="DEL"),
    pytest.param("chr\u200bb", id="zero-width"),
]


@pytest.mark.parametrize("name", HEADER_NAMES)
def test_record_name_a_track_cannot_hold_is_refused_before_any_base(model_dir, tmp_path, capfd, no_scoring, name):
    fa = tmp_path / "g.fa"  # the bad name is the second record: every name is checked before the first base
    fa.write_bytes(f">chr1\n{_dna(120)}\n>{name} desc\n{_dna(80)}\n".encode())
    argv = ["scan", model_dir, str(fa), "-o", str(tmp_path / "out.bedGraph"), "--summary", str(tmp_path / "out.tsv")]
    err = _one_line_error(argv, capfd)
    assert repr(name) in err and "rename the record" in err
    assert _left(tmp_path) == []


def test_genbank_record_named_track_is_refused(model_dir, tmp_path, capfd, no_scoring):
    rec = SeqRecord(Seq(_dna(200)), id="track", name="track", description="x", annotations={"molecule_type": "DNA"})
    gb = tmp_path / "g.gb"
    SeqIO.write([rec], gb, "genbank")
    err = _one_line_error(["scan", model_dir, str(gb), "-o", str(tmp_path / "out.wig")], capfd)
    assert "'track' is a track header word" in err and _left(tmp_path) == []


def test_stdin_record_named_browser_is_refused_with_no_output(model_dir, tmp_path, capfd, monkeypatch):
    data = f">browser\n{_dna(100)}\n".encode()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    err = _one_line_error(["scan", model_dir, "-", "-o", str(tmp_path / "out.bedGraph")], capfd)
    assert "-: record 'browser'" in err and _left(tmp_path) == []


def test_dollar_signs_in_a_record_name_reach_the_plot_as_text(model_dir, tmp_path):
    fa = _write_fasta(tmp_path / "g.fa", {"a$\\frac$x": _dna(60)})  # '$...$' is matplotlib math mode
    png = tmp_path / "p.png"
    scan(ScanArgs(model_dir, [fa], str(tmp_path / "o.bedGraph"), plot=str(png)), progress=False)
    assert png.read_bytes()[:4] == b"\x89PNG"


# ---- the training cache: keyed on the file, not the link's name -----------------------------------------
def _same_size_and_mtime(*paths: Path) -> None:
    for p in paths:
        os.utime(p, ns=(1_600_000_000_000_000_000, 1_600_000_000_000_000_000))


def test_links_of_one_name_to_different_files_never_share_a_cache(tmp_path):
    (tmp_path / "x").mkdir()
    one, two = tmp_path / "x/one.fa", tmp_path / "x/two.fa"
    one.write_text(">chr1\n" + "A" * 500 + "\n")
    two.write_text(">chr1\n" + "C" * 500 + "\n")  # same size
    _same_size_and_mtime(one, two)
    for d, target in (("a", one), ("b", two)):
        (tmp_path / d).mkdir()
        (tmp_path / d / "genome.fa").symlink_to(target)
    a, b = GenomeCache(tmp_path / "a/genome.fa"), GenomeCache(tmp_path / "b/genome.fa")
    assert a.data_path != b.data_path
    np.testing.assert_array_equal(b.fetch("chr1", 0, 500), read_fasta(two)["chr1"])
    np.testing.assert_array_equal(a.fetch("chr1", 0, 500), read_fasta(one)["chr1"])


def test_a_cache_is_rebuilt_for_other_bytes_of_the_same_size_and_mtime(tmp_path):
    fa = tmp_path / "g.fa"
    fa.write_text(">chr1\n" + "A" * 500 + "\n")
    _same_size_and_mtime(fa)
    GenomeCache(fa)
    fa.write_text(">chr1\n" + "G" * 500 + "\n")  # in place: same inode, size and (restored) mtime
    _same_size_and_mtime(fa)
    np.testing.assert_array_equal(GenomeCache(fa).fetch("chr1", 0, 500), read_fasta(fa)["chr1"])


# ---- annotations: only this record's bases, the user's own type names ------------------------------------
def test_genbank_join_parts_on_another_record_are_not_this_records_bases(tmp_path):
    rec = SeqRecord(Seq(_dna(2000)), id="THIS.1", name="THIS", description="x", annotations={"molecule_type": "DNA"})
    parts = [SimpleLocation(0, 1000, 1, ref="OTHER.1"), SimpleLocation(100, 1100, 1)]
    rec.features.append(SeqFeature(CompoundLocation(parts), type="CDS"))
    rec.features.append(SeqFeature(SimpleLocation(0, 500, 1, ref="OTHER.1"), type="tRNA"))  # wholly elsewhere
    gb = tmp_path / "a.gb"
    SeqIO.write([rec], gb, "genbank")
    feats = load_features(str(gb), {"THIS.1": 2000})["THIS.1"]
    starts, ends, _ = feats["CDS"]
    assert (starts.tolist(), ends.tolist()) == ([100], [1100])
    assert "tRNA" not in feats
    assert (feats[INTERGENIC][1] - feats[INTERGENIC][0]).sum() == 1000


def _gff3(path: Path, lines: list[str], newline: str = "\n") -> str:
    path.write_bytes(newline.join(["##gff-version 3", *lines, ""]).encode())
    return str(path)


def test_a_gff3_type_named_intergenic_keeps_its_name_beside_the_computed_complement(tmp_path):
    gff = _gff3(tmp_path / "a.gff3", ["c\tx\tintergenic\t1\t10\t.\t+\t.\t.", "c\tx\tCDS\t51\t60\t.\t+\t0\t."])
    feats = load_features(gff, {"c": 100})["c"]
    assert (feats["intergenic"][0].tolist(), feats["intergenic"][1].tolist()) == ([0], [10])  # the user's
    assert INTERGENIC != "intergenic"
    assert (feats[INTERGENIC][0].tolist(), feats[INTERGENIC][1].tolist()) == ([10, 60], [50, 100])  # computed


@pytest.mark.parametrize("newline", ["\r", "\r\n"], ids=["CR", "CRLF"])
def test_gff3_with_old_mac_or_windows_line_breaks_is_read(tmp_path, newline):
    gff = _gff3(tmp_path / "a.gff3", ["c\tx\tCDS\t11\t20\t.\t+\t0\tID=a", "c\tx\ttRNA\t31\t40\t.\t-\t.\t."], newline)
    feats = load_features(gff, {"c": 100})["c"]
    assert feats["CDS"][0].tolist() == [10] and feats["tRNA"][1].tolist() == [40]


# ---- encodings and compressions that are not "binary data" ---------------------------------------------
ZSTD_FASTA = bytes.fromhex("28b52ffd200d6900003e72310a41434754414347540a")  # zstd of b">r1\nACGTACGT\n"


def test_a_utf8_byte_order_mark_is_skipped(tmp_path):
    plain, bom = tmp_path / "plain.fa", tmp_path / "bom.fa"
    plain.write_bytes(b">chr1 x\nACGTN\n>chr2\nGG\n")
    bom.write_bytes(b"\xef\xbb\xbf" + plain.read_bytes())
    assert {k: v.tolist() for k, v in read_fasta(bom).items()} == {k: v.tolist() for k, v in read_fasta(plain).items()}
    assert [(r.name, r.length) for r in survey(str(bom))] == [("chr1", 5), ("chr2", 2)]


def test_utf16_text_is_named(tmp_path):
    fa = tmp_path / "u16.fa"
    fa.write_bytes(">chr1\nACGT\n".encode("utf-16"))
    with pytest.raises(FastaError, match="UTF-16 text"):
        survey(str(fa))


def test_zstd_without_zstandard_says_decompress_it_first(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "zstandard", None)  # import zstandard raises ImportError
    fa = tmp_path / "g.fa.zst"
    fa.write_bytes(ZSTD_FASTA)
    for read in (read_fasta, survey):
        with pytest.raises(FastaError, match=r"zstd-compressed; decompress it first \(zstd -d\)"):
            read(str(fa))


# ---- track files pyBigWig cannot read: one line, exit 2 --------------------------------------------------
def _bigwig(path: Path, chroms: list[tuple[str, int]], n: int = 50_000) -> Path:
    import pyBigWig

    bw = pyBigWig.open(str(path), "w")
    bw.addHeader(chroms)
    name, k = chroms[0][0], min(n, chroms[0][1])  # values on the first chromosome
    bw.addEntries([name] * k, list(range(k)), ends=list(range(1, k + 1)), values=RNG.random(k).tolist())
    bw.close()
    return path


def _plot_error(track: Path, region: str, capfd) -> str:
    err = _one_line_error(["plot", str(track), region, str(track.parent / "out.png")], capfd)
    assert _left(track.parent) == []
    return err


def test_plot_of_a_truncated_bigwig_is_one_line(tmp_path, capfd):
    data = _bigwig(tmp_path / "whole.bw", [("chr1", 100_000)]).read_bytes()
    cut = tmp_path / "cut.bw"
    cut.write_bytes(data[: len(data) // 3])
    assert "truncated or corrupt bigWig" in _plot_error(cut, "chr1:0-100", capfd)


def test_plot_of_a_bigwig_with_a_corrupt_data_block_is_one_line(tmp_path, capfd):
    data = bytearray(_bigwig(tmp_path / "whole.bw", [("chr1", 100_000)]).read_bytes())
    data[5000:5064] = bytes(64)
    bad = tmp_path / "bad.bw"
    bad.write_bytes(bytes(data))
    assert "truncated or corrupt bigWig" in _plot_error(bad, "chr1", capfd)


def test_bigwig_names_that_differ_only_after_a_nul_are_refused(tmp_path, capfd):
    bw = _bigwig(tmp_path / "nul.bw", [("chr\x00a", 1000), ("chr\x00b", 500)], n=10)  # as another tool may write
    assert "differ only after a NUL" in _plot_error(bw, "chr:0-10", capfd)


# ---- found by hunting: checked by the survey before the first base ---------------------------------------
@pytest.mark.parametrize(
    "second, msg",
    [
        pytest.param(b">r2\nACGT\nAC#GT\n", "record 'r2' line 5: invalid character '#'", id="invalid-base"),
        pytest.param(b">r2 caf\xe9\nACGT\n", "is not text", id="latin1-header"),
    ],
)
def test_a_bad_later_record_is_refused_before_any_base(model_dir, tmp_path, capfd, no_scoring, second, msg):
    fa = tmp_path / "g.fa"
    fa.write_bytes(b">r1\n" + _dna(100).encode() + b"\n" + second)  # r1 is several chunks: scanned before r2 is read
    argv = ["scan", model_dir, str(fa), "-o", str(tmp_path / "out.bedGraph"), "--chunk", "16"]
    assert msg in _one_line_error(argv, capfd)
    assert _left(tmp_path) == []


def test_the_survey_caps_a_header_line_like_the_reader(tmp_path):
    fa = tmp_path / "g.fa"
    fa.write_bytes(b">" + b"x" * (2 << 20) + b"\nACGT\n")  # a 2 MiB "header": not FASTA
    with pytest.raises(FastaError, match="header line longer than"):
        survey(str(fa))


def test_a_truncated_gzip_genbank_is_one_line(tmp_path):
    import gzip

    recs = [SeqRecord(Seq(_dna(4000)), id=f"R{i}.1", annotations={"molecule_type": "DNA"}) for i in range(3)]
    SeqIO.write(recs, tmp_path / "g.gb", "genbank")
    data = gzip.compress((tmp_path / "g.gb").read_bytes())
    cut = tmp_path / "cut.gb.gz"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(FastaError, match="truncated or corrupt compressed file"):
        survey(str(cut))
    with pytest.raises(FastaError, match="truncated or corrupt compressed file"):
        load_features(str(cut), {"R0.1": 4000})


def test_a_genbank_record_without_sequence_is_named(tmp_path):
    rec = SeqRecord(Seq(None, length=100), id="WGS1.1", annotations={"molecule_type": "DNA"})
    SeqIO.write([rec], tmp_path / "m.gb", "genbank")
    with pytest.raises(FastaError, match="record 'WGS1.1' has no sequence"):
        survey(str(tmp_path / "m.gb"))


# ---- found by hunting: annotation and track coordinates --------------------------------------------------
def test_a_feature_past_the_end_of_its_record_is_refused_not_clipped(tmp_path):
    gff = _gff3(tmp_path / "a.gff3", ["c\tx\tCDS\t51\t160\t.\t+\t0\t."])
    with pytest.raises(AnnotationError, match=r"CDS feature on 'c' ends at 160, past the record's end \(100 bases\)"):
        load_features(gff, {"c": 100})


@pytest.mark.parametrize("start, end", [("0", "10"), ("-4", "10"), ("20", "10")])
def test_gff3_zero_negative_or_reversed_coordinates_are_named(tmp_path, start, end):
    gff = _gff3(tmp_path / "a.gff3", [f"c\tx\tCDS\t{start}\t{end}\t.\t?\t0\t."])
    with pytest.raises(AnnotationError, match=rf"line 2: bad GFF3 coordinates {start}\.\.{end}"):
        load_features(gff, {"c": 100})


@pytest.mark.parametrize(
    "name, text",
    [
        pytest.param("neg.bedGraph", "c\t-5\t3\t1.0\n", id="negative-start"),
        pytest.param("empty.bedGraph", "c\t5\t5\t1.0\n", id="empty-interval"),
        pytest.param("zero.wig", "fixedStep chrom=c start=0 step=1\n1.0\n", id="wig-start-0"),
    ],
)
def test_track_intervals_outside_the_record_are_refused(tmp_path, name, text):
    (tmp_path / name).write_text(text)
    with pytest.raises(TrackError, match=r"bad interval \["):
        read_region(tmp_path / name, "c")
