"""The one base class of user-facing errors, at the lowest layer so that every package can raise it.

A ``UserInputError`` is a problem with what the user gave (a path, a file's contents, an option, a model
that does not fit the data). ``str(e)`` is one line that names the culprit; the CLI prints it and exits 2,
with no traceback. FASTA, document, model-loading, scan and summarizer errors all derive from it.
"""

from __future__ import annotations

import errno
import functools
import os
import sys
from collections.abc import Callable


class UserInputError(ValueError):
    """Bad input or usage; the message is one line for users."""


def one_of(name: str, value, allowed, error: type[Exception] = ValueError, where: str = ""):
    """``value`` if it is one of ``allowed``; otherwise ``error`` with one line, ``"{where}{name} must be one of
    a, b, got 'c'"`` (``where``: e.g. ``"recipe.json: "``). One check for a setting read from code, a recipe or a
    saved model, each raising its own error type."""
    if value not in allowed:
        raise error(f"{where}{name} must be one of {', '.join(allowed)}, got {value!r}")
    return value


def first_line(e: BaseException) -> str:
    """The first line of ``str(e)``, or the exception's type name when it has no message: one line for users."""
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


class TrainingDiverged(RuntimeError):
    """Training met a non-finite loss or weight and stopped before saving it: the input was valid but there is
    no result, so the CLI prints the one-line message and exits 1 (not 2: no option or file was malformed)."""


def os_error_message(e: OSError) -> str:
    """One line for an ``OSError``: the path(s) when known, the reason and its errno name, e.g.
    ``out.png: cannot write: No space left on device`` or ``No space left on device [ENOSPC]``."""
    reason = e.strerror or first_line(e)
    paths = [os.fsdecode(p) for p in (e.filename, e.filename2) if p is not None]
    if paths:
        return f"{' -> '.join(paths)}: {reason}"
    code = errno.errorcode.get(e.errno) if e.errno is not None else None
    return f"{reason} [{code}]" if code else reason


def script(prog: str) -> Callable[[Callable[..., int | None]], Callable[..., int]]:
    """Decorate a data script's ``main(argv)`` so that it fails as the ``strandline`` command does: a
    ``UserInputError`` or an ``OSError`` (a download, a full disk) prints ``{prog}: error: <one line>`` on stderr
    and returns exit status 2, never a traceback; Ctrl-C prints one line and returns 130. ``main`` returning None
    counts as 0. Run it as ``raise SystemExit(main())``."""

    def wrap(main: Callable[..., int | None]) -> Callable[..., int]:
        @functools.wraps(main)
        def run(*args, **kwargs) -> int:
            try:
                rc = main(*args, **kwargs)
            except UserInputError as e:
                message = first_line(e)
            except OSError as e:
                message = os_error_message(e)
            except KeyboardInterrupt:
                print(f"{prog}: interrupted", file=sys.stderr)
                return 130
            else:
                return 0 if rc is None else rc
            print(f"{prog}: error: {message}", file=sys.stderr)
            return 2

        return run

    return wrap
