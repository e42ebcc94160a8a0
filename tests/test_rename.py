"""``scan --rename``: records carry the browser's names in every output, annotations follow, bad tables are one
line."""

from pathlib import Path

import numpy as np
import pytest
from test_scan import _write_fasta, save_tiny_model

from strandline.app.cli import main
from strandline.data.names import RecordNames, RenameError, accession, read_table

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread is faster


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("m"))


def _seq(n: int, seed: int) -> str:
    return "".join(np.random.default_rng(seed).choice(list("ACGT"), n))


def _gene_bases(report: Path) -> int:
    """bases_inside of the annotation report's gene row."""
    rows = [r.split("\t") for r in report.read_text().splitlines()]
    return int(next(r for r in rows if r[1] == "gene")[3])


def _chroms(track: Path) -> list[str]:
    return list(dict.fromkeys(line.split("\t")[0] for line in track.read_text().splitlines()))


@pytest.mark.parametrize(
    ("name", "want"),
    [
        ("gi|49175990|ref|NC_000913.2|", "NC_000913.2"),
        ("ref|NC_000913.3|", "NC_000913.3"),
        ("gi|5524211|gb|AAD44166.1|", "AAD44166.1"),
        ("lcl|contig_7", "contig_7"),
        ("NC_000913.3", "NC_000913.3"),
        ("chr1", "chr1"),
    ],
)
def test_accession_keeps_the_id_after_the_database_tag(name, want):
    assert accession(name) == want


def test_scan_writes_the_renamed_records_everywhere(model_dir, tmp_path, capsys):
    fa = _write_fasta(tmp_path / "g.fa", {"gi|1|ref|NC_1.1|": _seq(300, 0), "plasmid": _seq(200, 1)})
    table = tmp_path / "alias.tsv"
    table.write_text("# input\tbrowser\nplasmid\tpA\n")
    gff = tmp_path / "genes.gff3"  # the annotation speaks the browser's names
    gff.write_text("##gff-version 3\nNC_1.1\tx\tgene\t11\t100\t.\t+\t.\tID=g1\npA\tx\tgene\t5\t50\t.\t-\t.\tID=g2\n")
    out, tsv, rep = tmp_path / "o.bedGraph", tmp_path / "s.tsv", tmp_path / "ann.tsv"
    argv = ["scan", model_dir, str(fa), "-o", str(out), "--summary", str(tsv), "--annotation", str(gff),
            "--annotation_report", str(rep), "--plot", str(tmp_path / "p.png")]  # fmt: skip
    assert main([*argv, "--rename", "accession"]) == 0
    assert _chroms(out) == ["NC_1.1", "plasmid"]
    assert [r.split("\t")[0] for r in tsv.read_text().splitlines()[1:]] == ["NC_1.1", "plasmid"]
    assert _gene_bases(rep) == 90 and (tmp_path / "p.png").stat().st_size > 0  # NC_1.1's gene: bases 10-100
    out.unlink()
    assert main([*argv, "--rename", str(table)]) == 0  # the table renames only what it lists
    assert _chroms(out) == ["gi|1|ref|NC_1.1|", "pA"]
    assert _gene_bases(rep) == 46  # now pA's gene (bases 4-50) is on a scanned record, NC_1.1's is not


def test_genbank_features_follow_their_renamed_record(model_dir, tmp_path):
    from Bio.Seq import Seq
    from Bio.SeqFeature import FeatureLocation, SeqFeature
    from Bio.SeqIO import write
    from Bio.SeqRecord import SeqRecord

    rec = SeqRecord(Seq(_seq(400, 2)), id="NC_9.1", name="NC_9", description="test")
    rec.annotations["molecule_type"] = "DNA"
    rec.features.append(SeqFeature(FeatureLocation(20, 200, strand=1), type="CDS", qualifiers={"gene": ["abc"]}))
    gb = tmp_path / "r.gb"
    write([rec], gb, "genbank")
    table = tmp_path / "alias.tsv"
    table.write_text("NC_9.1\tchrX\n")
    out, feats = tmp_path / "o.bedGraph", tmp_path / "f.tsv"
    argv = ["scan", model_dir, str(gb), "-o", str(out), "--feature_report", str(feats), "--rename", str(table)]
    assert main(argv) == 0
    assert _chroms(out) == ["chrX"]
    rows = [r.split("\t") for r in feats.read_text().splitlines()]
    assert any("chrX" in r and "abc" in r for r in rows[1:]), rows


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("a\n", "expected NAME<TAB>NEW_NAME"),
        ("a\tx\na\ty\n", "'a' is renamed twice"),
        ("a\tx\nb\tx\n", "'a' and 'b' are both renamed to 'x'"),
        ("# nothing\n", "no NAME<TAB>NEW_NAME line"),
    ],
)
def test_a_bad_table_is_refused(tmp_path, text, match):
    p = tmp_path / "t.tsv"
    p.write_text(text)
    with pytest.raises(RenameError, match=match):
        read_table(str(p))


def test_bad_rename_is_one_line_before_anything_is_written(model_dir, tmp_path, capsys):
    fa = _write_fasta(tmp_path / "g.fa", {"gi|1|ref|X.1|": _seq(100, 3), "gi|2|ref|X.1|": _seq(100, 4)})
    out = tmp_path / "o.bedGraph"
    for extra, words in ((["--rename", str(tmp_path / "missing.tsv")], "cannot read"),
                         (["--rename", "accession"], "already read")):  # fmt: skip
        assert main(["scan", model_dir, str(fa), "-o", str(out), *extra]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and words in err and "Traceback" not in err, err
        assert not out.exists()


def test_record_names_are_picklable_and_sign_the_scan():
    import pickle

    names = RecordNames({"b": "y", "a": "x"})
    assert pickle.loads(pickle.dumps(names))("a") == "x"
    assert names.signature() == [["a", "x"], ["b", "y"]]  # JSON-stable: a resumed scan compares it as saved
    assert RecordNames.from_option("accession").signature() == "accession"
