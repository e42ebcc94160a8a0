"""The CLI's own user error: bad command-line usage.

Every user-facing error derives from ``models.errors.UserInputError`` (FASTA, documents, models, scan,
summarizer, options), and ``app.cli.main`` catches that one base: a new error class only needs the
right base, there is no registry.
"""

from __future__ import annotations

import re

from models.errors import UserInputError


class UsageError(UserInputError):
    """Bad command-line usage (an unknown option, a value of the wrong type, a missing argument)."""


def usage_message(msg: str, types: dict[str, str] | None = None) -> str:
    """jsonargparse's multi-line type errors -> one line naming the option, e.g. ``--top_k: invalid value 'x'
    (expected int | None)`` or, nested, ``--model.model.d_model: invalid value 'abc' (expected int)``.

    Args:
        msg: the ``ArgumentError`` text.
        types: shown type per option key, when the caller knows it better than the message.
    """
    text = str(msg)
    keys = re.findall(r'Parser key "([^"]+)":', text)
    inner = re.search(r"Expected a <class '([\w.]+)'>\. Got value: (.*)$", text, re.MULTILINE)
    given = re.search(r"(?:Given|Got) value: (.*)$", text, re.MULTILINE)
    if not keys or given is None:
        return " ".join(x.strip() for x in text.splitlines() if x.strip()) or "bad arguments"
    key = ".".join(keys)
    value = (inner or given).group(inner.lastindex if inner else 1).strip()
    expected = (types or {}).get(key) or (inner.group(1) if inner else None)
    return f"--{key}: invalid value {value!r}" + (f" (expected {expected})" if expected else "")
