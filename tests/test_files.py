"""strandline.files: the one atomic-output helper and the output checks every command uses."""

import os
import stat

import pytest

from strandline.errors import UserInputError
from strandline.files import atomic_output, atomic_write_text, check_output, is_stream


def test_atomic_output_appears_only_when_complete(tmp_path):
    out = tmp_path / "out.txt"
    out.write_text("old")
    with pytest.raises(RuntimeError), atomic_output(out) as tmp:
        tmp.write_text("half")
        raise RuntimeError("killed mid-write")
    assert out.read_text() == "old"  # the old file is untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]  # no temporary left behind
    atomic_write_text(out, "new")
    assert out.read_text() == "new"
    assert stat.S_IMODE(out.stat().st_mode) == 0o666 & ~_umask()  # usual permissions, not mkstemp's 0600


def _umask() -> int:
    m = os.umask(0)
    os.umask(m)
    return m


def test_a_pipe_is_written_in_place_never_replaced(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert is_stream(fifo) and not is_stream(tmp_path) and not is_stream(tmp_path / "missing")
    r = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        atomic_write_text(fifo, "through the pipe")
        assert os.read(r, 100) == b"through the pipe"
    finally:
        os.close(r)
    assert stat.S_ISFIFO(fifo.stat().st_mode)  # still the user's FIFO
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo"]


def test_check_output_refuses_inputs_and_directories(tmp_path):
    doc = tmp_path / "doc.txt"
    doc.write_text("x")
    (tmp_path / "sub").mkdir()
    link = tmp_path / "link.txt"
    link.symlink_to(doc)
    with pytest.raises(UserInputError, match="also an input"):
        check_output(link, [str(doc)])
    with pytest.raises(UserInputError, match="also an input"):
        check_output(tmp_path / "sub" / ".." / "doc.txt", [doc])
    with pytest.raises(UserInputError, match="is a directory"):
        check_output(tmp_path / "sub", [doc])
    with pytest.raises(UserInputError, match="not a directory"):
        check_output(doc / "out.txt", [])
    assert check_output(tmp_path / "new" / "out.txt", [doc, "-"]) == tmp_path / "new" / "out.txt"
