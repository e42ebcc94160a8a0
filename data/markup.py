"""Markup to text while a document streams: HTML, Markdown and reStructuredText read as the prose they render.

A summarizer that reads ``**Note:** see [the guide](https://...)`` or ``<p>Linear <b>attention</b></p>``
sees markup, not sentences, and drops them. ``to_text(pieces, kind)`` turns each piece of the document into
the text a reader sees, keeping the structure that matters to a summary: a heading becomes a paragraph of its
own (a blank line before and after), and so does each list item, which opens with ``segment.ITEM`` (``- ``, for
numbered lists too), as a rendered page shows a bullet (so an item without a full stop is a sentence of its own,
and the summarizer knows it for an item of a list); table cells become lines; code blocks and scripts are left
out, and end the paragraph before them.
It streams: memory is a paragraph of at most 64 lines (Markdown, reST: inline markup may span its lines) or the
parser's pending tag (HTML), whatever the document's length. Character offsets of what follows
count the converted text.

- ``html``: the standard library's incremental ``html.parser``; entities decoded; a definition list's term
  (``dt``) ends with a colon, as reST's do; ``script``, ``style``,
  ``head``, ``nav``, ``footer`` and ``pre`` (code blocks) left out; inline ``code`` kept as text.
- ``markdown`` (also R Markdown ``.Rmd`` and Quarto ``.qmd``): line by line (CommonMark's block structure; a
  paragraph's lines are held, at most ``_PARAGRAPH_LINES``, so that a link or bold text may span them): ATX
  and setext headings, fenced and indented code (R Markdown's code chunks too) left out, list and quote markers,
  tables left out, links (an autolink ``<https://...>`` reads as its address), images, emphasis, inline code, HTML
  tags and comments, Pandoc's bracketed citations
  (``[@doe99]``: the bibliography is not at hand), footnotes (``^[...]``, ``[^1]``) and fenced divs' fences (``::: {.note}``); YAML front matter left out but for its ``title:``, kept as a
  heading. Inline R code is not run: a package link (```r Biocpkg("limma")```, ``CRANpkg``, ``Githubpkg``)
  reads as the package's name, any other expression as its code.
- ``rst``: line by line (a paragraph's lines held, as for Markdown): section titles as paragraphs, and a definition
  list's term and its definition as two (``Module json`` over an indented description, as HTML's ``dt`` and ``dd``;
  a term ends with a colon, ``Module json:``, so that it never reads as a heading); the bodies of admonitions and
  topics (``.. note::``,
  ``.. topic:: Abstract``) and of Sphinx's object descriptions (``.. function:: dumps(obj)``: the body, not the
  signature) kept as prose, nested blocks too; other directives, comments, options and literal blocks (``::``)
  left out; roles (``:func:`~os.path.join``` reads ``join``, ``:pep:`498``` reads ``PEP 498``, as Sphinx shows them), interpreted text (```asyncio```),
  inline literals, hyperlinks, emphasis and footnote references removed.
- ``vimhelp``: Vim's help files (``detect``: a first line ``*name.txt*``), line by line: that header line (name,
  Vim's version, a date), ``*tags*``, examples (after a line ending in ``>``), rules and the modeline left out,
  ``|links|`` read as their text, headings (a line with its tag, ``Title ~``, all capitals) and the rows of
  command tables paragraphs of their own; the patch records of Vim's version files (``Patch 8.2.0063`` over
  ``Problem:``, ``Solution:`` and ``Files:`` fields, up to a blank line) left out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, NamedTuple

from strandline.data.segment import ITEM

KINDS = ("text", "markdown", "html", "rst", "vimhelp")
_PARAGRAPH_LINES = 64  # a paragraph's lines held for its inline markup (links, bold across lines): bounded
SUFFIXES = {".md": "markdown", ".markdown": "markdown", ".rmd": "markdown", ".qmd": "markdown", ".html": "html",
            ".htm": "html", ".xhtml": "html", ".rst": "rst", ".rest": "rst"}  # fmt: skip


def detect(path: str, head: str = "") -> str:
    """The markup of a document: from its name (``x.md``, ``x.rst.txt``), else an HTML start or a Vim help file's
    first line in ``head``."""
    for suffix in (s.lower() for s in reversed(Path(path).suffixes)):
        if suffix in SUFFIXES:
            return SUFFIXES[suffix]
    start = head.lstrip()[:200].lower()
    if start.startswith(("<!doctype html", "<html")):
        return "html"
    if _VIM_FIRST.match(head.lstrip("\ufeff")):
        return "vimhelp"
    return "text"


def rendered(pieces: Iterable[str], name: str, markup: str = "auto") -> Iterator[str]:
    """A document's text pieces as the text its markup renders: ``markup`` "auto" detects it from ``name`` (a
    path, or "-") and the first piece, as ``detect`` does; otherwise one of ``KINDS``."""
    from itertools import chain

    it = iter(pieces)
    first = next(it, None)
    if first is None:
        return
    kind = detect("" if name == "-" else name, first) if markup == "auto" else markup
    yield from to_text(chain([first], it), kind)


def render_text(text: str, kind: str) -> str:
    """A whole document of markup ``kind`` (one of ``KINDS``) as plain text: ``to_text`` of one piece."""
    return "".join(to_text([text], kind))


def to_text(pieces: Iterable[str], kind: str) -> Iterator[str]:
    """The pieces of a document of markup ``kind`` (one of ``KINDS``) as plain text, piece by piece."""
    if kind == "text":
        yield from pieces
        return
    conv = {"html": _Html, "markdown": _Markdown, "rst": _Rst, "vimhelp": _VimHelp}[kind]()
    for piece in pieces:
        if out := conv.feed(piece):
            yield out
    if out := conv.close():
        yield out


def _term_end(last: str) -> str:
    """What ends a definition list's term: a colon ("New File:" over "Create a new file editing window.", "Open…:",
    "dumps(obj):"), so that the term reads as the definition's subject, not as a heading that opens a section of
    one sentence; nothing after a sentence's punctuation (a term that ends with "." or ":" already)."""
    return "" if not last or last in ".!?:;," else ":"


