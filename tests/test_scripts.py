"""The data scripts (``python -m strandline.data.fetch_*``) fail as the ``strandline`` command does: one line on
stderr naming the culprit, exit status 2, no traceback."""

from __future__ import annotations

import errno
import subprocess
import sys

import pytest

from strandline.errors import UserInputError, script


def test_a_user_error_is_one_line_and_status_2(capsys):
    @script("fetch_x")
    def main(argv=None):
        raise UserInputError("data.json: not a manifest\n(details a user does not need)")

    assert main([]) == 2
    assert capsys.readouterr().err == "fetch_x: error: data.json: not a manifest\n"


def test_an_os_error_names_its_path(capsys):
    @script("fetch_x")
    def main(argv=None):
        raise OSError(errno.ENOSPC, "No space left on device", "out/x.jsonl")

    assert main([]) == 2
    assert capsys.readouterr().err == "fetch_x: error: out/x.jsonl: No space left on device\n"


@pytest.mark.parametrize(("returned", "status"), [(None, 0), (0, 0), (3, 3)])
def test_the_status_of_a_main_that_returns_is_kept(returned, status):
    assert script("fetch_x")(lambda: returned)() == status


def test_other_errors_are_not_hidden():
    @script("fetch_x")
    def main():
        raise KeyError("a bug")  # a bug keeps its traceback

    with pytest.raises(KeyError):
        main()


@pytest.mark.parametrize("module", ["fetch_corpus", "fetch_manuals"])
def test_the_module_exits_with_status_2(tmp_path, module):
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("a user's file\n")
    argv = {
        "fetch_corpus": ["--manifest", str(tmp_path / "missing.json")],
        # refused before any index is downloaded
        "fetch_manuals": [
            "--out",
            str(tmp_path / "out"),
            "--discover",
            str(not_a_folder),
            "--index-cache",
            str(tmp_path / "out"),
        ],
    }[module]
    r = subprocess.run(
        [sys.executable, "-m", f"strandline.data.{module}", *argv], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith(f"{module}: error: ") and len(r.stderr.splitlines()) == 1, r.stderr
    assert not_a_folder.read_text() == "a user's file\n" and not (tmp_path / "out").exists()
