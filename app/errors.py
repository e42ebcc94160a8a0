"""Compatibility names for the one user-error base, ``models.errors.UserInputError``.

Every user-facing error (FASTA, document, model, scan, summarizer, CLI options) derives from
``UserInputError``; the CLI catches that one class. ``UserError`` is the name app code raises for bad
options. There is no registry: a new error class only needs the right base.
"""

from __future__ import annotations

from models.errors import UserInputError

UserError = UserInputError


class UsageError(UserInputError):
    """Bad command-line usage (an unknown option, a value of the wrong type, a missing argument)."""


USER_ERRORS: tuple[type[BaseException], ...] = (UserInputError,)


def register_user_error(cls: type[BaseException]) -> type[BaseException]:
    """Kept for callers not yet updated: checks that ``cls`` already derives from ``UserInputError``."""
    if not issubclass(cls, UserInputError):
        raise TypeError(f"{cls.__name__} must subclass models.errors.UserInputError to be reported as a user error")
    return cls
