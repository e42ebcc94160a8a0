"""Which sentences may go into a summary: a rule-based filter for non-prose.

Long documents carry much that is not a sentence of prose: code and shell sessions, markup (reST directives,
Markdown, HTML, LaTeX), tables, reference lists, headings, and boilerplate (licences, copyright lines). A
summary made of such lines reads as garbage whatever its ROUGE, so the summarizer never offers them to the
buffer, and training labels come only from the sentences that pass. The rules look at one sentence at a time
(its raw text, wrapped lines included), use no downloaded data, and do not depend on a domain's style beyond
what prose is in any script: words, spaces between them (or CJK characters), and a sentence terminator.

``non_prose(text)`` returns the reason a sentence is rejected (one of ``REASONS``) or None for prose.
"""

from __future__ import annotations

import re

from data.segment import count_words

MIN_WORDS = 4  # shorter "sentences" are headings, captions and fragments ("Hi.", "Introduction")

REASONS = ("fragment", "heading", "code", "markup", "table", "reference", "boilerplate", "symbols")

_TERMINATED = re.compile(r"""[.!?\u3002\uff01\uff1f]["'\u201d\u2019)\]\u300d\u300f\uff09]*$""")
_CODE = [
    re.compile(r"^\s*(>>>|\.\.\.\s|\$ |# |%|In \[\d+\]:)"),  # interpreter and shell prompts
    re.compile(r"\\[a-zA-Z]+"),  # TeX control words: \ifdim, \section, \dp8
    re.compile(r"[{};]\s*$|^\s*[{}]|[{}].*[{}]"),  # braces and statement ends
    re.compile(
        r"\b(def|class|struct|void)\s+\w+\s*[(:{]|^\s*(import|from)\s+[\w.]+(\s+import\b|\s*$)|#include|\blambda\s*\w*:"
    ),
    re.compile(r"(==|!=|<=|>=|\+=|-=|->|=>|::|&&|\|\||\w\[\w*\]|\w\(\w+[,=])"),
    re.compile(r"\n {4,}\S|^\t"),  # an indented block inside the sentence
    re.compile(r"\w\(\*{1,2}\w|\\\*|(?<![\w*])\*\.\w{1,5}\b"),  # star-args f(*a, **kw), escaped \*, globs *.py
]
_MARKUP = [
    re.compile(r"^\s*\.\. [\w:|-]+|::\s*$|^\s*:\w[\w ]*:\s"),  # reST directives, literal-block intros, field lists
    re.compile(r"(={3,}|-{3,}|~{3,}|\*{3,}|\^{3,}|\+{3,}|#{3,})"),  # heading underlines, rules
    re.compile(r"</?[a-zA-Z][^>]*>|&[a-z]+;"),  # HTML tags and entities
    re.compile(r"^\s*#{1,6} |\]\(|!\[|^\s*[*+-] \[[ x]\]"),  # Markdown headings, links, images, task lists
    re.compile(r"`[^`]+`_|\|[\w -]+\||\[\d+\]_|:\w+:`"),  # reST links, substitutions, footnotes, roles
    re.compile(r"`[^`\n]+`|\*\*[^*]+\*\*|\b__\w[^_]*__\b|^\s*\|\s"),  # inline code, bold, reST line blocks
]
_TABLE = [re.compile(r"\|.*\||\+-+\+|(\S {3,}\S.*){3,}"), re.compile(r"\t.*\t")]
_REFERENCE = [
    re.compile(r"^\s*\[\d+\]|\bIn Proceedings\b|\bProceedings of\b|\barXiv\b|\bdoi:|\bISBN\b|\bpp\. \d"),
    re.compile(r"https?://|www\.\w"),
    re.compile(r"(\b[A-Z][a-z]+, [A-Z]\.(, | and )){2,}|\(\d{4}[a-z]?\)\.\s*[A-Z]|\b(19|20)\d\d[a-z]?\.\s+[A-Z]"),
]
_BOILERPLATE = re.compile(
    r"copyright|all rights reserved|\blicen[cs]e[ds]?\b|permission is hereby granted|without warranty|"
    r"table of contents|acknowledg|this page intentionally|\bpowered by\b|^\s*(see also|note|warning)\s*:",
    re.IGNORECASE,
)


def _letters(text: str) -> float:
    """Fraction of the non-space characters that are letters (any script)."""
    chars = [c for c in text if not c.isspace()]
    return sum(c.isalpha() for c in chars) / max(1, len(chars))


def non_prose(text: str) -> str | None:
    """Why ``text`` (one sentence, raw) is not a summary sentence, or None when it is prose.

    Args:
        text: the sentence as it appears in the document (single newlines of wrapped lines allowed).
    Returns:
        One of ``REASONS``, or None.
    """
    words = count_words(text)
    if words < MIN_WORDS:
        return "fragment"
    flat = " ".join(text.split())
    if any(p.search(text) for p in _MARKUP):
        return "markup"
    if any(p.search(text) for p in _CODE):
        return "code"
    if any(p.search(text) for p in _TABLE):
        return "table"
    if not _TERMINATED.search(flat):
        return "heading" if words < 16 and "\n" not in text.strip() else "fragment"
    first = flat.lstrip("\"'(\u201c\u2018[")[:1]
    if first.islower() or first in ",;)]}":
        return "fragment"  # the tail of a sentence cut by a line break or an unknown abbreviation
    if any(p.search(flat) for p in _REFERENCE):
        return "reference"
    if _BOILERPLATE.search(flat):
        return "boilerplate"
    if _letters(flat) < 0.7:
        return "symbols"  # numbers, formulas, identifiers: letters under 70% of the characters
    return None


def is_prose(text: str) -> bool:
    """True when ``non_prose(text)`` finds nothing wrong."""
    return non_prose(text) is None
