"""Track formats as records: every registered format round-trips through its writer, finish step and the reader,
and the scan asks the format rather than naming it (a new format plugs in with no change to tasks/scan)."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import numpy as np
import pytest
from test_scan import _write_fasta, save_tiny_model

import strandline.tasks.scan as scan_package
from strandline.data.track_writers import BedGraphWriter, IntervalWriter
from strandline.data.tracks import (
    INTERVAL_DTYPE,
    TRACK_FORMATS,
    PartFileError,
    PartSpan,
    TrackFormat,
    format_for_path,
    iter_intervals,
    track_format,
)
from strandline.tasks.scan import ScanArgs, ScanError, scan

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread is faster

SCAN_DIR = Path(scan_package.__file__).parent
# three records over two shards' parts, output order a, b, c: (name, length, [(start, end) written per call])
RECORDS = [("a", 40, [(0, 10), (10, 25), (30, 40)]), ("b", 12, [(2, 12)]), ("c", 9, [(0, 9)])]
SHARD_OF = {"a": 0, "b": 1, "c": 0}


def _formats() -> list:
    return [pytest.param(f, id=name) for name, f in TRACK_FORMATS.items()]


def _needs(fmt: TrackFormat) -> None:
    if fmt.unavailable():
        pytest.skip(fmt.unavailable())


def _write_parts(fmt: TrackFormat, folder: Path, shards: int) -> tuple[list[PartSpan], dict]:
    """Write RECORDS with ``fmt``'s writer into ``shards`` part files; the spans in output order and the truth."""
    parts = [folder / f"part{k}.logprob{fmt.part_suffix}" for k in range(shards)]
    fhs = [open(p, "wb") for p in parts]  # noqa: SIM115 - closed below
    writers = [fmt.writer(fh) for fh in fhs]
    spans, truth, value = [], {}, 0
    for name, length, calls in RECORDS:
        k = SHARD_OF[name] % shards
        start = fhs[k].tell()
        for a, b in calls:  # distinct values (exact in %.6g): no bedGraph run merges, so intervals come back as is
            vals = (np.arange(value, value + b - a) * 0.25 - 3).astype(np.float32)
            writers[k].write(name, np.arange(a, b), np.arange(a, b) + 1, vals)
            truth.setdefault(name, []).extend(zip(range(a, b), vals.tolist(), strict=True))
            value += b - a
        writers[k].end_record()
        spans.append(PartSpan(name, length, parts[k], start, fhs[k].tell() - start))
    for fh in fhs:
        fh.close()
    return spans, truth


def _read_back(path: Path) -> dict:
    got: dict = {}
    for chrom, s, e, v in iter_intervals(path):
        assert (e - s == 1).all()
        got.setdefault(chrom, []).extend(zip(s.tolist(), v.tolist(), strict=True))
    return got


@pytest.mark.parametrize("shards", [1, 2], ids=["one-shard", "two-shards"])
@pytest.mark.parametrize("fmt", _formats())
def test_every_format_round_trips_through_writer_finish_and_reader(fmt, shards, tmp_path):
    _needs(fmt)
    spans, truth = _write_parts(fmt, tmp_path, shards)
    out = tmp_path / f"out{fmt.extension}"
    fmt.finish(out, spans, whole=spans[0].path if shards == 1 else None)
    assert _read_back(out) == truth
    assert format_for_path(out) == fmt.name and track_format(fmt.name) is fmt


@pytest.mark.parametrize("fmt", [f for f in _formats() if f.values[0].streams])
def test_a_streaming_format_writes_the_same_bytes_to_stdout(fmt, tmp_path, capsysbinary):
    spans, _ = _write_parts(fmt, tmp_path, 2)
    fmt.finish(tmp_path / "file", spans)
    capsysbinary.readouterr()
    fmt.finish(None, spans)
    assert capsysbinary.readouterr().out == (tmp_path / "file").read_bytes()
    short = [spans[0]._replace(nbytes=spans[0].nbytes + 10_000)]
    with pytest.raises(PartFileError, match="part file ends early"):
        fmt.finish(tmp_path / "short", short)
    assert not (tmp_path / "short").exists()


