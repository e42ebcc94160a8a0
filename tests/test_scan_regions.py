"""``scan --region/--regions``: spans read through an index, each after a warm-up, equal to a whole-record scan."""

import gzip
from pathlib import Path

import numpy as np
import pytest
import torch

from strandline.app.cli import main
from strandline.data.tracks import iter_intervals
from strandline.models import LinearTransformerLM, ModelConfig

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread is faster


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """A model whose memory is short (per-head decay 0.5 to 0.9: 0.9^400 < 1e-18) and a two-record FASTA."""
    d = tmp_path_factory.mktemp("regions")
    torch.manual_seed(0)
    m = LinearTransformerLM(ModelConfig(d_model=32, n_layers=2, n_heads=2, chunk_size=16, decay=[0.5, 0.9]))
    m.save(d / "m", tokenizer="dna")
    rng = np.random.default_rng(1)
    seqs = {"chrA": "".join(rng.choice(list("ACGT"), 5000)), "chrB": "".join(rng.choice(list("ACGTN"), 3000))}
    fa = d / "g.fa"
    fa.write_text("".join(f">{k} a record\n" + "\n".join(v[i : i + 60] for i in range(0, len(v), 60)) + "\n"
                          for k, v in seqs.items()))  # fmt: skip
    full = d / "full.bedGraph"
    assert main(["scan", str(d / "m"), str(fa), "-o", str(full), "--chunk", "256"]) == 0
    return d, fa, _values(full)


def _values(track) -> dict[str, dict[int, float]]:
    out: dict[str, dict[int, float]] = {}
    for c, s, _, v in iter_intervals(track):
        out.setdefault(c, {}).update(zip(s.tolist(), v.tolist(), strict=True))
    return out


def test_a_region_equals_the_same_span_of_a_whole_scan_once_the_warmup_covers_the_memory(setup, tmp_path):
    d, fa, full = setup
    # bedGraph values have 6 significant digits (2e-5 at -2 bits) and chunks fall elsewhere: equal to that
    for warmup, tol in (("4000", 2e-5), ("400", 2e-5)):  # from the record's start, and past the model's memory
        out = tmp_path / f"r{warmup}.bedGraph"
        assert main(["scan", str(d / "m"), str(fa), "-o", str(out), "--region", "chrA:3000-3500", "--warmup", warmup,
                     "--chunk", "256"]) == 0  # fmt: skip
        got = _values(out)
        assert list(got) == ["chrA"] and sorted(got["chrA"]) == list(range(3000, 3500))
        diff = max(abs(v - full["chrA"][p]) for p, v in got["chrA"].items())
        assert diff <= tol, (warmup, diff)
    cold = tmp_path / "cold.bedGraph"
    assert main(["scan", str(d / "m"), str(fa), "-o", str(cold), "--region", "chrA:3000-3500", "--warmup", "0"]) == 0
    first = _values(cold)["chrA"]
    assert abs(first[3000] - full["chrA"][3000]) > 1e-4  # no warm-up: the first bases read without context


def test_bed_regions_merge_sort_and_summarize_only_their_bases(setup, tmp_path):
    d, fa, full = setup
    bed = tmp_path / "spans.bed"
    bed.write_text("track name=x\nchrB\t100\t300\tb1\nchrA\t4900\t6000\ta2\nchrA\t10\t50\ta1\nchrA\t40\t80\ta1b\n")
    out, summ = tmp_path / "o.bedGraph", tmp_path / "s.tsv"
    assert main(["scan", str(d / "m"), str(fa), "-o", str(out), "--regions", str(bed), "--warmup", "100000",
                 "--summary", str(summ)]) == 0  # fmt: skip
    got = _values(out)
    assert list(got) == ["chrA", "chrB"]  # the file's order, not the BED's
    assert sorted(got["chrA"]) == list(range(10, 80)) + list(range(4900, 5000))  # merged, clipped to the record
    for c, vals in got.items():
        assert max(abs(v - full[c][p]) for p, v in vals.items()) <= 2e-5  # warm-up from the start: exact
    rows = [r.split("\t") for r in summ.read_text().splitlines()[1:]]
    assert [(r[0], r[1], r[3]) for r in rows] == [("chrA", "5000", "170"), ("chrB", "3000", str(len(got["chrB"])))]


def test_a_bgzip_fasta_is_read_through_its_index(setup, tmp_path):
    from Bio import bgzf

    d, fa, full = setup
    gz = tmp_path / "g.fa.gz"
    with bgzf.BgzfWriter(str(gz), "wb") as w:
        w.write(fa.read_bytes())
    out = tmp_path / "z.bedGraph"
    assert main(["scan", str(d / "m"), str(gz), "-o", str(out), "--region", "chrB:2000-2100", "--warmup", "3000"]) == 0
    got = _values(out)["chrB"]
    assert got and all(abs(v - full["chrB"][p]) <= 2e-5 for p, v in got.items())
    assert Path(f"{gz}.fai").is_file()


def _refused(capsys, argv, needle, out):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and needle in err and "Traceback" not in err, err
    assert not Path(out).exists()


def test_regions_that_cannot_be_read_are_refused_in_one_line(setup, tmp_path, capsys):
    d, fa, _ = setup
    out = tmp_path / "o.bedGraph"
    m = str(d / "m")
    plain_gz = tmp_path / "plain.fa.gz"
    plain_gz.write_bytes(gzip.compress(fa.read_bytes()))
    _refused(capsys, ["scan", m, str(plain_gz), "-o", str(out), "--region", "chrA"], "bgzip-compressed", out)
    _refused(capsys, ["scan", m, str(fa), "-o", str(out), "--region", "chrZ:0-10"], "no record 'chrZ'", out)
    _refused(capsys, ["scan", m, str(fa), "-o", str(out), "--region", "chrA:9000-9100"], "starts beyond the end", out)
    bed = tmp_path / "bad.bed"
    bed.write_text("chrA\tten\t20\n")
    _refused(capsys, ["scan", m, str(fa), "-o", str(out), "--regions", str(bed)], "bad.bed:1: not a BED line", out)
    _refused(capsys, ["scan", m, str(fa), "-o", str(out), "--region", "chrA", "--strand_average"], "one strand", out)
    _refused(capsys, ["scan", m, str(fa), "-o", str(out), "--region", "chrA", "--warmup", "-1"], "--warmup", out)
    _refused(capsys, ["scan", m, "-", "-o", str(out), "--region", "chrA"], "not stdin", out)
