"""Track writers: coordinates (0- vs 1-based), run merging, window means, resumable state, bigWig, bedtools."""

import io
import shutil
import subprocess

import numpy as np
import pytest

from strandline.data.tracks import (
    BedGraphWriter,
    IntervalWriter,
    WigWriter,
    WindowMean,
    atomic_output,
    read_region,
    write_bigwig,
)


def _bedgraph(chunks, chrom="chr1") -> str:
    fh = io.BytesIO()
    w = BedGraphWriter(fh)
    for s, e, v in chunks:
        w.write(chrom, np.array(s), np.array(e), np.array(v, np.float32))
    w.end_record()
    return fh.getvalue().decode()


def test_bedgraph_is_0_based_and_merges_only_identical_adjacent_values():
    text = _bedgraph([([0, 1, 2, 5, 6], [1, 2, 3, 6, 7], [1.5, 1.5, 2.0, 2.0, 2.0])])
    # 0,1 merge; 2 differs; 5 is identical to 2 but a gap (3..5) separates them; 5,6 merge
    assert text == "chr1\t0\t2\t1.5\nchr1\t2\t3\t2\nchr1\t5\t7\t2\n"


def test_bedgraph_runs_continue_across_calls_and_state_round_trips():
    whole = _bedgraph([([0, 1, 2, 3], [1, 2, 3, 4], [1, 1, 1, 3])])
    split = _bedgraph([([0, 1], [1, 2], [1, 1]), ([2], [3], [1]), ([3], [4], [3])])
    assert split == whole == "chr1\t0\t3\t1\nchr1\t3\t4\t3\n"
    fh = io.BytesIO()
    w = BedGraphWriter(fh)
    w.write("c", np.array([0, 1]), np.array([1, 2]), np.array([4, 4], np.float32))
    w2 = BedGraphWriter(fh)  # a resumed writer continues the open run exactly
    w2.set_state(w.get_state())
    w2.write("c", np.array([2]), np.array([3]), np.array([4], np.float32))
    w2.end_record()
    assert fh.getvalue().decode() == "c\t0\t3\t4\n"


def test_wig_is_fixedstep_1_based_with_new_blocks_after_gaps_and_span_changes():
    fh = io.BytesIO()
    w = WigWriter(fh)
    w.write("chrX", np.array([0, 1]), np.array([1, 2]), np.array([0.5, 0.25], np.float32))
    w.write("chrX", np.array([2, 10]), np.array([3, 11]), np.array([1, 2], np.float32))
    w.write("chrX", np.array([20, 30]), np.array([30, 35]), np.array([3, 4], np.float32))
    w.end_record()
    assert fh.getvalue().decode().splitlines() == [
        "fixedStep chrom=chrX start=1 step=1 span=1", "0.5", "0.25", "1",
        "fixedStep chrom=chrX start=11 step=1 span=1", "2",
        "fixedStep chrom=chrX start=21 step=10 span=10", "3",
        "fixedStep chrom=chrX start=31 step=5 span=5", "4",
    ]  # fmt: skip


def test_wig_and_bedgraph_describe_the_same_bases(tmp_path):
    s = np.array([3, 4, 5, 9, 10])
    v = np.array([1, 2, 3, 4, 5], np.float32)
    for name, cls in (("t.bedGraph", BedGraphWriter), ("t.wig", WigWriter)):
        with open(tmp_path / name, "wb") as fh:
            w = cls(fh)
            w.write("c", s, s + 1, v)
            w.end_record()
    bs, be, bv = read_region(str(tmp_path / "t.bedGraph"), "c")
    ws, we, wv = read_region(str(tmp_path / "t.wig"), "c")
    assert bs.tolist() == ws.tolist() == s.tolist() and be.tolist() == we.tolist()
    assert bv.tolist() == wv.tolist() == v.tolist()
    assert "start=4 " in (tmp_path / "t.wig").read_text()  # 0-based 3 is WIG's 1-based 4


def _window_ref(values: np.ndarray, W: int):
    starts, ends, means = [], [], []
    for a in range(0, len(values), W):
        seg = values[a : a + W]
        if (~np.isnan(seg)).any():
            starts.append(a)
            ends.append(min(a + W, len(values)))
            means.append(np.nanmean(seg.astype(np.float64)))
    return starts, ends, np.array(means, np.float32)


