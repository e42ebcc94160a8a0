"""The CLI's own user error: bad command-line usage.

Every user-facing error derives from ``strandline.errors.UserInputError`` (FASTA, documents, models, scan,
summarizer, options), and ``strandline.app.cli.main`` catches that one base: a new error class only needs the
right base, there is no registry.
"""

from __future__ import annotations

import re

from strandline.errors import UserInputError
from strandline.files import naming_write_errors


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
    human = _internal_value_message(text)
    if human:
        return human
    keys = re.findall(r'Parser key "([^"]+)":', text)
    inner = re.search(r"Expected a <class '([\w.]+)'>\. Got value: (.*)$", text, re.MULTILINE)
    given = re.search(r"(?:Given|Got) value: (.*)$", text, re.MULTILINE)
    if not keys or given is None:
        return " ".join(x.strip() for x in text.splitlines() if x.strip()) or "bad arguments"
    key = ".".join(keys)
    value = (inner or given).group(inner.lastindex if inner else 1).strip()
    nested = re.match(r"(?:NestedArg\(key='([^']*)'|Namespace\((\w+)=)", value)
    if nested:  # the value of a plain option, as jsonargparse holds a dotted option given for it
        sub = nested.group(1) or nested.group(2)
        return f"--{key}.{sub}: --{key} takes a value, not sub-options (give --{key} VALUE)"
    expected = (types or {}).get(key) or (inner.group(1) if inner else None)
    return f"--{key}: invalid value {value!r}" + (f" (expected {expected})" if expected else "")


def _internal_value_message(text: str) -> str | None:
    """jsonargparse's messages of a section option given a word (``--trainer foo``) and of a ``--config`` that is
    not a mapping, said for users (a dotted option on a plain value, shown by jsonargparse as
    ``NestedArg(key='x', val='3')`` or ``Namespace(x=1)``, is said by ``usage_message`` itself)."""
    section = re.match(r'Parser key "([^"]+)":\s*Unable to load config (\S+)\s+- ', text)
    if section:
        return f"--{section.group(1)}: {section.group(2)} is neither a config file nor a YAML mapping of its options"
    unexpected = re.match(r"Unexpected config: (.*)", text, re.DOTALL)
    if unexpected:
        given = " ".join(unexpected.group(1).split())
        return f"--config: expected a YAML file or mapping of options, got {given!r}"
    return None


STDOUT = "<stdout>"
"""How standard output is named in an ``OSError`` raised while writing it (a write has no file name)."""


def writing_stdout():
    """A block whose ``OSError`` without a file name (ENOSPC on ``> /dev/full``, EIO, EPIPE) names standard output."""
    return naming_write_errors(STDOUT)