# ---- HTML ---------------------------------------------------------------------------------------------------
# block elements: a line break before and after (<dt> has its own: its colon ends its line, ``_Html._end_term``)
_BLOCK = {"p", "div", "section", "article", "main", "blockquote", "li", "ul", "ol", "dl", "dd", "tr",
          "table", "br", "hr", "figure", "figcaption", "aside", "header", "title", "body", "html"}  # fmt: skip
_HEADINGS = {f"h{level}" for level in range(1, 7)}  # the six heading elements
# inline <code> is prose ("calls <code>bc</code> first"); code blocks are <pre>
_SKIP = {"script", "style", "head", "nav", "footer", "pre", "noscript", "svg", "template"}
# elements that are page chrome whatever their tag: navigation bars and sidebars (ARIA roles; the classes Sphinx,
# DocBook and Texinfo give them) and the pilcrow anchors after headings
_SKIP_ROLES = {"navigation", "search", "banner", "contentinfo"}
_SKIP_CLASSES = {"sphinxsidebar", "related", "headerlink", "navheader", "navfooter", "nav-panel", "breadcrumbs",
                 "wy-nav-side", "rst-footer-buttons"}  # fmt: skip
_VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class _Html(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.out: list[str] = []
        self.skip = 0  # depth inside elements whose text is not prose
        self.chrome: list = []  # [tag, depth] of the page-chrome element being skipped (by role or class)
        self.term: str | None = None  # inside a definition list's <dt>: its text's last character so far
        self.space = ""  # a <dt>'s spaces and line breaks not yet written: written if more of the term follows
        self.item = False  # an <li> started and its text has not: its marker (``ITEM``) goes before that text

    def feed(self, data: str) -> str:  # type: ignore[override]
        super().feed(data)
        text, self.out = "".join(self.out), []
        return text

    def close(self) -> str:  # type: ignore[override]
        super().close()
        text, self.out = "".join(self.out), []
        return text

    def handle_starttag(self, tag: str, attrs) -> None:
        if self.chrome:
            self.chrome[1] += tag == self.chrome[0]
            return
        attr = dict(attrs)
        if tag not in _VOID and (
            attr.get("role") in _SKIP_ROLES or _SKIP_CLASSES & set((attr.get("class") or "").split())
        ):
            self.chrome = [tag, 1]
            return
        if tag in ("dt", "dd"):
            self._end_term()  # HTML may leave out </dt>
        if tag in _SKIP:
            self.skip += 1
        elif tag == "dt":
            self._emit("\n")
            self.term = ""
        elif tag in _HEADINGS:
            self._emit("\n\n")
        elif tag in _BLOCK:
            self._emit("\n\n" if tag in ("p", "div", "section", "article", "blockquote") else "\n")
            self.item = self.item or (tag == "li" and not self.skip)  # an item's text may follow in a <p>

    def handle_endtag(self, tag: str) -> None:
        if self.chrome:
            if tag == self.chrome[0]:
                self.chrome[1] -= 1
                self.chrome = self.chrome if self.chrome[1] else []
            return
        if tag in ("dt", "dl"):
            self._end_term()
        if tag in _SKIP:
            self.skip = max(0, self.skip - 1)
        elif tag in _HEADINGS:
            self._emit("\n\n")
        elif tag in _BLOCK:
            self._emit("\n")
            self.item = self.item and tag not in ("li", "ul", "ol")  # an item without text has no marker

    def _emit(self, text: str) -> None:
        """Write ``text``; inside a <dt>, the spaces and line breaks at its end are held back until more of the term
        follows, so that the colon ``_end_term`` writes follows the term's last word ("New File:", also where the
        term holds a heading or ends in a space)."""
        if self.term is None:
            self.out.append(text)
            return
        body = text.rstrip(" \n")
        if body:
            self.out.append(self.space + body)
            self.space = text[len(body) :]
        else:
            self.space += text

    def _end_term(self) -> None:
        """A <dt> ends (at its end tag, or at the <dd>, <dt> or </dl> where HTML lets it be left out): its colon
        (``_term_end``) after its last word, the space held after it dropped."""
        if self.term is not None:
            self.out.append(_term_end(self.term) + "\n")
            self.term, self.space = None, ""

    def handle_startendtag(self, tag: str, attrs) -> None:
        if tag in ("br", "hr") and not self.chrome:
            self._emit("\n")

    def handle_data(self, data: str) -> None:
        if not self.skip and not self.chrome:
            text = re.sub(r"[ \t\r\n]+", " ", data)
            if self.term is not None and text.strip():  # in a <dt>: the last character of its text so far
                self.term = text.rstrip()[-1]
            if self.item and text.strip():  # a list item's first words: its marker before them
                text, self.item = ITEM + text.lstrip(), False
            self._emit(text)


# ---- line-based markup ----------------------------------------------------------------------------------------
class _Lines:
    """A converter of complete lines: ``line(text) -> str | None`` (None: the line is left out). A paragraph's
    lines are held (``hold``, at most ``_PARAGRAPH_LINES``) and given out by ``flush`` with ``inline`` applied to
    them together, so that inline markup may span them."""

    def __init__(self):
        self.partial = ""
        self.para: list[str] = []  # the current paragraph's lines

    @staticmethod
    def inline(text: str) -> str:  # pragma: no cover - interface
        raise NotImplementedError

    def hold(self, text: str, item: bool) -> str | None:
        """Hold a paragraph line; a list item (a paragraph of its own, opened with ``ITEM``) or a full paragraph
        gives out the one before, as ``line`` returns it: before an item with its last newline (so a blank line follows it), else
        without (a paragraph of more than ``_PARAGRAPH_LINES`` lines goes on)."""
        held = self.flush() if self.para and (item or len(self.para) >= _PARAGRAPH_LINES) else ""
        self.para.append(ITEM + text if item else text)
        if not held:
            return None
        return held if item else held[:-1]  # an item ends what came before (a blank line); a long paragraph goes on

    def feed(self, piece: str) -> str:
        text = self.partial + piece
        lines = text.split("\n")
        self.partial = lines.pop()
        return "".join(x + "\n" for x in (self.line(ln) for ln in lines) if x is not None)

    def close(self) -> str:
        last = self.line(self.partial) if self.partial else None
        self.partial = ""
        return ("" if last is None else last + "\n") + self.flush()

    def flush(self) -> str:
        """The held paragraph with its inline markup removed (newlines kept)."""
        if not self.para:
            return ""
        text, self.para = self.inline("\n".join(self.para)), []
        return text + "\n"

    def line(self, text: str) -> str | None:  # pragma: no cover - interface
        raise NotImplementedError


_RMD_PACKAGE = re.compile(
    r"`(?:r|\{r\})\s+(?:\w+::)?(?:Biocpkg|CRANpkg|Githubpkg|Biocannopkg|Biocexptpkg|Rpackage|pkg)"
    r"\(\s*[\"'](?:[^\"'/]*/)?([^\"'/]+)[\"']\s*\)\s*`"
)  # BiocStyle's package links (a GitHub one names "user/package"): a reader sees the package's name
_MD_INLINE = [
    # footnotes (Pandoc, R Markdown, GitHub): a reference [^1] is not the sentence's words (a reader sees a
    # superscript number; the note's text is at the page's end); inline notes ^[...] are gone (_without_notes)
    (re.compile(r"\[\^[^\]\s]+\]"), ""),
    (re.compile(r"!\[([^\]]*)\]\([^)]*\)"), ""),  # images
    (re.compile(r"\[([^\]]*)\]\([^)]*\)"), r"\1"),  # [text](url); a badge's link, [![ci](img)](url), empty
    (re.compile(r"\[([^\]]+)\]\[[^\]]*\]"), r"\1"),  # [text][ref]
    # autolinks: their text is the address (CommonMark shows it), so "docs are at <https://x.org/>." keeps it
    (re.compile(r"<((?:https?|ftp)://[^>\s]+|mailto:[^>\s]+|[\w.+-]+@[\w-]+(?:\.[\w-]+)+)>"), r"\1"),
    (re.compile(r"\s*\[[^\[\]]*-?@[A-Za-z][^\[\]]*\]"), ""),  # Pandoc citations [@doe99; see @roe2001, p. 3]
    (re.compile(r"</?[a-zA-Z][^>]*>"), ""),  # inline HTML tags
    (_RMD_PACKAGE, r"\1"),  # R Markdown: `r Biocpkg("limma")` renders as the package's name
    (re.compile(r"`(?:r|\{r\})\s+([^`]+)`"), r"\1"),  # other inline R code (R Markdown, Quarto): not run, its code
    (re.compile(r"`+([^`]+)`+"), r"\1"),  # inline code
    (re.compile(r"(\*\*|__)(.+?)\1", re.S), r"\2"),  # strong (a paragraph's lines: it may span them)
    (re.compile(r"(?<![\w*\\])([*_])(?!\s)(.+?)(?<![\s\\])\1(?![\w*])", re.S), r"\2"),  # emphasis
    (re.compile(r"\\([!-/:-@\[-`{-~])"), r"\1"),  # backslash escapes: url\_decode, \*args
]
_MD_FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")
_MD_DIV = re.compile(r"^\s{0,3}:{3,}(\s*\{[^}]*\}|\s*[\w-]+)?\s*$")  # Pandoc: ::: {.note}, :::: columns, :::
_MD_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$")
_MD_SETEXT = re.compile(r"^\s{0,3}(=+|-+)\s*$")
_MD_LIST = re.compile(r"^\s*([-*+]|\d+[.)])\s+")
_MD_REFDEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*\S+")
_MD_FRONT = re.compile(r"^---\s*$")
_MD_FRONT_END = re.compile(r"^(---|\.\.\.)\s*$")
_MD_TITLE = re.compile(r"^title:\s*(.*?)\s*$")
_MD_YAML = re.compile(r"^(\s*$|\s|-\s|#|[\w.-]+\s*:)")  # a line YAML front matter can hold
_HTML_COMMENT = re.compile(r"<!--.*?-->", re.S)


def _without_comments(text: str, inside: bool) -> tuple[str | None, bool]:
    """A line without its HTML comments, and whether a comment is still open after it; None for a line that
    is all comment (``inside``: a comment opened on an earlier line)."""
    had = inside or "<!--" in text
    if inside:
        end = text.find("-->")
        if end < 0:
            return None, True
        text = text[end + 3 :]
    text = _HTML_COMMENT.sub("", text)
    start = text.find("<!--")
    still = start >= 0
    if still:
        text = text[:start]
    return (None if had and not text.strip() else text), still


def _substitute(rules: list[tuple[re.Pattern, Any]], text: str) -> str:
    for pattern, repl in rules:
        text = pattern.sub(repl, text)
    return text


def _without_notes(text: str) -> str:
    """Pandoc's inline notes ``^[...]`` removed, brackets nested to any depth inside them (``^[see [a [b]](u)]``);
    a note whose closing bracket is not in ``text`` is kept."""
    out, i = [], 0
    while (start := text.find("^[", i)) >= 0:
        depth, j = 0, start + 1
        while j < len(text):
            depth += {"[": 1, "]": -1}.get(text[j], 0)
            if not depth:
                break
            j += 1
        if depth:  # not closed here: left as it is
            break
        out.append(text[i:start])
        i = j + 1
    return "".join(out) + text[i:]


def md_inline(text: str) -> str:
    """Markdown inline markup removed: footnotes, links and images, emphasis, code spans, HTML tags."""
    return _substitute(_MD_INLINE, _without_notes(text))


class _ParagraphLine(NamedTuple):
    """A line of a Markdown paragraph (list and quote markers removed), held until the paragraph ends."""

    text: str
    item: bool  # it starts a list item: a paragraph of its own


class _Markdown(_Lines):
    def __init__(self):
        super().__init__()
        self.fence: str | None = None  # the open code fence's marker
        self.prev_blank = True
        self.started = False  # a line has been read (front matter can only open the document)
        self.front: str | None = None  # inside YAML front matter: its title so far ("" for none)
        self.held: list[str] = []  # the front matter's lines, read again if it turns out not to be YAML
        self.in_comment = False  # inside an HTML comment that spans lines

    inline = staticmethod(md_inline)

    def line(self, text: str) -> str | None:
        out = self._line(text)
        if isinstance(out, _ParagraphLine):
            return self.hold(out.text, out.item)
        held = self.flush()  # anything else ends the paragraph: a code block, a comment, a table or a rule
        if out is None:
            return held or None  # with a blank line, so its last words do not run into the next paragraph
        return held + out

    def _line(self, text: str) -> str | _ParagraphLine | None:
        first, self.started = not self.started, True
        if first and _MD_FRONT.match(text):  # YAML front matter (R Markdown, Quarto, Jekyll, MkDocs)
            self.front, self.held = "", [text]
            return None
        if self.front is not None:
            if _MD_FRONT_END.match(text):
                title, self.front, self.held = self.front, None, []
                return f"\n{title}\n" if title else None  # the title, as the rendered page shows it
            if not _MD_YAML.match(text):  # not YAML: the first line was a thematic break, read the lines again
                held, self.front, self.held = [*self.held[1:], text], None, []
                out = [x for x in (self.line(h) for h in held) if x is not None]
                return "\n".join(out) if out else None
            self.held.append(text)
            if m := _MD_TITLE.match(text):
                self.front = m.group(1).strip().strip("'\"")
            return None
        if self.fence is None:  # HTML comments are not rendered, whatever they hold
            text, self.in_comment = _without_comments(text, self.in_comment)
            if text is None:
                return None
        m = _MD_FENCE.match(text)
        if self.fence is not None:
            if m and m.group(1)[0] == self.fence[0] and len(m.group(1)) >= len(self.fence):
                self.fence = None
            return None
        if m:
            self.fence = m.group(1)
            return None
        blank = not text.strip()
        was_blank, self.prev_blank = self.prev_blank, blank
        if blank:
            return ""
        if was_blank and text.startswith(("    ", "\t")):  # an indented code block
            self.prev_blank = True
            return None
        if _MD_SETEXT.match(text) and not was_blank:
            return ""  # the underline of a setext heading: the line above becomes a paragraph of its own
        if (h := _MD_HEADING.match(text)) is not None:
            return f"\n{md_inline(h.group(1))}\n"
        if text.lstrip().startswith("|") or _MD_REFDEF.match(text) or re.match(r"^\s*([-*_]\s*){3,}$", text):
            return None  # tables, link reference definitions, thematic breaks
        if _MD_DIV.match(text):
            return None  # a Pandoc fenced div's fence (its content is read)
        text = re.sub(r"^\s{0,3}(>\s?)+", "", text)
        return _ParagraphLine(_MD_LIST.sub("", text), bool(_MD_LIST.match(text)))


_RST_ADORN = re.compile(r"""^([=\-`:'"~^_*+#<>.])\1{2,}\s*$""")
_RST_DIRECTIVE = re.compile(r"^(\s*)\.\.(\s+([\w:-]+)::|\s|$)")
_RST_READ = {"topic", "note", "warning", "tip", "important", "attention", "caution", "danger", "error", "hint",
             "admonition", "seealso", "sidebar", "epigraph", "highlights", "pull-quote", "deprecated",
             "versionadded", "versionchanged"}  # fmt: skip
"""Directives whose body a reader sees as prose (kept); every other directive, and comments, are left out."""
_RST_VERSION = {"versionadded": "New in version", "versionchanged": "Changed in version",
                "deprecated": "Deprecated since version"}  # fmt: skip
_RST_OBJECT = re.compile(
    r"(?:(?:py|c|cpp|js|rst|std):)?(?:function|class|method|attribute|data|exception|decorator|decoratormethod|"
    r"classmethod|staticmethod|abstractmethod|property|describe|object|option|cmdoption|envvar|opcode|pdbcommand|"
    r"member|macro|type|var|struct|union|enum|enumerator|directive|role)"
)
"""Sphinx's object descriptions (``.. function:: dumps(obj)``): the signature is code, the body prose a reader
sees (an API reference's descriptions); so the body is kept and the signature left out."""


_NUMBERED_ROLES = {"pep": "PEP {}", "rfc": "RFC {}", "gh": "gh-{}", "issue": "bpo-{}"}
"""Roles whose text is a number that Sphinx (and CPython's docs) show with a prefix: :pep:`498` -> PEP 498."""


def _role(m: re.Match) -> str:
    """What Sphinx shows of ``:role:`text``` or ``:role:`title <target>```: the title when there is one."""
    role, text, target = m.group(1).rsplit(":", 1)[-1], m.group(2), m.group(3)
    if target is None and role in _NUMBERED_ROLES and re.fullmatch(r"\d+(#[\w-]*)?", text):
        return _NUMBERED_ROLES[role].format(text.split("#")[0])
    return _role_text(text)


def _role_text(text: str) -> str:
    """What Sphinx shows of a cross-reference's text: ``~os.path.join`` -> ``join`` (the last name), ``!name``
    (not linked) -> ``name``."""
    if text.startswith("~"):
        return text[1:].rsplit(".", 1)[-1]
    return text[1:] if text.startswith("!") else text


_RST_INLINE = [
    # :role:`text <target>`, :role:`text` (a target needs a space before it: :meth:`<protocol>_open` is all text)
    (re.compile(r":([\w:.+-]+):`([^`]*?)(\s+<[^<>`]*>)?`"), _role),
    (re.compile(r"``([^`]+)``"), r"\1"),  # inline literals
    (re.compile(r"`([^`<]+?)\s*<[^>]+>`__?"), r"\1"),  # `text <url>`_
    (re.compile(r"`([^`]+)`__?"), r"\1"),  # `text`_
    (re.compile(r"`([^`]+)`:[\w:.+-]+:"), r"\1"),  # `text`:role: (the role after its text)
    # `text`: interpreted text in the default role, which docutils renders as a title reference (italics) and
    # many READMEs use for code (`asyncio`); a reader sees its text
    (re.compile(r"(?<![`\w])`([^`]+)`(?![`\w])"), r"\1"),
    (re.compile(r"\*\*([^*]+)\*\*"), r"\1"),
    (re.compile(r"(?<![\w*\\])\*([^*\s][^*]*?)(?<!\\)\*(?![\w*])"), r"\1"),
    (re.compile(r"\|([\w -]+)\|"), r"\1"),  # substitutions
    (re.compile(r"\s*\[(?:#[\w-]*|\*|\d+)\]_"), ""),  # footnote references: [#rfc-errata]_, [1]_
    (re.compile(r"\\[ \t]"), ""),  # an escaped space is removed (docutils): Emacs\ -like reads Emacs-like
    (re.compile(r"\\(\S)"), r"\1"),  # backslash escapes: 2\*2, ACS_\*
]


def rst_inline(text: str) -> str:
    """reST inline markup removed: roles, literals, hyperlink references, emphasis, substitutions."""
    return _substitute(_RST_INLINE, text)


class _Rst(_Lines):
    def __init__(self):
        super().__init__()
        self.blocks: list[tuple[int, bool]] = []  # open directives, comments, literal blocks: (indent, body read)
        self.literal_next: int | None = None  # a paragraph ended with '::' at this indent: a literal block may follow
        self.text_indent: int | None = None  # where the held paragraph's text starts (None: not a plain line)

    inline = staticmethod(rst_inline)

    def line(self, text: str) -> str | None:
        kind, out = self._classify(text)
        if kind == "adorn":  # under a title: the title becomes a paragraph of its own; an overline: nothing
            if self.para:
                title = self.para.pop()
                return self.flush() + f"\n{rst_inline(title)}\n"
            return None
        if kind == "skip":
            return None
        if not out:  # a blank line ends the paragraph
            held = self.flush()
            return held or ""
        item = _MD_LIST.match(out)
        indent = len(text) - len(text.lstrip())
        if len(self.para) == 1 and self.text_indent is not None and indent > self.text_indent and not item:
            # a one-line paragraph, then more indented text: a definition list's term and its definition
            # (``Module json`` over ``   JSON encoder and decoder.``), two blocks as HTML's <dt> and <dd> render
            term = self.flush()
            term = term[:-1] + _term_end(term.rstrip()[-1:]) + "\n"
            self.hold(out, False)
            self.text_indent = indent
            return term
        if not self.para or item:  # a paragraph starts: where its text starts (a directive's own line: unknown)
            self.text_indent = None if kind == "directive" else indent + (len(item.group(0)) if item else 0)
        return self.hold(_MD_LIST.sub("", out), bool(item))  # the last held line: a title if an adornment follows

    def _classify(self, text: str) -> tuple[str, str]:
        indent = len(text) - len(text.lstrip())
        if text.strip():
            while self.blocks and indent <= self.blocks[-1][0]:  # the line is not inside the block: it ended
                self.blocks.pop()
        if self.blocks and not self.blocks[-1][1]:
            return "skip", ""  # inside a block left out (blank lines too)
        if self.blocks and re.match(r"^\s*:[\w-]+:", text):
            return "skip", ""  # a directive's option (:synopsis: ..., :noindex:)
        if self.literal_next is not None and text.strip():
            literal, self.literal_next = self.literal_next, None
            if indent > literal:
                self.blocks.append((literal, False))
                return "skip", ""
        if _RST_ADORN.match(text):
            return "adorn", ""
        if (m := _RST_DIRECTIVE.match(text)) is not None:
            name = (m.group(3) or "").lower()
            described = bool(_RST_OBJECT.fullmatch(name))
            self.blocks.append((len(m.group(1)), name in _RST_READ or described))
            rest = text[m.end() :].strip() if name in _RST_READ else ""  # `.. note:: This` starts the body
            if rest and name in _RST_VERSION:  # `.. versionadded:: 3.2`, as Sphinx shows it
                rest = f"{_RST_VERSION[name]} {rest}."
            return ("directive", rest) if rest else ("skip", "")
        if not text.strip():
            return "text", ""
        stripped = text.rstrip()
        if stripped.endswith("::"):
            self.literal_next = indent
            stripped = stripped[:-3] if stripped.endswith(" ::") or stripped == "::" else stripped[:-1]
            if not stripped.strip():
                return "skip", ""
        return "text", stripped.strip()


# ---- Vim help -------------------------------------------------------------------------------------------------
_VIM_FIRST = re.compile(r"^\*[\w.+-]+\.txt\*\s")  # a help file's first line: *usr_01.txt*  For Vim version 9.0.
_VIM_TAG = re.compile(r"(?<!\S)\*[^\s*|\"]+\*(?!\S)")  # *tag*: a link target, hidden by Vim's concealing
_VIM_LINK = re.compile(r"(?<![\w|])\|([^\s|]+)\|(?![\w|])")  # |link|: shown as its text
_VIM_MODELINE = re.compile(r"(?:^|\s)vim?:(?:[\w=]+:)+\s*$")  # vim:tw=78:ts=8:noet:ft=help:norl: (no spaces)
# links after a line's sentence end ("Support for ... in a string. |interpolated-string|"): a pointer of that
# sentence's, read inside it ("... in a string (interpolated-string)."), so the next line's sentence starts clean
_VIM_TRAILING_LINKS = re.compile(r"([.!?])((?:[ \t]+\|[^\s|]+\|)+)[ \t]*$")
_VIM_RULE = re.compile(r"^\s*(={10,}|-{10,})\s*$")
# a patch record of Vim's version files: "Patch 8.2.0063" alone on a line, then Problem:, Solution:, Files: fields
_VIM_PATCH = re.compile(r"^Patch \d+\.\d+[\w.]*(?:\s*\([^)]*\))*\s*$")  # also "Patch 6.2.124 (after 6.2.121)(extra)"
_VIM_EXAMPLE = re.compile(r"(?:^|\s)>(?:[a-z]+)?\s*$")  # a line ending in ">" (or ">vim"): an example follows


def _squash(text: str) -> str:
    """Runs of spaces and tabs (Vim's column alignment) as one space."""
    return " ".join(text.split())


def _links_inside(m: re.Match) -> str:
    return " (" + ", ".join(m[2].split()) + ")" + m[1]


def vim_inline(text: str) -> str:
    """Vim help's inline markup removed: ``*tags*`` (link targets) left out, ``|links|`` read as their text."""
    return _VIM_LINK.sub(r"\1", _VIM_TAG.sub("", text))


class _VimHelp(_Lines):
    """Vim's help format (``:help help-writing``): a tag line, a link, a column of commands and their meaning, an
    example block (after a line ending in ``>``, up to a line starting with ``<`` or in the first column) and the
    ``====`` rules between sections, read as a help window shows them with the bars and stars concealed."""

    inline = staticmethod(vim_inline)

    def __init__(self):
        super().__init__()
        self.example = False
        self.record = False  # inside a patch record (``_VIM_PATCH``), which ends at a blank line
        self.started = False  # a line has been read (the header line, ``*name.txt*  For Vim version ...``, is first)

    def line(self, text: str) -> str | None:
        text = _VIM_TRAILING_LINKS.sub(_links_inside, _VIM_MODELINE.sub("", text.rstrip()))
        if self.example:
            if text.startswith("<"):
                self.example, text = False, text[1:]
            elif text and not text[0].isspace():
                self.example = False
            else:
                return None
        if self.record or _VIM_PATCH.match(text):  # a changelog's fields, not prose: left out up to a blank line
            self.record = bool(text.strip())
            return (self.flush() or None) if self.record else self.line(text)
        if (m := _VIM_EXAMPLE.search(text)) is not None:  # the example ends the paragraph, as a code block does
            self.example = True
            shown = vim_inline(text[: m.start()]).strip()
            first = (self.hold(_squash(shown), False) or "") if shown else ""  # a long paragraph's first part
            return (first + "\n" if first else "") + self.flush() or None
        if _VIM_RULE.match(text):
            return self.flush() or None
        shown = vim_inline(text).strip()
        if not shown:  # a blank line, or a line of tags: the paragraph ends
            return self.flush() or ("" if not text.strip() else None)
        if not self.started:  # the header line: the file's tag, Vim's version and a date (as front matter is)
            self.started = True
            if _VIM_FIRST.match(text.lstrip("\ufeff")):
                return None
        heading = shown.endswith(" ~") or (_VIM_TAG.search(text) and len(shown) < 70 and shown[-1] not in ".,:;")
        if heading or shown.isupper() or "\t" in shown:  # a heading or a row of a table: a paragraph of its own
            held = self.flush()  # with a blank line after it, so its last words do not run into the heading
            return (held + "\n" if held else "") + _squash(shown.removesuffix("~")) + "\n"
        return self.hold(_squash(shown), False)
