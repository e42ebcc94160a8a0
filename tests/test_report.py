"""``strandline report``: one offline HTML page drawn by igv.js, checked in a real headless browser."""

import html
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from strandline.app.cli import main

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# Network off for the page: every host resolves to nothing and every request goes to a closed proxy
OFFLINE = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           "--proxy-server=127.0.0.1:9", "--host-resolver-rules=MAP * ~NOTFOUND", "--virtual-time-budget=20000",
           "--window-size=1400,1000"]  # fmt: skip


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """A 60 kb GenBank record with genes, a tRNA and an rRNA, and a per-base logprob track whose 40-45 kb stretch
    departs from the rest (a foreign island), plus an entropy track."""
    from Bio.Seq import Seq
    from Bio.SeqFeature import FeatureLocation, SeqFeature
    from Bio.SeqIO import write
    from Bio.SeqRecord import SeqRecord

    d = tmp_path_factory.mktemp("report")
    rng = np.random.default_rng(0)
    n = 60_000
    rec = SeqRecord(Seq("".join(rng.choice(list("ACGT"), n))), id="NC_000001.1", name="demo",
                    description="a test record", annotations={"molecule_type": "DNA"})  # fmt: skip
    for i, (s, e, strand, ftype, name) in enumerate([(1000, 4000, 1, "gene", "abcA"), (41000, 43000, -1, "gene", "intB"),
                                                     (20000, 20076, 1, "tRNA", "trnA"), (30000, 31500, 1, "rRNA", "rrsA")]):  # fmt: skip
        rec.features.append(SeqFeature(FeatureLocation(s, e, strand), type=ftype, qualifiers={"gene": [name]}))
        if ftype == "gene":
            rec.features.append(SeqFeature(FeatureLocation(s, e, strand), type="CDS", id=f"c{i}",
                                           qualifiers={"gene": [name], "locus_tag": [f"T{i}"]}))  # fmt: skip
    write([rec], d / "genome.gb", "genbank")
    v = -1.9 + 0.05 * rng.standard_normal(n)
    v[40000:45000] = -2.6 + 0.05 * rng.standard_normal(5000)
    with open(d / "scan.logprob.bedGraph", "w") as f:
        f.writelines(f"NC_000001.1\t{i}\t{i + 1}\t{x:.4f}\n" for i, x in enumerate(v) if i)
    with open(d / "scan.entropy.bedGraph", "w") as f:
        f.writelines(f"NC_000001.1\t{i}\t{i + 1000}\t{1.9 - 0.1 * (i // 1000 % 3):.3f}\n" for i in range(0, n, 1000))
    return d


def _open(page: Path, *extra: str, fragment: str = "") -> dict:
    """The page's own status after it drew, read from the DOM a headless Chromium dumps."""
    out = subprocess.run([CHROMIUM, *OFFLINE, f"--user-data-dir={page.parent / 'profile'}", *extra, "--dump-dom",
                          page.resolve().as_uri() + fragment], capture_output=True, text=True, timeout=180)  # fmt: skip
    m = re.search(r'<div id="status"[^>]*>', out.stdout)
    assert m, out.stderr[-2000:]
    return {k: html.unescape(v) for k, v in re.findall(r'data-(\w+)="([^"]*)"', m.group(0))}


