"""The discovery of the Debian packages that give a summarization domain its rows (``--discover``)."""

import fcntl
import gzip
import json
import re
import shutil
from pathlib import Path

import pytest

import tests.test_vignettes as tv
from strandline.data import discover as disc
from strandline.data import fetch_manuals as fm
from strandline.data import fetch_vignettes as fv
from strandline.errors import UserInputError

CONTENTS = (
    "usr/lib/R/site-library/Frob/doc/Frob.Rmd                     gnu-r/r-cran-frob\n"
    "usr/lib/R/site-library/Frob/doc/Frob.html                    gnu-r/r-cran-frob\n"
    "usr/lib/R/site-library/Short/doc/intro.Rmd                   gnu-r/r-cran-short,gnu-r/r-cran-short2\n"
    "usr/lib/R/site-library/Big/doc/a.Rmd                         gnu-r/r-cran-big\n"
    "usr/lib/R/site-library/Gone/doc/a.Rmd                        gnu-r/r-cran-gone\n"
    "usr/share/doc-base/frob-manual                               doc/frob-doc\n"
    "usr/share/doc/r-cran-other/README.Rmd                        gnu-r/r-cran-other\n"
)
DUMPAVAIL = (
    "Package: r-cran-frob\nVersion: 1.0-1\nSection: gnu-r\nSize: 20000\n\n"
    "Package: r-cran-short\nSection: gnu-r\nSize: 9000\n\n"
    "Package: r-cran-short2\nSection: non-free/gnu-r\nSize: 9000\n\n"
    "Package: r-cran-big\nSection: gnu-r\nSize: 90000000\n\n"
    "Package: frob-doc\nSection: doc\nSize: 500\n\nPackage: frob-doc\nSection: doc\nSize: 700\n\n"
)


def _index(tmp: Path, text: str = CONTENTS) -> Path:
    path = tmp / "Contents-bookworm-all.gz"
    path.write_bytes(gzip.compress(text.encode()))
    return path


def test_the_contents_index_names_the_packages_that_ship_the_domains_files(tmp_path):
    index = _index(tmp_path)
    assert disc.packages_with(fv.DISCOVER, [index]) == {"r-cran-frob", "r-cran-short", "r-cran-short2",
                                                        "r-cran-big", "r-cran-gone"}  # fmt: skip
    assert disc.packages_with(fm.DISCOVER, [index]) == {"frob-doc"}
    bad = tmp_path / "bad.gz"
    bad.write_bytes(gzip.compress(CONTENTS.encode())[:40])
    with pytest.raises(UserInputError, match=r"bad.gz: not a readable Contents index") as e:
        disc.packages_with(fv.DISCOVER, [bad])
    assert "\n" not in str(e.value)


def test_sizes_and_sections_choose_the_candidates():
    sizes = disc.parse_dumpavail(DUMPAVAIL)
    assert sizes["frob-doc"] == (700, "doc") and sizes["r-cran-short2"] == (9000, "gnu-r")
    found = {"r-cran-frob", "r-cran-short", "r-cran-short2", "r-cran-big", "r-cran-gone"}
    assert disc.candidates(found, sizes, None, None) == ["r-cran-big", "r-cran-frob", "r-cran-short",
                                                         "r-cran-short2"]  # fmt: skip
    assert disc.candidates(found, sizes, 0.01, None) == ["r-cran-short", "r-cran-short2"]  # 10 kB
    assert disc.candidates(found, sizes, None, "doc") == []


@tv.needs_dpkg
def test_discovery_keeps_the_packages_whose_rows_pass_and_resumes_from_its_log(tmp_path):
    good = tv._deb(tmp_path / "a", {"Frob.Rmd": tv.VIGNETTE})
    short = tv._deb(tmp_path / "b", {"intro.Rmd": "# Short\n\nToo short to be a row.\n"}, package="Short")
    calls = []

    def fetch(batch, into):
        calls.append(batch)
        into.mkdir(parents=True)
        for deb in (good, short):
            if deb.name.split("_")[0] in batch:
                shutil.copy(deb, into)
        return into

    log = tmp_path / "found.jsonl"
    todo = ["r-cran-frob", "r-cran-gone", "r-cran-short"]
    assert disc.discover(todo, fv.rows_of, log, fetch) == ["r-cran-frob"]
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert lines == [{"package": "r-cran-frob", "rows": 1}, {"package": "r-cran-gone", "error": "not downloaded"},
                     {"package": "r-cran-short", "rows": 0}]  # fmt: skip
    with log.open("a") as f:
        f.write('{"package": "r-cran-to')  # a run stopped mid-line
    assert disc.discover([*todo, "r-cran-frob2"], fv.rows_of, log, fetch) == ["r-cran-frob"]
    assert calls == [tuple(todo), ("r-cran-frob2",)]  # what the log has is not read again
    assert set(disc.read_log(log)) == {*todo, "r-cran-frob2"}  # the torn line kept to its own line, skipped


