"""The r-vignettes summarization domain: R Markdown vignettes of Debian's R packages -> their descriptions."""

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from strandline.data import fetch_vignettes as fv

DESCRIPTION = (
    "Tools to frobnicate genomic intervals: read them from BED and GFF files, merge overlapping ones, and "
    "summarize their coverage per chromosome in tables and plots that are ready for a report."
)
PROSE = "The frobnicator reads intervals from a file and writes them back sorted, merged and counted. "
needs_dpkg = pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="dpkg-deb builds the test package (Debian)")


def _deb(tmp: Path, vignettes: dict[str, str], description: str = DESCRIPTION, package: str = "Frob") -> Path:
    root = tmp / f"pkg-{package}"
    deb_name = f"r-cran-{package.lower()}"
    (root / "DEBIAN").mkdir(parents=True)
    (root / "DEBIAN" / "control").write_text(
        f"Package: {deb_name}\nVersion: 1.0-1\nArchitecture: all\nMaintainer: T <t@example.org>\n"
        "Description: test\n test package\n"
    )
    lib = root / "usr/lib/R/site-library" / package
    (lib / "doc").mkdir(parents=True)
    cut = description.find(" ", 50) if len(description) > 60 else -1
    folded = description if cut < 0 else description[:cut] + "\n   " + description[cut:]  # folded, as R writes
    (lib / "DESCRIPTION").write_text(f"Package: {package}\nTitle: Frobnicate\nDescription: {folded}\nLicense: GPL\n")
    for name, text in vignettes.items():
        (lib / "doc" / name).write_text(text)
    out = tmp / "debs"
    out.mkdir(exist_ok=True)
    deb = out / f"{deb_name}_1.0-1_all.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "-b", str(root), str(deb)], check=True, capture_output=True)
    return deb


VIGNETTE = (
    '---\ntitle: "Frob: sorting intervals"\nauthor: A. Author\nabstract: >\n  An abstract no system may copy.\n'
    "output: BiocStyle::html_document\n---\n\n# Overview\n\n"
    + 'The `r Biocpkg("Frob")` package frobnicates. '
    + PROSE * 30
    + "\n\n```{r}\nlibrary(Frob)\n```\n\n"
    + DESCRIPTION
    + "\n\n## Merging\n\n"
    + PROSE * 10
)


@needs_dpkg
def test_a_package_becomes_one_row_from_its_main_vignette(tmp_path):
    deb = _deb(tmp_path, {"Frob.Rmd": VIGNETTE, "advanced-topics.Rmd": VIGNETTE + PROSE * 100})
    rows = list(fv.vignette_rows(deb.parent, tmp_path / "x"))
    assert len(rows) == 1
    row = rows[0]
    assert row["id"] == "Frob/Frob" and row["domain"] == "r-vignettes" and row["summary"] == DESCRIPTION
    assert row["split"] == fv.split_of("Frob") and row["package"] == "r-cran-frob"
    text = row["text"]
    assert text.startswith("Frob: sorting intervals\n\nOverview\n\n")  # the title and headings: paragraphs
    assert "abstract" not in text and "An abstract no system may copy" not in text and "BiocStyle" not in text
    assert "library(Frob)" not in text and "```" not in text and "\n\nMerging\n\n" in text  # read as rendered
    assert "genomic intervals" not in text  # the description, repeated in the vignette, is taken out
    assert "The Frob package frobnicates." in text  # inline R code: a package link reads as the package's name


@needs_dpkg
def test_short_vignettes_and_short_descriptions_give_no_row(tmp_path):
    _deb(tmp_path, {"Frob.Rmd": "---\ntitle: x\n---\n" + PROSE * 5})
    _deb(tmp_path, {"Blip.Rmd": VIGNETTE}, description="Frobnicates intervals.", package="Blip")
    assert list(fv.vignette_rows(tmp_path / "debs", tmp_path / "x")) == []


