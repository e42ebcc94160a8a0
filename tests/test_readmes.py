"""The debian-readme summarization domain: upstream READMEs of Debian packages -> their long descriptions."""

import gzip
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from strandline.data import discover
from strandline.data import fetch_readmes as fr

ABOUT = (
    "Frobnicate is a command line tool that sorts, merges and counts genomic intervals read from BED and GFF "
    "files, and writes their coverage per chromosome as tables ready for a report."
)
STOCK = "Node.js is an event-based server-side JavaScript engine."
PROSE = "The frobnicator reads intervals from a file and writes them back sorted, merged and counted. "
README = (
    "# Frobnicate\n\n" + ABOUT + "\n\n## Usage\n\n" + PROSE * 30 + "\n\n```sh\nfrob sort x.bed\n```\n\n" + PROSE * 5
)
needs_dpkg = pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="dpkg-deb builds the test package (Debian)")


def _control_description(synopsis: str, paragraphs: list[str]) -> str:
    """A Description field as a control file folds it: the synopsis, then lines of one space, " ." between
    paragraphs."""
    body = "\n .\n".join("\n".join(" " + line for line in p.split("\n")) for p in paragraphs)
    return f"Description: {synopsis}\n{body}\n"


def _deb(tmp: Path, package: str, files: dict[str, bytes | str], paragraphs: list[str], source: str | None = None):
    root = tmp / f"pkg-{package}"
    (root / "DEBIAN").mkdir(parents=True)
    (root / "DEBIAN" / "control").write_text(
        f"Package: {package}\n" + (f"Source: {source} (1.0-1)\n" if source else "")
        + "Version: 1.0-1\nArchitecture: all\nMaintainer: T <t@example.org>\n"
        + _control_description("frobnicate genomic intervals", paragraphs)
    )  # fmt: skip
    doc = root / "usr/share/doc" / package
    doc.mkdir(parents=True)
    for name, data in files.items():
        (doc / name).write_bytes(data.encode() if isinstance(data, str) else data)
    out = tmp / "debs"
    out.mkdir(exist_ok=True)
    deb = out / f"{package}_1.0-1_all.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "-b", str(root), str(deb)], check=True, capture_output=True)
    return deb


def test_the_extended_description_leaves_out_the_synopsis_and_the_packaging_paragraphs():
    field = _control_description("short synopsis", [ABOUT, "This package contains the development files."])
    text = field.split(": ", 1)[1]
    assert fr.extended_description(text) == ABOUT
    two = _control_description("s", ["First paragraph here.", "Second one,\nfolded over two lines."]).split(": ", 1)[1]
    assert fr.extended_description(two) == "First paragraph here. Second one, folded over two lines."
    assert fr.extended_description("only a synopsis") == ""


def test_a_sentence_shared_by_several_descriptions_is_a_stock_line():
    descriptions = [f"Package {name} does one thing well. {STOCK}" for name in ("a", "b", "c")] + ["Other. Text."]
    stock = fr.boilerplate_of(descriptions)
    assert stock == {fr.normalized(STOCK)}
    assert fr.without(f"Chalk styles strings with colours. {STOCK}", stock) == "Chalk styles strings with colours."
    assert fr.boilerplate_of(descriptions[:2]) == frozenset()  # two packages are not a team's habit


@needs_dpkg
def test_a_package_becomes_one_row_of_its_readme_and_description(tmp_path):
    deb = _deb(tmp_path, "frob", {"README.md.gz": gzip.compress(README.encode())}, [ABOUT])
    rows = list(fr.readme_rows(deb.parent, tmp_path / "x"))
    assert len(rows) == 1
    row = rows[0]
    assert row["domain"] == "debian-readme" and row["id"] == "frob" and row["summary"] == ABOUT
    assert "sorted, merged and counted" in row["text"] and "frob sort" not in row["text"]  # rendered: code left out
    assert ABOUT not in row["text"]  # the paragraph that repeats the description is removed
    assert row["split"] in ("train", "val", "test")


