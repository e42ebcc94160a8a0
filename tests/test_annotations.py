"""GenBank/EMBL scan inputs and the annotation report (track mean inside vs outside each feature type)."""

from pathlib import Path

import numpy as np
import pytest
from Bio import SeqIO
from Bio.Seq import Seq
from Bio.SeqFeature import CompoundLocation, FeatureLocation, SeqFeature
from Bio.SeqRecord import SeqRecord
from test_scan import _write_fasta, save_tiny_model

import strandline.tasks.scan.job
from strandline.app.cli import main
from strandline.data.annotations import INTERGENIC, AnnotationError, covered, load_features, track_stats
from strandline.data.tracks import iter_intervals, read_region
from strandline.tasks.scan import ScanArgs, scan

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread is faster

CDS_PARTS = [(10, 60), (80, 120)]  # a spliced CDS (join), 0-based half-open
FEATURES = {"gene": [(5, 125)], "tRNA": [(150, 190)], "rRNA": [(200, 260), (250, 280)]}  # overlapping rRNAs


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("m"))


def _records():
    rng = np.random.default_rng(7)
    seqs = {"NC_000001.1": "".join(rng.choice(list("ACGT"), 300)), "NC_000002.1": "".join(rng.choice(list("ACGT"), 90))}
    recs = []
    for name, s in seqs.items():
        r = SeqRecord(Seq(s), id=name, name=name.split(".")[0], description="tiny test genome")
        r.annotations["molecule_type"] = "DNA"
        r.features.append(SeqFeature(FeatureLocation(0, len(s)), type="source"))
        recs.append(r)
    r = recs[0]
    r.features.append(SeqFeature(CompoundLocation([FeatureLocation(a, b, 1) for a, b in CDS_PARTS]), type="CDS"))
    for t, ivs in FEATURES.items():
        r.features += [SeqFeature(FeatureLocation(a, b, 1), type=t) for a, b in ivs]
    return recs, seqs


@pytest.fixture
def genbank(tmp_path):
    recs, seqs = _records()
    path = tmp_path / "tiny.gb"
    SeqIO.write(recs, path, "genbank")
    return str(path), seqs


def _masks(n: int) -> dict[str, np.ndarray]:
    out = {}
    for t, ivs in {"CDS": CDS_PARTS, **FEATURES}.items():
        m = np.zeros(n, bool)
        for a, b in ivs:
            m[a:b] = True
        out[t] = m
    out[INTERGENIC] = ~np.any(list(out.values()), axis=0)
    return out


def test_scan_reads_genbank_and_embl_like_the_same_fasta(model_dir, genbank, tmp_path):
    gb, seqs = genbank
    fa = _write_fasta(tmp_path / "same.fa", seqs)
    embl = tmp_path / "tiny.embl"
    SeqIO.write(_records()[0], embl, "embl")
    ref = tmp_path / "fa.bedGraph"
    scan(ScanArgs(model_dir, [fa], str(ref), chunk=64))
    for src in (gb, str(embl)):
        out = tmp_path / f"{Path(src).suffix[1:]}.bedGraph"
        recs = scan(ScanArgs(model_dir, [src], str(out), chunk=64))
        assert [r.name for r in recs] == list(seqs)
        assert out.read_bytes() == ref.read_bytes()


def test_annotation_report_from_genbank_features_matches_a_per_base_reference(model_dir, genbank, tmp_path):
    gb, seqs = genbank
    out, report = tmp_path / "o.bedGraph", tmp_path / "ann.tsv"
    argv = ["scan", model_dir, gb, "-o", str(out), "--track", "logprob,entropy", "--annotation_report", str(report)]
    assert main(argv) == 0
    rows = [line.split("\t") for line in report.read_text().splitlines()]
    assert rows[0] == ["track", "feature", "n_features", "bases_inside", "mean_inside", "bases_outside", "mean_outside"]
    got = {(r[0], r[1]): r[2:] for r in rows[1:]}
    assert {f for _, f in got} == {"CDS", "gene", "rRNA", "tRNA", INTERGENIC}  # no 'source'
    n = len(seqs["NC_000001.1"])
    masks = _masks(n)
    for track in ("logprob", "entropy"):
        per_base = np.full(n, np.nan)
        for a, b, x in zip(*read_region(str(tmp_path / f"o.{track}.bedGraph"), "NC_000001.1"), strict=True):
            per_base[a:b] = x  # identical adjacent values share a bedGraph line
        for t, m in masks.items():
            n_feat, b_in, m_in, b_out, m_out = got[(track, t)]
            assert int(b_in) == m.sum() and int(b_out) == (~m).sum()
            assert float(m_in) == pytest.approx(per_base[m].mean(), abs=2e-6)
            assert float(m_out) == pytest.approx(per_base[~m].mean(), abs=2e-6)
        assert got[(track, "CDS")][0] == "2" and got[(track, "rRNA")][0] == "2"  # parts / features counted


