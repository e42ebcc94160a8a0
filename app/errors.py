"""User errors: bad input or usage. The CLI prints them as one line and exits 2, with no traceback."""

from __future__ import annotations

from data.fasta import FastaError
from models.io import ModelLoadError


class UserError(Exception):
    """A problem with the user's input or arguments; ``str(e)`` is the one line shown."""


USER_ERRORS: tuple[type[BaseException], ...] = (UserError, FastaError, ModelLoadError)


def register_user_error(cls: type[BaseException]) -> type[BaseException]:
    """Let a package's own error class (e.g. a document reader's) be reported like a UserError."""
    global USER_ERRORS
    if cls not in USER_ERRORS:
        USER_ERRORS = (*USER_ERRORS, cls)
    return cls