@needs_dpkg
def test_packages_of_one_source_give_one_row_and_stock_lines_leave_the_descriptions(tmp_path):
    about = {p: ABOUT.replace("Frobnicate", p) for p in ("frob-tools", "libfrob-dev", "node-a", "node-b")}
    for i, package in enumerate(about):
        source = "frob" if "frob" in package else package
        text = f"{about[package]} {STOCK}" if package.startswith("node") or i == 0 else about[package]
        _deb(tmp_path, package, {"readme.md": README}, [text], source=source)
    rows = list(fr.readme_rows(tmp_path / "debs", tmp_path / "x"))
    assert [(r["id"], r["title"]) for r in rows] == [("frob", "frob-tools"), ("node-a", "node-a"), ("node-b", "node-b")]
    assert [r["summary"] for r in rows] == [about[r["title"]] for r in rows]  # the line three sources share is gone


@needs_dpkg
def test_markdown_before_rest_and_no_row_without_a_long_readme_or_description(tmp_path):
    rst = "Frobnicate\n==========\n\n" + PROSE * 40
    deb = _deb(tmp_path, "frob", {"README.rst": rst, "README.md": README}, [ABOUT])
    root = fr.extract(deb, tmp_path / "x" / "frob")
    assert fr.find_readme(root / "usr/share/doc/frob")[1] == "markdown"
    assert (
        list(fr.rows_of(_deb(tmp_path, "short", {"README.md": "# Short\n\nToo short."}, [ABOUT]), tmp_path / "y")) == []
    )
    assert list(fr.rows_of(_deb(tmp_path, "terse", {"README.md": README}, ["Frobs."]), tmp_path / "z")) == []
    assert list(fr.rows_of(_deb(tmp_path, "python3-frob", {"README.md": README}, [ABOUT]), tmp_path / "w")) == []


def test_the_domain_reads_no_other_domains_packages():
    from strandline.data.fetch_manuals import MANUAL_PACKAGES
    from strandline.data.fetch_vignettes import VIGNETTE_PACKAGES

    listed = set(fr.README_PACKAGES)
    assert len(listed) == len(fr.README_PACKAGES) > 100
    assert not listed & (set(MANUAL_PACKAGES) | set(VIGNETTE_PACKAGES))
    assert all(fr.DISCOVER.match(f"usr/share/doc/{p}/README.md") for p in listed)
    assert not fr.DISCOVER.match("usr/share/doc/python3-frob/README.md")
    assert fr.DISCOVER.match("usr/share/doc/node-chalk/readme.md.gz")


def test_a_sample_is_fixed_and_independent_of_the_split_hash():
    from strandline.data.fetch_summaries import split_of

    names = [f"pkg{i}" for i in range(2000)]
    first = discover.sample(names, 500)
    assert first == discover.sample(list(reversed(names)), 500) and len(set(first)) == 500
    share = sum(split_of(p) == "train" for p in first) / len(first)
    assert 0.4 < share < 0.6  # a sample drawn by the split's own hash would be all train
    assert discover.sample(names, None) == names
    with pytest.raises(discover.UserInputError):
        discover.sample(names, 0)


@needs_dpkg
def test_the_command_writes_the_domain_file(tmp_path, capsys, monkeypatch):
    _deb(tmp_path, "frob", {"README.md": README}, [ABOUT])
    monkeypatch.setattr(fr, "README_PACKAGES", ("frob",))
    monkeypatch.setattr(fr.build_rows, "__defaults__", (None, ("frob",)))
    fr.main(["--debs", str(tmp_path / "debs"), "--out", str(tmp_path / "out")])
    rows = [json.loads(x) for x in (tmp_path / "out" / "debian-readme.jsonl").read_text().splitlines()]
    assert [r["id"] for r in rows] == ["frob"]
    assert "debian-readme    1 documents" in capsys.readouterr().out