def test_gff3_annotation_gives_the_same_report(model_dir, genbank, tmp_path):
    gb, _ = genbank
    gff = tmp_path / "a.gff3"
    lines = ["##gff-version 3"]
    for t, ivs in {"CDS": CDS_PARTS, **FEATURES}.items():
        lines += [f"NC_000001.1\ttest\t{t}\t{a + 1}\t{b}\t.\t+\t0\tID={t}{i}" for i, (a, b) in enumerate(ivs)]
    lines += ["NC_000001.1\ttest\tregion\t1\t300\t.\t+\t.\tID=whole", "##FASTA", ">NC_000001.1", "ACGT"]
    gff.write_text("\n".join(lines) + "\n")
    scan(ScanArgs(model_dir, [gb], str(tmp_path / "a.bedGraph"), annotation_report=str(tmp_path / "from_gb.tsv")))
    scan(
        ScanArgs(
            model_dir,
            [gb],
            str(tmp_path / "b.bedGraph"),
            annotation=str(gff),
            annotation_report=str(tmp_path / "g.tsv"),
        )
    )
    assert (tmp_path / "from_gb.tsv").read_text() == (tmp_path / "g.tsv").read_text()


def test_bad_annotations_are_refused_before_the_scan(model_dir, genbank, tmp_path, monkeypatch, capsys):
    gb, seqs = genbank
    fa = _write_fasta(tmp_path / "plain.fa", seqs)
    monkeypatch.setattr(
        strandline.tasks.scan.job, "score_chunk", lambda *a, **k: pytest.fail("scanned before refusing")
    )
    bad = tmp_path / "bad.gff3"
    bad.write_text("##gff-version 3\nNC_000001.1\tx\tCDS\tten\t20\t.\t+\t0\t.\n")
    other = tmp_path / "other.gff3"
    other.write_text("chrQ\tx\tCDS\t1\t20\t.\t+\t0\t.\n")
    out = ["-o", str(tmp_path / "o.bedGraph"), "--annotation_report", str(tmp_path / "r.tsv")]
    for extra, msg in (
        (["--annotation", str(bad)], "line 2: not a GFF3 feature line"),
        (["--annotation", str(other)], "no feature is on a scanned record"),
        ([], "needs --annotation FILE.gff3|.gb, or GenBank/EMBL inputs"),
    ):
        assert main(["scan", model_dir, fa, *out, *extra]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and msg in err, err
    with pytest.raises(AnnotationError):
        load_features(str(bad), {"NC_000001.1": 300})


def test_covered_counts_union_bases_below_each_position():
    rng = np.random.default_rng(0)
    ivs = [(int(a), int(a + rng.integers(1, 30))) for a in rng.integers(0, 500, 40)]
    feats = load_features_from(ivs, 600)
    fs, fe, _ = feats["c"]["x"]
    assert np.all(fs[1:] > fe[:-1])  # merged: sorted and disjoint
    mask = np.zeros(600, bool)
    for a, b in ivs:
        mask[a:b] = True
    x = np.arange(601)
    np.testing.assert_array_equal(covered(fs, fe, x), np.concatenate([[0], np.cumsum(mask)]))


def load_features_from(ivs, length):
    from strandline.data.annotations import _merge

    return {"c": {"x": (*_merge(ivs, length), len(ivs))}}


def test_track_stats_stream_in_blocks_and_weight_windows_by_width(tmp_path):
    """A windowed track: each window's mean counts once per base; the result does not depend on the block size."""
    bg = tmp_path / "w.bedGraph"
    bg.write_text("".join(f"c\t{a}\t{a + 10}\t{a / 10}\n" for a in range(0, 100, 10)))
    feats = {"c": {"CDS": (np.array([5]), np.array([25]), 1), INTERGENIC: (np.array([0, 25]), np.array([5, 100]), 2)}}
    stats = track_stats(bg, feats)
    # CDS covers 5 bases of window 0 (value 0), 10 of window 1 (1.0), 5 of window 2 (2.0): mean 1.0
    assert stats["CDS"][:3] == [1, 20, pytest.approx(20.0)]
    assert stats["CDS"][3] == 80 and stats[INTERGENIC][1] == 80
    assert sum(len(s) for _, s, _, _ in iter_intervals(bg, block=3)) == 10


def test_feature_report_gives_each_feature_its_mean_and_a_surprise_rank(model_dir, genbank, tmp_path):
    """Every feature (each part of a spliced CDS too) with its mean per track equal to a per-base reference, and
    ranks: 1 is the lowest mean log2 P (the most surprising), the highest mean for other tracks."""
    gb, seqs = genbank
    out, rep = tmp_path / "o.bedGraph", tmp_path / "features.tsv"
    argv = ["scan", model_dir, gb, "-o", str(out), "--track", "logprob,entropy", "--feature_report", str(rep)]
    assert main(argv) == 0
    rows = [line.split("\t") for line in rep.read_text().splitlines()]
    assert rows[0] == ["track", "record", "type", "name", "start", "end", "strand", "bases", "mean", "rank"]
    body = [r for r in rows[1:] if r[0] == "logprob"]
    want = sorted([(a, b, "CDS") for a, b in CDS_PARTS] + [(a, b, t) for t, ivs in FEATURES.items() for a, b in ivs])
    assert sorted((int(r[4]), int(r[5]), r[2]) for r in body) == want
    per_base = {}
    for name, track in (("logprob", tmp_path / "o.logprob.bedGraph"), ("entropy", tmp_path / "o.entropy.bedGraph")):
        v = np.full(len(seqs["NC_000001.1"]), np.nan)
        for line in track.read_text().splitlines():
            c, s, e, x = line.split("\t")
            if c == "NC_000001.1":
                v[int(s) : int(e)] = float(x)
        per_base[name] = v
    for r in rows[1:]:
        a, b = int(r[4]), int(r[5])
        assert r[6] == "+" and int(r[7]) == b - a
        assert float(r[8]) == pytest.approx(np.nanmean(per_base[r[0]][a:b]), abs=2e-6)
    for name, low_first in (("logprob", True), ("entropy", False)):
        ranked = sorted((int(r[9]), float(r[8])) for r in rows[1:] if r[0] == name)
        means = [m for _, m in ranked]
        assert means == sorted(means, reverse=not low_first) and [k for k, _ in ranked] == list(range(1, 7))


def test_both_reports_read_the_annotation_once(model_dir, genbank, tmp_path, monkeypatch):
    """--annotation_report and --feature_report together: one read of the annotation gives both."""
    import strandline.data.annotations as ann

    gb, _ = genbank
    reads = []
    real = ann.read_annotation
    monkeypatch.setattr(ann, "read_annotation", lambda path, *a, **k: (reads.append(path), real(path, *a, **k))[1])
    out, rep, feats = tmp_path / "o.bedGraph", tmp_path / "a.tsv", tmp_path / "f.tsv"
    argv = ["scan", model_dir, gb, "-o", str(out), "--annotation_report", str(rep), "--feature_report", str(feats)]
    assert main(argv) == 0
    assert reads == [gb] and rep.stat().st_size and len(feats.read_text().splitlines()) == 7  # header + 6


def test_feature_means_across_blocks_and_gaps(tmp_path):
    from strandline.data.annotations import feature_means

    track = tmp_path / "t.bedGraph"
    rows = [("r", i, i + 1, float(i)) for i in range(0, 50)] + [("r", 60, 100, 2.0)]  # a gap 50-60, a long run
    track.write_text("".join(f"{c}\t{s}\t{e}\t{v}\n" for c, s, e, v in rows))
    feats = {"r": [(0, 10, 1, "gene", "a"), (45, 70, 1, "gene", "b"), (90, 200, -1, "gene", "c")]}
    ((bases, sums),) = feature_means(track, feats).values()
    assert bases.tolist() == [10, 15, 10]  # 45-50 and 60-70; 90-100 (the track ends at 100)
    assert sums.tolist() == [45.0, 45 + 46 + 47 + 48 + 49 + 20.0, 20.0]
