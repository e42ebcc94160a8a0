"""Which sentences may go into a summary: a rule-based filter for non-prose.

Long documents carry much that is not a sentence of prose: code and shell sessions, markup (reST directives,
Markdown, HTML, LaTeX), tables, reference lists, headings, and boilerplate (licences, copyright lines). A
summary made of such lines reads as garbage whatever its ROUGE, so the summarizer never offers them to the
buffer, and training labels come only from the sentences that pass. The rules look at one sentence at a time
(its raw text, wrapped lines included), use no downloaded data, and do not depend on a domain's style beyond
what prose is in any script: words, spaces between them (or CJK characters), and a sentence terminator.

``non_prose(text)`` returns the reason a sentence is rejected (one of ``REASONS``) or None for prose. One kind of
markup needs the lines around a sentence: a reST comment (``.. XXX ...`` and the indented block under it, a note to
the maintainers that no reader sees) is prose-like text that is never rendered; ``RstComments`` finds such sentences
while the document streams.
"""

from __future__ import annotations

import re

from strandline.data.segment import LOWERCASE_NAME, Sentence, count_words, item_body

MIN_WORDS = 4  # shorter "sentences" are headings, captions and fragments ("Hi.", "Introduction")
SHORT_QUESTION = 12  # a question shorter than this is a heading (Markdown's "### Why?" reads as one once rendered)

REASONS = ("fragment", "heading", "code", "markup", "table", "reference", "boilerplate", "symbols")

# a section number, then a capital: "1.1 What is it?", "2 Quick start!", "A.3 Why?" (a one-line sentence that begins
# so is a heading whatever its end)
_NUMBERED = re.compile(r"^(?:\d+(?:\.\d+)+|\d{1,2}|[A-Z](?:\.\d+)+)\.?\s+[A-Z]")
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
    re.compile(r"</?[a-zA-Z][^>]*>|&[a-z]+;|<!--|-->"),  # HTML tags, entities and comments
    re.compile(r"```|^\s*>\s"),  # Markdown code fences (run into the next line) and block quote markers
    re.compile(r"(?m)^\s*`{1,3}[A-Za-z][\w+-]*\s*$"),  # a fence's info string on its line ("`python"): code follows
    re.compile(r"^\s*#{1,6} |\]\(|!\[|^\s*[*+-] \[[ x]\]"),  # Markdown headings, links, images, task lists
    re.compile(r"`[^`]+`_|\|[\w -]+\||\[\d+\]_|:\w+:`"),  # reST links, substitutions, footnotes, roles
    re.compile(r"`[^`\n]+`|\*\*[^*]+\*\*|\b__\w[^_]*__\b|^\s*\|\s"),  # inline code, bold, reST line blocks
    re.compile(r"^\s*\*\*(?=\w)|[.!?:]\*\*(?=\s|$)"),  # bold cut by a sentence end: "**Note that ...", "models.** For"
]
_TABLE = [re.compile(r"\|.*\||\+-+\+|(\S {3,}\S.*){3,}"), re.compile(r"\t.*\t")]
_REFERENCE = [
    re.compile(r"^\s*\[\d+\]|\bIn Proceedings\b|\bProceedings of\b|\barXiv\b|\bdoi:|\bISBN\b|\bpp\. \d"),
    re.compile(r"https?://|www\.\w"),
    re.compile(r"(?<![\w.@])@[A-Za-z][\w:-]*\d\d"),  # a Pandoc citation key in the text: "published as @Zhu1997"
    re.compile(r"(\b[A-Z][a-z]+, [A-Z]\.(, | and )){2,}|\(\d{4}[a-z]?\)\.\s*[A-Z]|\b(19|20)\d\d[a-z]?\.\s+[A-Z]"),
]
_BOILERPLATE = re.compile(
    r"copyright|all rights reserved|\blicen[cs]e[ds]?\b|permission is hereby granted|without warranty|"
    r"table of contents|acknowledg|this page intentionally|\bpowered by\b|^\s*(see also|note|warning)\s*:|"
    # the clauses of the BSD, MIT and zlib licences that manuals carry without naming a licence
    r"redistributions? (?:and use|of source|in binary)|merchantability|fitness for a particular purpose|"
    r"must not be misrepresented|plainly marked as such|provided [\"']?as is\b|to endorse or promote products|"
    # a colophon: "This document was generated on March 11, 2023 using texi2html 1.82.", "This vignette was built with ..."
    r"^\W*(?:this|the)\s+(?:[\w-]+\s+)?(?:document|documentation|page|manual|vignette|website|site)\s+"
    r"(?:was|were|is|are|has\s+been|have\s+been)\s+(?:automatically\s+)?(?:generated|created|produced|built)\b"
    r"[^.]*?\b(?:using|by|with)\b|"
    # a version note alone, as Sphinx renders versionadded/versionchanged/deprecated: "New in version 3.2.", "Changed
    # in version 3.4, 3.5." (with a sentence of its own after a colon, "Deprecated since version 3.4: use X.", prose)
    r"^\W*(?:new|changed|added|deprecated|removed)\s+(?:in|since)\s+version\s+[\w.]+(?:\s*,\s*[\w.]+)*\W*$",
    re.IGNORECASE,
)