def test_report_holds_everything_inline(inputs, tmp_path, capsys):
    page = tmp_path / "r.html"
    args = ["report", str(inputs / "genome.gb"), str(inputs / "scan.logprob.bedGraph"),
            str(inputs / "scan.entropy.bedGraph"), "-o", str(page)]  # fmt: skip
    assert main(args) == 0
    err = capsys.readouterr().err
    assert "wrote" in err and "1 anomalous region(s)" in err and "6 features" in err
    text = page.read_text()
    assert not re.search(r"<(script|link|img)[^>]+(src|href)=", text)  # nothing loaded from elsewhere
    cfg = json.loads(re.search(r'<script id="config" type="application/json">(.*?)</script>', text, re.S).group(1))
    assert cfg["loadDefaultGenomes"] is False and cfg["reference"]["fastaURL"].startswith("data:application/gzip")
    assert [t["name"] for t in cfg["tracks"]] == ["scan.logprob.bedGraph", "scan.entropy.bedGraph", "features",
                                                  "anomalous regions"]  # fmt: skip
    assert all(t["url"].startswith("data:") for t in cfg["tracks"])
    row = re.search(r'<tr class="high" data-locus="NC_000001.1:(\d+)-(\d+)">(.*?)</tr>', text)
    assert row and 39_000 <= int(row.group(1)) <= 41_000 and 44_000 <= int(row.group(2)) <= 46_000
    assert "intB" in row.group(3)  # the features the region overlaps


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (.ci/run installs it)")
def test_report_draws_offline_in_a_real_browser(inputs, tmp_path):
    page = tmp_path / "r.html"
    assert main(["report", str(inputs / "genome.gb"), str(inputs / "scan.logprob.bedGraph"),
                 str(inputs / "scan.entropy.bedGraph"), "-o", str(page)]) == 0  # fmt: skip
    status = _open(page)
    assert status["ready"] == "1" and json.loads(status["errors"]) == []
    assert int(status["painted"]) >= 4  # ruler, two tracks, features, calls: canvases with pixels
    clicked = _open(page, fragment="#click=1")  # the table's first row moves the browser to its region
    loc = re.fullmatch(r"NC_000001\.1:([\d,]+)-([\d,]+)", clicked["locus"])
    assert loc and 39_000 <= int(loc.group(1).replace(",", "")) <= 41_000, clicked["locus"]
    assert json.loads(clicked["errors"]) == []
    shot = tmp_path / "report.png"
    subprocess.run([CHROMIUM, *OFFLINE, f"--user-data-dir={tmp_path / 'p2'}", f"--screenshot={shot}",
                    page.resolve().as_uri()], capture_output=True, timeout=180)  # fmt: skip
    from matplotlib.image import imread

    pixels = imread(shot)
    assert pixels.shape[:2] == (1000, 1400) and pixels[..., :3].std() > 0.05  # drawn, not blank
    keep = os.environ.get("STRANDLINE_TEST_ARTIFACTS")
    if keep:  # the screenshot as a test artefact
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(keep) / "report.png")


def _refused(capsys, args, needle, page):
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and needle in err and "Traceback" not in err, err
    assert not page.exists()


def test_report_refuses_what_it_cannot_show(inputs, tmp_path, capsys, monkeypatch):
    import strandline.tasks.report as report

    page = tmp_path / "r.html"
    g, t = str(inputs / "genome.gb"), str(inputs / "scan.logprob.bedGraph")
    _refused(capsys, ["report", g, t, "-o", str(tmp_path / "r.txt")], "a report is an HTML file", tmp_path / "r.txt")
    other = tmp_path / "other.bedGraph"
    other.write_text("chrZ\t0\t10\t-2.0\n")
    _refused(capsys, ["report", g, str(other), "-o", str(page)], "record 'chrZ' is not in the genome", page)
    _refused(capsys, ["report", g, str(tmp_path / "none.bedGraph"), "-o", str(page)], "no such track file", page)
    monkeypatch.setattr(report, "MAX_BASES", 10_000)
    _refused(capsys, ["report", g, t, "-o", str(page)], "over 10,000 bases", page)
    monkeypatch.setattr(report, "MAX_BASES", 50_000_000)
    monkeypatch.setattr(report, "IGV_SHA256", "0" * 64)
    _refused(capsys, ["report", g, t, "-o", str(page)], "not igv.js 3.8.10 as shipped", page)


def test_tracks_are_binned_to_a_bounded_size():
    from strandline.tasks.report import MAX_BINS, bin_size

    assert bin_size({"a": 40_000}) == 1  # small genomes: per base
    assert bin_size({"a": 5_000_000}) * MAX_BINS >= 5_000_000 and 5_000_000 / bin_size({"a": 5_000_000}) <= MAX_BINS
