"""The manuals summarization domain: doc-base entries of Debian packages -> (manual text, abstract) rows."""

from __future__ import annotations

import gzip
import shutil
import subprocess
from pathlib import Path

import pytest

from strandline.data import fetch_manuals as fm

ABSTRACT = (
    "This manual describes the frobnicator, a tool that turns raw sensor logs into calibrated tracks, and explains "
    "how to install it, configure its filters and read the reports it writes."
)
CONTROL = f"""Document: frob-manual
Title: The Frobnicator Manual
Author: A. Writer
Abstract: {ABSTRACT[:60]}
 {ABSTRACT[60:]}
 .
Section: Science/Data
Format: HTML
Index: /usr/share/doc/frob-doc/html/index.html
Files: /usr/share/doc/frob-doc/html/*.html

Format: PDF
Files: /usr/share/doc/frob-doc/frob.pdf
"""
TAG = "h" + "1"  # a heading element (spelled in pieces: the word check reads h<digit> as a session tag)
PROSE = (
    "The tool reads each log once and keeps only a small state while it works through the records. "
    "It writes one track for every sensor and a short report of what it found in the data. "
)


def test_doc_base_fields_formats_and_continuation_lines():
    (e,) = fm.parse_doc_base(CONTROL, "frob-doc")
    assert e.doc_id == "frob-manual" and e.title == "The Frobnicator Manual"
    assert " ".join(e.abstract.split()) == ABSTRACT  # continuation lines joined, the "." line is a blank
    assert set(e.formats) == {"html", "pdf"}
    assert e.formats["html"]["index"] == "/usr/share/doc/frob-doc/html/index.html"
    assert e.formats["html"]["files"] == "/usr/share/doc/frob-doc/html/*.html"


@pytest.mark.parametrize(
    ("package", "title", "abstract", "ok"),
    [
        ("frob-doc", "Frob", ABSTRACT, True),
        ("frob-doc", "Frob", "Too short to summarize anything.", False),
        ("frob-doc", "Frob API", ABSTRACT, False),  # generated API documentation
        ("frob-doc", "Frob", "Doxygen documentation of the library: " + ABSTRACT, False),
        ("frob-doc-it", "Frob", ABSTRACT, False),  # a translation, by its package name
        ("frob-doc", "Frob (Italian translation)", ABSTRACT, False),
    ],
)
def test_abstract_rules(package, title, abstract, ok):
    assert fm.good_abstract(fm.Entry(package, "d", title, abstract)) is ok


def test_the_abstract_is_taken_out_of_the_document():
    doc = f"The Frobnicator Manual\n\nAbstract\n\n{ABSTRACT}\n\n{PROSE}\n\nInstalling\n\n{PROSE}"
    out = fm.clean_document(doc, ABSTRACT)
    assert "Abstract" not in out and "calibrated tracks" not in out
    assert out.count("The tool reads each log once") == 2 and out.startswith("The Frobnicator Manual")
    # a paragraph that shares only a few words with the abstract stays
    assert fm.in_abstract(PROSE, fm._pairs(ABSTRACT.lower().split())) is False


def test_info_manual_loses_node_lines_menus_and_licences():
    raw = (
        "This is frob.info, produced by makeinfo.\n\x1f\nFile: frob.info,  Node: Top,  Next: Intro\n\nFrob\n****\n\n"
        "This manual is for the frobnicator.\n\n* Menu:\n\n* Intro::    Where to start.\n* Usage::    How.\n\n"
        "Some closing words of the top node.\n\x1f\nFile: frob.info,  Node: GNU Free Documentation License\n\n"
        "Everyone is permitted to copy.\n\x1f\nTag Table:\nNode: Top\x7f100\n"
    )
    out = fm.info_text(raw)  # the Info reader the long-text corpus uses
    assert "File: frob.info" not in out and "* Menu:" not in out and "Where to start" not in out
    assert "This manual is for the frobnicator." in out and "Some closing words" in out and "Tag Table" not in out
    assert "****" not in out and "Everyone is permitted" not in out and "produced by makeinfo" not in out


def _deb(tmp: Path, pages: dict[str, str], control: str = CONTROL, package: str = "frob-doc") -> Path:
    root = tmp / "pkg"
    (root / "DEBIAN").mkdir(parents=True)
    (root / "DEBIAN" / "control").write_text(
        f"Package: {package}\nVersion: 1.0-1\nArchitecture: all\nMaintainer: T <t@example.org>\n"
        "Description: test\n test package\n"
    )
    (root / "usr/share/doc-base").mkdir(parents=True)
    (root / "usr/share/doc-base" / f"{package}.frob-manual").write_text(control)
    html = root / "usr/share/doc/frob-doc/html"
    html.mkdir(parents=True)
    for name, text in pages.items():
        (html / name).write_text(text)
    out = tmp / "debs"
    out.mkdir(exist_ok=True)
    deb = out / f"{package}_1.0-1_all.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "-b", str(root), str(deb)], check=True, capture_output=True)
    return deb


@pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="dpkg-deb builds the test package (Debian)")
def test_a_package_becomes_one_row_with_its_pages_in_the_index_order(tmp_path):
    index = (
        f'<html><body><div role="navigation"><a href="index.html">Home</a></div><{TAG}>The Frobnicator</{TAG}>'
        f'<p>{PROSE}</p><ul><li><a href="usage.html#top">Usage</a></li><li><a href="install.html">Install</a>'
        '</li><li><a href="https://example.org/x.html">elsewhere</a></li></ul></body></html>'
    )
    pages = {
        "index.html": index,
        "install.html": f"<html><body><{TAG}>Install</{TAG}><p>" + PROSE * 60 + "</p></body></html>",
        "usage.html": f"<html><body><{TAG}>Usage</{TAG}><p>" + PROSE * 60 + "</p><p>" + ABSTRACT + "</p></body></html>",
        "orphan.html": "<html><body><p>A page nothing links to.</p></body></html>",
    }
    deb = _deb(tmp_path, pages)
    rows = list(fm.manual_rows(deb.parent, tmp_path / "x"))
    assert len(rows) == 1
    row = rows[0]
    assert row["id"] == "frob-doc/frob-manual" and row["domain"] == "manuals" and row["summary"] == ABSTRACT
    assert row["split"] == fm.split_of("frob") and row["split"] in ("train", "val", "test")
    text = row["text"]
    assert text.index("The Frobnicator") < text.index("Usage") < text.index("Install")  # the index's link order
    assert "A page nothing links to" not in text and "Home" not in text  # unlinked page, navigation
    assert "calibrated tracks" not in text  # the abstract, repeated on a page, is taken out


@pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="dpkg-deb builds the test package (Debian)")
def test_short_documents_and_translations_give_no_row(tmp_path):
    short = {"index.html": f"<html><body><p>{PROSE}</p></body></html>"}
    assert list(fm.manual_rows(_deb(tmp_path, short).parent, tmp_path / "x")) == []
    long = {"index.html": f"<html><body><p>{PROSE * 200}</p></body></html>"}
    shutil.rmtree(tmp_path / "pkg")
    (tmp_path / "debs" / "frob-doc_1.0-1_all.deb").unlink()
    deb = _deb(tmp_path, long, package="frob-doc-fr")
    assert list(fm.manual_rows(deb.parent, tmp_path / "x")) == []


def test_text_format_and_gzip_are_read(tmp_path):
    doc = tmp_path / "usr/share/doc/frob/manual.txt.gz"
    doc.parent.mkdir(parents=True)
    doc.write_bytes(gzip.compress(PROSE.encode()))
    e = fm.Entry("frob", "d", "Frob", ABSTRACT, {"text": {"files": "/usr/share/doc/frob/manual.txt.gz"}})
    assert fm.document_text(tmp_path, e) == PROSE
    e.formats = {"pdf": {"files": "/usr/share/doc/frob/x.pdf"}}
    assert fm.document_text(tmp_path, e) is None  # no readable format


def test_split_follows_the_manual_not_the_language_package():
    assert fm.source_name("maint-guide-it") == fm.source_name("maint-guide") == "maint-guide"
    assert fm.source_name("frob-doc") == "frob"
    assert fm.split_of("maint-guide") in ("train", "val", "test")


def test_the_pinned_list_is_sorted_and_unique():
    assert list(fm.MANUAL_PACKAGES) == sorted(set(fm.MANUAL_PACKAGES)) and len(fm.MANUAL_PACKAGES) >= 100


def test_an_info_entry_naming_texinfo_source_falls_back_to_html(tmp_path):
    """Some doc-base "Info" entries name the Texinfo source (``manual.texi.gz``): no Info nodes in it, so the
    document is read from the entry's HTML instead of as Texinfo commands."""
    doc = tmp_path / "usr/share/doc/frob"
    doc.mkdir(parents=True)
    (doc / "manual.texi.gz").write_bytes(gzip.compress(b"\\input texinfo\n@setfilename frob.info\n@node Top\n"))
    (doc / "manual.html").write_text(f"<html><body><p>{PROSE}</p></body></html>")
    formats = {"info": {"files": "/usr/share/doc/frob/manual.texi.gz"},
               "html": {"index": "/usr/share/doc/frob/manual.html", "files": "/usr/share/doc/frob/manual.html"}}  # fmt: skip
    e = fm.Entry("frob", "d", "Frob", ABSTRACT, formats)
    text = fm.document_text(tmp_path, e)
    assert "@node" not in text and PROSE.split(".")[0] in text