@pytest.mark.parametrize("W,cuts", [(10, [7, 33, 34]), (4, [4, 8]), (25, [])], ids=["W10-odd", "W4-aligned", "W25"])
def test_window_mean_matches_reference_for_any_chunking(W, cuts):
    rng = np.random.default_rng(0)
    v = rng.normal(size=(97, 2)).astype(np.float32)
    v[40:60] = np.nan  # an N run: windows inside it are gaps, partial windows average what is left
    agg = WindowMean(W, 2)
    bounds = [0, *cuts, len(v)]
    got = [[], []]
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        if a > 0:  # resume from a saved state at every cut
            st = agg.get_state()
            agg = WindowMean(W, 2)
            agg.set_state(st)
        for t, out in enumerate(agg.add(a, v[a:b], len(v) if b == len(v) else None)):
            got[t].append(out)
    for t in range(2):
        s, e, m = (np.concatenate([g[i] for g in got[t]]) for i in range(3))
        rs, re_, rm = _window_ref(v[:, t], W)
        assert s.tolist() == rs and e.tolist() == re_
        np.testing.assert_allclose(m, rm, rtol=1e-6)


def test_bigwig_reads_back_identical(tmp_path):
    pbw = pytest.importorskip("pyBigWig", reason="pyBigWig (the bigwig extra) is not installed")
    rng = np.random.default_rng(1)
    recs = []
    path = tmp_path / "iv.bin"
    with open(path, "wb") as fh:
        w = IntervalWriter(fh)
        for name, n in (("chrA", 500), ("chrB", 77)):
            pos = np.sort(rng.choice(n, n // 2, replace=False))
            vals = rng.normal(size=len(pos)).astype(np.float32)
            off = fh.tell()
            w.write(name, pos, pos + 1, vals)
            recs.append((name, n, path, off, fh.tell() - off, pos, vals))
    write_bigwig(tmp_path / "t.bw", [r[:5] for r in recs])
    bw = pbw.open(str(tmp_path / "t.bw"))
    assert bw.chroms() == {"chrA": 500, "chrB": 77}
    for name, _n, *_, pos, vals in recs:
        iv = bw.intervals(name)
        assert [i[0] for i in iv] == pos.tolist() and [i[1] for i in iv] == (pos + 1).tolist()
        assert np.array([i[2] for i in iv], np.float32).tobytes() == vals.tobytes()  # bit-identical float32
    bw.close()


def test_atomic_output_leaves_nothing_on_failure(tmp_path):
    out = tmp_path / "x.bedGraph"
    with pytest.raises(RuntimeError), atomic_output(out) as tmp:
        tmp.write_text("partial")
        raise RuntimeError("killed")
    assert list(tmp_path.iterdir()) == []
    with atomic_output(out) as tmp:
        tmp.write_text("done")
    assert out.read_text() == "done"


@pytest.mark.skipif(shutil.which("bedtools") is None, reason="bedtools not installed (apt-get install bedtools)")
def test_bedtools_accepts_bedgraph(tmp_path):
    text = _bedgraph([([0, 1, 2, 7], [1, 2, 3, 8], [-1.5, -1.5, -2.25, -0.5])], chrom="chr1")
    text += _bedgraph([([0, 3], [3, 9], [0.125, 0.25])], chrom="chr2")
    p = tmp_path / "t.bedGraph"
    p.write_text(text)
    r = subprocess.run(["bedtools", "unionbedg", "-i", str(p), str(p)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    got = [line.split("\t")[:3] for line in r.stdout.splitlines()]
    assert got == [line.split("\t")[:3] for line in text.splitlines()]  # same intervals, nothing rejected
    r = subprocess.run(["bedtools", "merge", "-i", str(p), "-c", "4", "-o", "sum"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == "chr1\t0\t3\t-3.75"  # the merged run 0-2 counts once


def test_bed_rows_skip_headers_split_fields_and_name_bad_files(tmp_path):
    from strandline.data.tracks import TrackError, bed_rows

    bed = tmp_path / "x.bed"
    bed.write_text("track name=x\n# a comment\nbrowser position chr1\n\nchr1\t5\t9\tname with space\nchr2 1 3\n")
    assert list(bed_rows(bed, TrackError)) == [(5, ["chr1", "5", "9", "name with space"]), (6, ["chr2", "1", "3"])]
    bad = tmp_path / "bad.bed"
    bad.write_bytes(b"chr1\t1\t2\n\xff\xfe\n")
    with pytest.raises(TrackError, match=r"^--regions bad.bed: not a text BED file \(invalid UTF-8 at byte 9\)$"):
        list(bed_rows(bad, TrackError, "--regions bad.bed"))
    with pytest.raises(TrackError, match="cannot read it"):
        list(bed_rows(tmp_path, TrackError))  # a directory