@needs_dpkg
def test_build_rows_reads_only_the_listed_packages_of_a_folder(tmp_path):
    _deb(tmp_path, {"Frob.Rmd": VIGNETTE})
    _deb(tmp_path, {"Blip.Rmd": VIGNETTE}, package="Blip")
    rows = fv.build_rows(tmp_path / "debs", packages=("r-cran-blip",))
    assert [r["id"] for r in rows] == ["Blip/Blip"]


def test_the_vignette_that_stands_for_the_package(tmp_path):
    names = ["advanced.Rmd", "Introduction-to-frob.Rmd", "frob.Rmd", "zzz-long.Rmd"]
    for i, n in enumerate(names):
        (tmp_path / n).write_text("x" * (10 + 1000 * i))
    paths = [tmp_path / n for n in names]
    assert fv.choose_vignette("Frob", paths).name == "frob.Rmd"  # named after the package
    assert fv.choose_vignette("Frob", [p for p in paths if p.name != "frob.Rmd"]).name == "Introduction-to-frob.Rmd"
    assert fv.choose_vignette("Frob", [paths[0], paths[3]]).name == "zzz-long.Rmd"  # else the longest
    assert fv.choose_vignette("Frob", []) is None


def test_front_matter_is_replaced_by_its_title():
    assert fv.vignette_text("---\ntitle: 'A guide'\noutput: html\n---\nBody.\n") == "# A guide\n\nBody.\n"
    assert fv.vignette_text("---\noutput: html\n---\nBody.\n") == "Body.\n"
    assert fv.vignette_text("No front matter.\n---\n") == "No front matter.\n---\n"


@needs_dpkg
def test_the_command_writes_the_domain_file(tmp_path, capsys, monkeypatch):
    _deb(tmp_path, {"Frob.Rmd": VIGNETTE})
    monkeypatch.setattr(fv.build_rows, "__defaults__", (None, ("r-cran-frob",)))  # the list: this package
    fv.main(["--debs", str(tmp_path / "debs"), "--out", str(tmp_path / "out")])
    rows = [json.loads(line) for line in (tmp_path / "out" / "r-vignettes.jsonl").read_text().splitlines()]
    assert [r["id"] for r in rows] == ["Frob/Frob"]
    split = fv.split_of("Frob")
    assert capsys.readouterr().out.split() == ["r-vignettes", "1", "documents"] + [
        x for s in ("train", "val", "test") for x in (s, str(int(s == split)))
    ]


def test_without_debian_tools_or_with_a_damaged_package_the_error_is_one_line(tmp_path, monkeypatch, capsys):
    from strandline.data import debian
    from strandline.errors import UserInputError

    bad = tmp_path / "debs" / "r-cran-frob_1.0-1_all.deb"
    bad.parent.mkdir()
    bad.write_bytes(b"!<arch>\nnot really a package")
    if shutil.which("dpkg-deb"):
        with pytest.raises(UserInputError, match=r"r-cran-frob_1.0-1_all.deb: not a readable .deb \(") as e:
            debian.extract(bad, tmp_path / "x")
        assert "\n" not in str(e.value)
        out = ["--debs", str(bad.parent), "--out", str(tmp_path / "out")]
        capsys.readouterr()
        assert fv.main(out) == 2  # the folder has no listed package
        assert re.fullmatch(
            r"fetch_vignettes: error: no documents \(.* holds none of the listed.*\n", capsys.readouterr().err
        )
        monkeypatch.setattr(fv.build_rows, "__defaults__", (None, ("r-cran-frob",)))
        assert fv.main(out) == 2
        assert re.fullmatch(r"fetch_vignettes: error: .*not a readable .deb.*\n", capsys.readouterr().err)
        assert not (tmp_path / "out").exists()  # nothing written
    monkeypatch.setattr(debian.shutil, "which", lambda tool: None)
    with pytest.raises(UserInputError, match="^apt-get not found: the Debian documents need a Debian or Ubuntu"):
        debian.download(("r-cran-frob",), tmp_path / "fresh")
    with pytest.raises(UserInputError, match="^dpkg-deb not found"):
        debian.extract(bad, tmp_path / "x")
    assert debian.download(("r-cran-frob",), bad.parent) == bad.parent  # already there: apt-get is not needed
