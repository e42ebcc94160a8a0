"""The CLI's own user error: bad command-line usage.

Every user-facing error derives from ``models.errors.UserInputError`` (FASTA, documents, models, scan,
summarizer, options), and ``app.cli.main`` catches that one base: a new error class only needs the
right base, there is no registry.
"""

from __future__ import annotations

from models.errors import UserInputError


class UsageError(UserInputError):
    """Bad command-line usage (an unknown option, a value of the wrong type, a missing argument)."""