def test_the_registry_is_consistent():
    part_suffixes = [f.part_suffix for f in TRACK_FORMATS.values()]
    assert len(set(part_suffixes)) == len(part_suffixes)  # parts of one folder never collide across formats
    for name, f in TRACK_FORMATS.items():
        assert f.name == name and f.extension.lower() in f.suffixes
        assert all(s == s.lower() and s.startswith(".") for s in f.suffixes)
        if not f.streams:
            with pytest.raises(ValueError, match="stdout"):
                f.finish(None, [])


def _names_in(path: Path) -> tuple[set[str], set[str]]:
    """(string constants, names imported from strandline.data.tracks*) of one module."""
    tree = ast.parse(path.read_text())
    consts = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    imported = {
        a.name
        for n in ast.walk(tree)
        if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("strandline.data.track")
        for a in n.names
    }
    return consts, imported


def test_the_scan_code_names_no_format():
    specific = {"BEDGRAPH", "WIG", "BIGWIG", "BigWigFormat", "BedGraphWriter", "WigWriter", "IntervalWriter",
                "write_bigwig", "require_pybigwig", "EXTENSIONS", "SUFFIXES"}  # fmt: skip
    words = {w for f in TRACK_FORMATS.values() for w in (f.name, f.title, f.extension, f.part_suffix, *f.suffixes)}
    for path in sorted(SCAN_DIR.glob("*.py")):
        consts, imported = _names_in(path)
        assert not {c.lower() for c in consts} & {w.lower() for w in words}, path.name
        assert not imported & specific, path.name


class _LengthsFormat(TrackFormat):
    """A toy staged format: intervals staged as binary, finished into ``name length intervals`` lines."""

    def finish(self, out, spans, whole=None) -> None:
        n = [s.nbytes // INTERVAL_DTYPE.itemsize for s in spans]
        out.write_text("".join(f"{s.name}\t{s.length}\t{k}\n" for s, k in zip(spans, n, strict=True)))


class _Unavailable(TrackFormat):
    def unavailable(self) -> str | None:
        return "TSV needs a thing"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("m"))


def test_a_new_format_needs_no_change_in_the_scan(model_dir, tmp_path, monkeypatch):
    fasta = _write_fasta(tmp_path / "g.fa", {"r1": "ACGTNNACGGT" * 20, "r2": "", "r3": "TTGCA" * 9})
    scan(ScanArgs(model_dir, [fasta], str(tmp_path / "ref.bedGraph"), chunk=50))
    tsv = TrackFormat("tsv", "TSV", ".tsv", (".tsv",), ".tsvpart", BedGraphWriter)
    lengths = _LengthsFormat("lengths", "lengths table", ".len", (".len",), ".lenpart", IntervalWriter, streams=False)
    monkeypatch.setitem(TRACK_FORMATS, "tsv", tsv)
    monkeypatch.setitem(TRACK_FORMATS, "lengths", lengths)
    records = scan(ScanArgs(model_dir, [fasta], str(tmp_path / "o.tsv"), chunk=50))  # the format from the name
    assert (tmp_path / "o.tsv").read_bytes() == (tmp_path / "ref.bedGraph").read_bytes()
    scan(ScanArgs(model_dir, [fasta], str(tmp_path / "o.len"), chunk=50, workers=1))
    assert (tmp_path / "o.len").read_text() == "".join(f"{r.name}\t{r.length}\t{r.scored}\n" for r in records)
    assert not list(tmp_path.glob(".*.scan"))  # the work folders, parts named by the formats, were removed
    with pytest.raises(ScanError, match=r"^lengths table cannot be written to stdout .* give a \.len file name$"):
        scan(ScanArgs(model_dir, [fasta], "-", format="lengths"))
    monkeypatch.setitem(TRACK_FORMATS, "tsv", _Unavailable(*dataclasses.astuple(tsv)))
    with pytest.raises(ScanError, match="^TSV needs a thing$"):
        scan(ScanArgs(model_dir, [fasta], str(tmp_path / "p.tsv")))


