"""Safe outputs: write to a temporary name beside the target and rename only when complete.

One helper for every writer in the project (tracks, summaries, caches, states, model directories), so a
reader never sees a partial file under the final name, and a failure leaves the old file (or nothing).
``check_output`` refuses, before any work starts, an output that is one of the inputs or a directory.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from strandline.errors import UserInputError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def file_mode(directory: bool = False) -> int:
    """The usual permissions of a new file (0666 & ~umask) or directory (0777 & ~umask); ``mkstemp``,
    ``mkdtemp`` and safetensors make 0600 / 0700 instead."""
    return (0o777 if directory else 0o666) & ~_umask()


@contextmanager
def atomic_output(path: str | Path, mode: int | None = None) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; rename it onto ``path`` only if the block succeeds.

    The temporary file gets the usual permissions (0666 & ~umask; ``mkstemp`` alone makes 0600) unless
    ``mode`` is given. On any exception the temporary file is removed and ``path`` is left untouched.
    An existing ``path`` that is a device or a pipe (``/dev/null``, a FIFO) is never replaced by a rename:
    the finished temporary file is copied into it.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    stream = is_stream(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=None if stream else path.parent)
    os.close(fd)
    os.chmod(tmp, mode if mode is not None else file_mode())
    try:
        with naming_write_errors(path):  # ENOSPC from a write names no file: say which output failed
            yield Path(tmp)
            if stream:
                with open(tmp, "rb") as src, open(path, "wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 22)
            else:
                os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


@contextmanager
def naming_write_errors(name: str | Path) -> Iterator[None]:
    """Give an ``OSError`` raised in the block without a file name (a write to an open file: ENOSPC, EIO, EPIPE)
    the name ``name``, so that its one-line message says which output could not be written."""
    try:
        yield
    except OSError as e:
        if e.filename is not None:
            raise
        raise OSError(e.errno, f"cannot write: {e.strerror or e}", str(name)) from None


def is_stream(path: str | Path) -> bool:
    """True for an existing path that is neither a regular file nor a directory (a device, a FIFO)."""
    p = Path(path)
    return p.exists() and not p.is_file() and not p.is_dir()


def reads_once(path: str | Path) -> bool:
    """True for an input that can be read only once, as it streams: '-' (stdin) or a pipe, FIFO or device
    (``<(zcat genome.fa.gz)`` is ``/dev/fd/63``, a pipe)."""
    return str(path) == "-" or is_stream(path)


def atomic_write_text(path: str | Path, text: str, encoding: str = "utf-8") -> None:
    """Write ``text`` to ``path`` atomically."""
    with atomic_output(path) as tmp:
        tmp.write_text(text, encoding=encoding)


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically."""
    with atomic_output(path) as tmp:
        tmp.write_bytes(data)


def same_file(a: str | Path, b: str | Path) -> bool:
    """True when two paths name the same file (resolving links, relative paths and hard links)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return Path(a).resolve() == Path(b).resolve()


def check_output(path: str | Path, inputs: Iterable[str | Path] = (), what: str = "output") -> Path:
    """Refuse an output that is a directory, one of ``inputs``, or in a folder that cannot be written.

    Raises:
        UserInputError: with one line naming the path and the reason.
    """
    path = Path(path)
    if path.is_dir():
        raise UserInputError(f"{path}: the {what} is a directory; give a file name")
    for p in inputs:
        if str(p) != "-" and Path(p).exists() and path.exists() and same_file(path, p):
            raise UserInputError(f"{path}: the {what} is also an input; refusing to overwrite it")
    parent = path.parent if str(path.parent) else Path(".")
    existing = next((d for d in (parent, *parent.parents) if d.exists()), Path("."))
    if not existing.is_dir():
        raise UserInputError(f"{path}: {existing} is not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UserInputError(f"{path}: cannot write in {existing} (permission denied)")
    return path
