"""strandline plot: formats by extension, axis labels with quantity and unit, binning, panels, feature lane."""

from __future__ import annotations

import numpy as np
import pytest

from strandline.app.cli import main
from strandline.tasks.scan import plot


def _bedgraph(path, chrom: str, values: np.ndarray) -> str:
    path.write_text("".join(f"{chrom}\t{i}\t{i + 1}\t{v:.4f}\n" for i, v in enumerate(values)))
    return str(path)


@pytest.fixture
def track(tmp_path):
    rng = np.random.default_rng(0)
    return _bedgraph(tmp_path / "x.logprob.bedGraph", "chr1", -rng.uniform(0, 4, 5000))


@pytest.mark.parametrize(("ext", "magic"), [(".png", b"\x89PNG"), (".svg", b"<?xml"), (".pdf", b"%PDF")])
def test_the_format_follows_the_extension(tmp_path, track, ext, magic):
    out = tmp_path / f"p{ext.upper() if ext == '.pdf' else ext}"
    assert main(["plot", track, "chr1:0-1000", str(out)]) == 0
    assert out.read_bytes().startswith(magic)


def test_an_unknown_extension_is_one_line_and_writes_nothing(tmp_path, track, capsys):
    assert main(["plot", track, "chr1:0-1000", str(tmp_path / "p.jpg")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and ".png, .svg or .pdf" in err and "'.jpg'" in err
    assert not (tmp_path / "p.jpg").exists()


def test_scan_refuses_a_plot_extension_before_scanning(tmp_path, capsys):
    from pathlib import Path

    genome = Path(__file__).resolve().parents[1] / "data" / "genomes" / "lambda.fasta.gz"
    argv = ["scan", "dna-corpus-tbptt", str(genome), "-o", str(tmp_path / "o.bedGraph"), "--plot",
            str(tmp_path / "p.gif")]  # fmt: skip
    assert main(argv) == 2
    assert "p.gif" in capsys.readouterr().err and not (tmp_path / "o.bedGraph").exists()


def test_quantity_from_the_track_name():
    assert plot.track_quantity("out.entropy.bedGraph") == "entropy"
    assert plot.track_quantity("dir.v2/out.A.bedGraph.gz") == "A"
    assert plot.track_quantity("out.logprob.bw") == "logprob"
    assert plot.track_quantity("out.bedGraph") is None
    assert plot.QUANTITIES["logprob"].endswith("bits")


def test_binning_keeps_the_mean_weighted_by_bases_and_the_extremes():
    s = np.array([0, 1, 2, 3, 10, 12])
    e = np.array([1, 2, 3, 10, 12, 20])
    v = np.array([1.0, 3.0, 5.0, 0.0, 2.0, 4.0])
    x, mean, mn, mx = plot.bin_intervals(s, e, v, 0, 20, 2)  # bins [0, 10) and [10, 20)
    assert np.allclose(x, [5, 15])
    assert mean[0] == pytest.approx((1 + 3 + 5 + 0 * 7) / 10) and mean[1] == pytest.approx((2 * 2 + 4 * 8) / 10)
    assert mn.tolist() == [0.0, 2.0] and mx.tolist() == [5.0, 4.0]
    _, mean, mn, _ = plot.bin_intervals(s[:3], e[:3], v[:3], 0, 20, 2)
    assert np.isnan(mean[1]) and np.isnan(mn[1])  # no value: a gap, not a zero


def test_panels_labels_binning_and_the_feature_lane(tmp_path, track, monkeypatch):
    """Two tracks in two panels with their quantities; a whole record drawn binned; GFF3 features by strand."""
    import matplotlib.figure

    ent = _bedgraph(tmp_path / "x.entropy.bedGraph", "chr1", np.full(5000, 1.9))
    gff = tmp_path / "a.gff3"
    gff.write_text("##gff-version 3\n"
                   "chr1\tx\tgene\t101\t900\t.\t+\t.\tID=g1\n"
                   "chr1\tx\ttRNA\t1201\t1280\t.\t-\t.\tID=t1\n"
                   "chr2\tx\tgene\t1\t50\t.\t+\t.\tID=g2\n")  # fmt: skip
    saved = {}
    real = matplotlib.figure.Figure.savefig

    def keep(fig, *a, **k):
        saved["fig"] = fig
        return real(fig, *a, **k)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", keep)
    assert main(["plot", track, "chr1", str(tmp_path / "p.png"), "--also", ent, "--annotation", str(gff)]) == 0
    axes = saved["fig"].axes
    assert [a.get_ylabel() for a in axes] == [plot.QUANTITIES["logprob"], plot.QUANTITIES["entropy"], "features"]
    assert "bins" in axes[0].get_title(loc="left") and "chr1:0-5,000" in saved["fig"]._suptitle.get_text()
    boxes = [(p.get_x(), p.get_width(), p.get_y()) for p in axes[2].patches]
    assert (100, 800, 0.25) in boxes and (1200, 80, -0.75) in boxes and len(boxes) == 2  # chr2's gene is not drawn
    assert main(["plot", track, "chr1:0-1000", str(tmp_path / "q.png")]) == 0
    assert "per base" in saved["fig"].axes[0].get_title(loc="left")