@pytest.mark.parametrize("name", ["x.bedGraph.gz", "x.WIG.gz"])
@pytest.mark.parametrize("shards", [1, 2], ids=["one-shard", "two-shards"])
def test_a_gz_output_is_bgzf_that_reads_back_the_same(name, shards, tmp_path):
    """``-o x.bedGraph.gz`` is BGZF (block gzip, what tabix indexes), not plain text under a .gz name."""
    import gzip

    from Bio import bgzf

    from strandline.data.tracks import format_for_path

    fmt = TRACK_FORMATS[format_for_path(name)]
    spans, truth = _write_parts(fmt, tmp_path, shards)
    plain, packed = tmp_path / "plain.out", tmp_path / name
    fmt.finish(plain, spans)
    fmt.finish(packed, spans)
    raw = packed.read_bytes()
    assert raw[:4] == b"\x1f\x8b\x08\x04" and b"BC" in raw[12:16]  # gzip with the BGZF extra field
    assert raw.endswith(bgzf._bgzf_eof)  # the empty end-of-file block tabix looks for
    assert gzip.decompress(raw) == plain.read_bytes()
    assert _read_back(packed) == truth


@pytest.mark.parametrize(
    ("output", "fmt", "words"),
    [
        ("x.bed", None, "'.bed' is not a bedGraph extension"),
        ("x.txt", None, "'.txt' is not a bedGraph extension"),
        ("x.wig", "bedgraph", "the name says wig"),
        ("x.bw.gz", None, "compressed already"),
        ("x.bedgraph.gz", "wig", "the name says bedgraph"),
    ],
)
def test_an_output_name_that_does_not_fit_its_format_is_refused(output, fmt, words, model_dir, tmp_path):
    fasta = _write_fasta(tmp_path / "g.fa", {"r": "ACGT" * 10})
    args = ScanArgs(str(model_dir), [str(fasta)], str(tmp_path / output), format=fmt)
    with pytest.raises(ScanError, match=words.replace(".", r"\.")):
        scan(args, progress=False)
    assert not list(tmp_path.glob("x*"))


def test_several_gz_tracks_keep_the_gz_last(tmp_path):
    from strandline.tasks.scan import track_paths

    got = track_paths(str(tmp_path / "o.bedGraph.gz"), ["logprob", "entropy"])
    assert [p.name for p in got] == ["o.logprob.bedGraph.gz", "o.entropy.bedGraph.gz"]


def test_a_truncated_gz_track_is_one_error(tmp_path):
    import gzip

    from strandline.data.tracks import TrackError, read_region

    data = gzip.compress(b"".join(b"r\t%d\t%d\t-2\n" % (i, i + 1) for i in range(20000)))
    path = tmp_path / "t.bedGraph.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(TrackError, match="damaged or truncated"):
        read_region(path, "r")


def test_a_track_line_is_one_line_of_clean_key_values():
    from strandline.data.tracks import track_line

    line = track_line("wig", 'my"track\n', 'model "x\\y"\r\nand more')
    assert line == b'track type=wiggle_0 name="mytrack" description="model xyand more"\n'
    assert track_line("bedgraph", "o", "d").startswith(b"track type=bedGraph ")


@pytest.mark.parametrize("name", ["o.bedGraph", "o.bedGraph.gz", "o.wig"])
def test_scan_track_line_heads_each_output_and_reads_back(model_dir, tmp_path, name):
    import gzip

    fasta = _write_fasta(tmp_path / "g.fa", {"r": "ACGTTGCA" * 30})
    plain = tmp_path / "plain" / name
    plain.parent.mkdir()
    scan(ScanArgs(str(model_dir), [str(fasta)], str(plain)), progress=False)
    out = tmp_path / name
    scan(ScanArgs(str(model_dir), [str(fasta)], str(out), track_line=True), progress=False)
    read = gzip.decompress if name.endswith(".gz") else (lambda b: b)
    first, rest = read(out.read_bytes()).split(b"\n", 1)
    assert first.startswith(b"track type=") and b'name="o"' in first
    assert rest == read(plain.read_bytes())
    assert _read_back(out) == _read_back(plain)


def test_track_line_with_bigwig_is_refused(model_dir, tmp_path):
    fasta = _write_fasta(tmp_path / "g.fa", {"r": "ACGT" * 10})
    with pytest.raises(ScanError, match="no track line"):
        scan(ScanArgs(str(model_dir), [str(fasta)], str(tmp_path / "o.bw"), track_line=True), progress=False)