@tv.needs_dpkg
def test_the_discover_command_prints_the_list(tmp_path, monkeypatch, capsys):
    good = tv._deb(tmp_path / "a", {"Frob.Rmd": tv.VIGNETTE})
    index = _index(tmp_path)
    monkeypatch.setattr(disc, "contents_index", lambda arch, cache: index)
    monkeypatch.setattr(disc, "available", lambda: disc.parse_dumpavail(DUMPAVAIL))

    def fetch(batch, into):
        into.mkdir(parents=True)
        if "r-cran-frob" in batch:
            shutil.copy(good, into)
        return into

    monkeypatch.setattr(disc, "download", fetch)
    log = tmp_path / "found.jsonl"
    fv.main(["--discover", str(log), "--max-mb", "1"])
    out = capsys.readouterr()
    assert out.out == '(\n    "r-cran-frob",\n)\n' + f"# packages with rows: 1 (log: {log})\n"
    assert "3 to read" in out.err  # frob, short, short2 (big is over 1 MB; gone is not in the archive)
    assert not (tmp_path / "out").exists()
    monkeypatch.setattr(disc, "contents_index", lambda arch, cache: tmp_path / "missing.gz")
    assert fv.main(["--discover", str(log)]) == 2
    err = capsys.readouterr().err
    assert re.fullmatch(r"fetch_vignettes: error: .*missing.gz: not a readable Contents index.*\n", err), err


@pytest.mark.parametrize("text", ["my notes\n", '{"package": "a", "rows": 1}\nnot json\n{"package": "b", "rows": 0}\n',
                                  "[1, 2]\n"])  # fmt: skip
def test_a_file_that_is_not_a_discovery_log_is_refused_untouched(tmp_path, text):
    log = tmp_path / "notes.txt"
    log.write_text(text)
    with pytest.raises(UserInputError, match=r"notes.txt: not a discovery log \(line \d\); give a new file") as e:
        disc.discover(["r-cran-frob"], fv.rows_of, log, lambda batch, into: pytest.fail("nothing is downloaded"))
    assert "\n" not in str(e.value) and log.read_text() == text


def test_a_log_in_use_by_another_run_is_refused(tmp_path):
    log = tmp_path / "found.jsonl"
    log.write_text('{"package": "r-cran-a", "rows": 1}\n')
    with log.open("a") as other:  # another run holds the lock
        fcntl.flock(other.fileno(), fcntl.LOCK_EX)
        with pytest.raises(UserInputError, match=r"found.jsonl: another discovery run is appending to it"):
            disc.discover(["r-cran-b"], fv.rows_of, log, lambda batch, into: pytest.fail("nothing is downloaded"))
    assert log.read_text() == '{"package": "r-cran-a", "rows": 1}\n'
    assert disc.discover(["r-cran-a"], fv.rows_of, log, lambda batch, into: pytest.fail("all read")) == ["r-cran-a"]


def test_a_binary_file_given_as_the_log_is_refused_untouched(tmp_path):
    log = tmp_path / "found.jsonl"
    log.write_bytes(b"\x1f\x8b\x08\x00\xff\xfe binary")
    with pytest.raises(UserInputError, match=r"found.jsonl: not a discovery log \(.*\); give a new file") as e:
        disc.discover(["r-cran-frob"], fv.rows_of, log, lambda batch, into: pytest.fail("nothing is downloaded"))
    assert "\n" not in str(e.value) and log.read_bytes() == b"\x1f\x8b\x08\x00\xff\xfe binary"
