"""The one base class of user-facing errors, at the lowest layer so that every package can raise it.

A ``UserInputError`` is a problem with what the user gave (a path, a file's contents, an option, a model
that does not fit the data). ``str(e)`` is one line that names the culprit; the CLI prints it and exits 2,
with no traceback. FASTA, document, model-loading, scan and summarizer errors all derive from it.
"""

from __future__ import annotations


class UserInputError(ValueError):
    """Bad input or usage; the message is one line for users."""


def first_line(e: BaseException) -> str:
    """The first line of ``str(e)``, or the exception's type name when it has no message: one line for users."""
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


class TrainingDiverged(RuntimeError):
    """Training met a non-finite loss or weight and stopped before saving it: the input was valid but there is
    no result, so the CLI prints the one-line message and exits 1 (not 2: no option or file was malformed)."""