# a credit line of a changelog or What's New page, nothing but who did it: "Patch by Roger Serwy and Zackery Spytz.",
# "(Contributed by Raymond Hettinger in bpo-12345.)", "Many thanks to John W." (a sentence with a subject of its own,
# "Python was created by Guido van Rossum.", is prose). A name is matched whole (possessive), so a word of many
# capitals is never tried as every split of it (exponential backtracking on "Thanks to ABCDEFGHIJKLMNOPQRSTUVWXYZ x")
_ATTRIBUTION = re.compile(
    r"^\(?(?i:(?:original|initial|many|patch(?:es)?|contributed|contribution|reported|suggested|written|fixe[sd]|fix|"
    r"revisions?|reviewed|review|documentation|idea|solution|problem|thanks|work|updated|implemented|based|on|a|an|"
    r"and)\s+){1,4}(?i:by|to|from)\s+"
    r"(?:(?:[A-Z][\w'\u2019.-]*+|van|von|de|der|da|di|le|and|of|in|et|al\.?|&|(?:bpo|gh)-\d++|#\d++|\d++)[,;]?\s*){1,12}"
    r"[.!]?\)?\.?$"
)


def _letters(text: str) -> float:
    """Fraction of the non-space characters that are letters (any script)."""
    chars = [c for c in text if not c.isspace()]
    return sum(c.isalpha() for c in chars) / max(1, len(chars))


def non_prose(text: str) -> str | None:
    """Why ``text`` (one sentence, raw) is not a summary sentence, or None when it is prose.

    Args:
        text: the sentence as it appears in the document (single newlines of wrapped lines allowed); a list item's
            marker (``segment.LIST_ITEM``) is not part of the sentence.
    Returns:
        One of ``REASONS``, or None.
    """
    text = item_body(text)
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
    if words < 16 and "\n" not in text.strip() and _NUMBERED.match(flat):
        return "heading"  # "2.4 What is a track?": a numbered heading that ends like a question
    if words < SHORT_QUESTION and flat.endswith("?"):
        return "heading"  # "How do TOML types map to Python types?": a FAQ entry or a section title, not a statement
    first = flat.lstrip("\"'(\u201c\u2018[")[:1]
    if (first.islower() and not LOWERCASE_NAME.match(flat)) or first in ",;)]}":
        return "fragment"  # the tail of a sentence cut by a line break or an unknown abbreviation
    if any(p.search(flat) for p in _REFERENCE):
        return "reference"
    if _BOILERPLATE.search(flat) or _ATTRIBUTION.match(flat):
        return "boilerplate"
    if _letters(flat) < 0.7:
        return "symbols"  # numbers, formulas, identifiers: letters under 70% of the characters
    return None


def is_prose(text: str) -> bool:
    """True when ``non_prose(text)`` finds nothing wrong."""
    return non_prose(text) is None


# after "..": what makes the explicit markup a directive, target, footnote/citation or substitution, not a comment
_EXPLICIT = re.compile(r"^(\[[^\]\s]+\]|_|\|[^|]+\|\s|[\w:+-]+::)")


class RstComments:
    """Which sentences lie inside a reST comment, decided in reading order from the raw text (streaming).

    A comment is ``..`` at the start of a line followed by text that is no directive (``.. note::``), target
    (``.. _name:``), footnote or citation (``.. [1]``) or substitution (``.. |x| image::``), together with the
    lines under it indented deeper than the ``..``; blank lines inside the block do not end it. ``..`` alone on
    its line followed by a blank line is an empty comment and takes nothing. (CPython's pages open with such
    blocks: ".. Rules for maintenance: * Anyone can add text to this document.")

    Feed every piece of the document with ``feed`` and ask ``in_comment`` about every sentence, in order, after
    the piece that completes it was fed. Memory: the raw text after the last sentence asked about (the text
    between sentences is whitespace, so a sentence's column is read from it), bounded as the segmenter's window.
    """

    def __init__(self):
        self._tail, self._base = "", 0  # self._tail == document[self._base:]
        self._prev: Sentence | None = None
        self._indent: int | None = None  # the open comment's column ("..")
        self._opened: int | None = None  # ".." alone so far: the column of a comment that has no text yet

    def feed(self, piece: str) -> None:
        self._tail += piece

    def in_comment(self, s: Sentence) -> bool:
        """True when ``s`` (the next sentence) is part of a reST comment, the ``..`` itself included."""
        gap = self._tail[: s.start - self._base]  # whitespace between the previous sentence and this one
        self._tail, self._base = self._tail[s.end - self._base :], s.end
        line = gap.rfind("\n")
        column = len(gap) - line - 1 if line >= 0 or self._prev is None else None  # None: not at a line start
        new_paragraph = self._prev is not None and s.paragraph != self._prev.paragraph
        self._prev = s
        inside = self._classify(s, column, new_paragraph)
        self._wrapped_lines(s.text)
        return inside

    def _classify(self, s: Sentence, column: int | None, new_paragraph: bool) -> bool:
        if self._opened is not None:  # the sentence after a bare ".."
            indent, self._opened = self._opened, None
            if column is None:  # text on the ".." line: a comment unless it is other explicit markup
                self._indent = None if _EXPLICIT.match(s.text) else indent
                return self._indent is not None
            if not new_paragraph and column > indent:  # the comment's text starts on the next line
                self._indent = indent
                return True
        if self._indent is not None:
            if column is None or column > self._indent:
                return True
            self._indent = None
        if column is None or not re.match(r"\.\.(\s|$)", s.text):
            return False
        rest = s.text[2:].lstrip()
        if not rest:
            self._opened = column
        elif not _EXPLICIT.match(rest):
            self._indent = column
        return not rest or self._indent is not None

    def _wrapped_lines(self, text: str) -> None:
        """A sentence's own line breaks: a line at or left of the comment's column ends it (the sentence ran on
        from the comment into what follows); a last line that is a bare ".." opens one."""
        for m in re.finditer(r"\n([ \t]*)(\S[^\n]*)", text):
            if self._indent is not None and len(m.group(1)) <= self._indent:
                self._indent = None
            if m.group(2) == ".." and m.end() == len(text) and self._indent is None:
                self._opened = len(m.group(1))


def comment_flags(text: str, sentences: list[Sentence]) -> list[bool]:
    """``RstComments.in_comment`` of every sentence of a document held in memory."""
    comments = RstComments()
    comments.feed(text)
    return [comments.in_comment(s) for s in sentences]
