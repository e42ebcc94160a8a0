"""Sentence and paragraph segmentation that needs no downloaded data and works on streamed text.

Rules (English prose and scientific papers, and scripts written without spaces):
- a run of ``.``, ``!`` or ``?`` (plus closing quotes/brackets) followed by whitespace ends a sentence,
  except after a known abbreviation ("e.g.", "Dr.", "et al.", "Fig."), a single-letter initial ("J."),
  or when the next word starts in lowercase, unless that word is the subject of a new sentence: a name written
  in lower case, as many software names are ("... of parallelism. rustc will coordinate ...": ``LOWERCASE_NAME``);
- a period not followed by whitespace never ends a sentence, so decimals ("3.14"), "U.S.A" and URLs stay whole;
- a single newline is a space (wrapped lines); a blank line ends the sentence and the paragraph;
- a line that opens with a bullet and a space (``-``, ``*``, ``•``: a plain-text list item) starts a
  sentence and a paragraph, as a rendered Markdown, reST or HTML list item does;
- a run of the full-width terminators ``。``, ``！`` or ``？`` (Chinese, Japanese) ends a sentence even with no
  space after it;
- a sentence longer than ``max_chars`` is cut at its last space (or full-width comma) before that length, so
  memory stays bounded; a text with neither is cut at ``max_chars``.

Words (``count_words``, the unit of every budget): whitespace-separated tokens, except that Chinese and Japanese
characters count half a word each (rounded up; about two characters per word), since those scripts put no
spaces between words.

Streaming: ``SentenceSegmenter.feed(piece)`` returns the sentences that the text so far decides, and
``finish()`` the rest. A boundary is only decided once the first non-space character after it has arrived,
and only text inside a window of ``2 * max_chars`` from the current sentence start is looked at (a lowercase
word after a period waits for the ``LOOKAHEAD`` characters that decide whether it starts a sentence), so the
sentences (text and offsets) are identical however the document is split into pieces.
Offsets are Python string (code point) offsets into the whole document, half-open ``[start, end)``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

ABBREVIATIONS = frozenset(
    [
        "mr",
        "mrs",
        "ms",
        "dr",
        "prof",
        "sr",
        "jr",
        "st",
        "mt",
        "rev",
        "gen",
        "col",
        "capt",
        "lt",
        "sgt",
        "gov",
        "sen",
        "rep",
        "hon",
        "messrs",
        "mme",
        "mlle",
        "e.g",
        "eg",
        "i.e",
        "ie",
        "cf",
        "vs",
        "viz",
        "etc",
        "al",
        "approx",
        "ca",
        "resp",
        "ibid",
        "op",
        "cit",
        "fig",
        "figs",
        "eq",
        "eqs",
        "sec",
        "secs",
        "tab",
        "ref",
        "refs",
        "no",
        "nos",
        "vol",
        "vols",
        "pp",
        "p",
        "ch",
        "chap",
        "app",
        "def",
        "thm",
        "lem",
        "prop",
        "cor",
        "ed",
        "eds",
        "inc",
        "ltd",
        "co",
        "corp",
        "dept",
        "univ",
        "assoc",
        "est",
        "jan",
        "feb",
        "mar",
        "apr",
        "jun",
        "jul",
        "aug",
        "sep",
        "sept",
        "oct",
        "nov",
        "dec",
    ]
)
# English function words: their share is high in any prose and low in lists, names, code and tables
FUNCTION_WORDS = frozenset(
    [
        "a",
        "an",
        "the",
        "of",
        "to",
        "in",
        "on",
        "at",
        "by",
        "for",
        "with",
        "from",
        "as",
        "and",
        "or",
        "but",
        "not",
        "no",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "being",
        "it",
        "its",
        "this",
        "that",
        "these",
        "those",
        "which",
        "who",
        "whom",
        "whose",
        "what",
        "when",
        "where",
        "how",
        "why",
        "than",
        "then",
        "there",
        "here",
        "can",
        "could",
        "may",
        "might",
        "will",
        "would",
        "shall",
        "should",
        "must",
        "do",
        "does",
        "did",
        "has",
        "have",
        "had",
        "such",
        "each",
        "all",
        "any",
        "some",
        "more",
        "most",
        "also",
        "only",
        "into",
        "over",
        "under",
        "between",
        "about",
        "after",
        "before",
        "through",
        "while",
        "if",
        "so",
        "because",
    ]
)
# words that start ordinary sentences, never a lowercase name: the function words and pronouns, and a few nouns
_NOT_NAMES = FUNCTION_WORDS | frozenset(
    [
        "he",
        "she",
        "they",
        "we",
        "you",
        "i",
        "one",
        "our",
        "their",
        "your",
        "now",
        "data",
        "code",
        "everything",
        "nothing",
        "something",
    ]
)
# a sentence whose subject is a name written in lower case, as many software names are ("pandas is a Python package
# ...", "h11 provides ...", "rustc will coordinate ..."): not the tail of a cut sentence, unless that word is an
# ordinary English one (the prose filter uses the same rule for a sentence that starts in lower case)
LOWERCASE_NAME = re.compile(
    r"^(?!(?:" + "|".join(sorted(_NOT_NAMES)) + r")\b)"
    r"(?:[a-z][\w.]*\(\)\s|"  # a function, written with its parentheses: file_coverage() performs ...
    r"[a-z][\w.+-]*\s+(?:is|are|provides?|implements?|offers?|supports?|lets|allows?|makes?|helps?|contains?|"
    r"reads?|writes?|parses?|computes?|enables?|exposes?|defines?|wraps?|includes?|uses?|runs?|has|can|was|"
    r"will|would|may|might|must|should|could|does|needs?|returns?|specifies|accepts?|takes?)\s)"
)
LOOKAHEAD = 64  # characters after a period that decide whether a lowercase word starts a sentence
# the bullets that make a line a list item in plain text: not "+", which a wrapped line of prose may start with
# ("... used instead of the\n+ and / characters"); a paragraph that opens with one is still an item (``LIST_ITEM``)
_BULLETS = "-*\u2022\u2023\u25e6"
# a sentence ends at a terminator, at a blank line, or at the end of a line that a list item follows
_BOUNDARY = re.compile(
    r"""(?:[.!?]+["'\u201d\u2019)\]]*\s+|[\u3002\uff01\uff1f]+[\u300d\u300f\u201d\u2019\uff09)]*\s*|\n[ \t\r\f\v]*\n\s*"""
    rf"""|\n[ \t\r\f\v]*(?=[{_BULLETS}][ \t]))(?=\S)"""
)
_WIDE_STOPS = "\u3002\uff01\uff1f"  # 。！？
_WIDE_COMMAS = "\uff0c\u3001\uff1b"  # ，、；: where an over-long sentence without spaces is cut
# Han ideographs and kana: scripts written without spaces between words (Hangul is spaced, so not here)
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_CJK_PUNCT = re.compile(r"[\u3000-\u303f\uff01-\uff0f\uff1a-\uff20\uff3b-\uff40\uff5b-\uff65]")
_PARAGRAPH = re.compile(r"\n[ \t\r\f\v]*\n")
_OPENERS = "\"'(\u201c\u2018["
LIST_ITEM = re.compile(r"^[-*+\u2022\u2023\u25e6]\s+")
"""A list item's marker at the start of a paragraph: a bullet and a space (``strandline.data.markup`` renders every
item of a Markdown, reST or HTML list with ``ITEM``; plain text writes ``-``, ``*``, ``+`` or ``•``)."""
ITEM = "- "


def item_body(text: str) -> str:
    """``text`` without the list item's marker it opens with (``LIST_ITEM``); other text as it is."""
    return LIST_ITEM.sub("", text, count=1)


def count_words(text: str) -> int:
    """Words of ``text``: whitespace tokens, plus half a word (rounded up) per Chinese/Japanese character."""
    cjk = len(_CJK.findall(text))
    if not cjk:
        return len(text.split())
    return len(_CJK_PUNCT.sub(" ", _CJK.sub(" ", text)).split()) + (cjk + 1) // 2


@dataclass(frozen=True)
class Sentence:
    """One sentence of a document.

    Attributes:
        text: the document's characters ``doc[start:end]`` (may contain single newlines).
        start: offset of the first character in the document.
        end: offset one past the last character.
        index: 0-based sentence number in the document.
        paragraph: 0-based paragraph number (blank lines separate paragraphs).
    """

    text: str
    start: int
    end: int
    index: int
    paragraph: int

    @property
    def clean(self) -> str:
        """The text with every run of whitespace (wrapped lines) turned into one space."""
        return " ".join(self.text.split())

    @property
    def n_words(self) -> int:
        """Words as budgets count them (``count_words``; a list item's marker is not a word)."""
        return count_words(item_body(self.text))


def _ends_paragraph(term: str, after: str) -> bool:
    """Whether the boundary candidate ``term`` ends a paragraph: it holds a blank line, or it breaks a line and
    ``after`` (the text after it) opens a list item. Plain text writes a list as lines that start with a bullet
    ("Lua support:\\n- Call Vim functions ..."), so the item starts a sentence and a paragraph of its own, as a
    rendered Markdown, reST or HTML item does."""
    if _PARAGRAPH.search(term):
        return True
    return "\n" in term and len(after) > 1 and after[0] in _BULLETS and after[1] in " \t"


def _is_boundary(sentence: str, match: re.Match, window: str, after: str, complete: bool) -> bool | None:
    """Decide whether the candidate ``match`` (found in ``window``) ends the sentence ``sentence``; ``after``: up to
    ``LOOKAHEAD`` characters that follow it, all of them or the rest of the document when ``complete``. None: not
    decided until more text arrives."""
    term = match.group(0)
    if "\n" in term and not complete and len(after) < 2 and after[:1] in _BULLETS:
        return None  # a bullet at the end of the text so far: whether an item starts waits for the next character
    if _ends_paragraph(term, after):
        return True  # a blank line always ends a sentence, and so does a line break before a list item
    if "!" in term or "?" in term or any(c in term for c in _WIDE_STOPS):
        return True
    nxt = window[match.end()]
    words = sentence.split()
    word = words[-1].lstrip(_OPENERS).lower() if words else ""
    after_word = word not in ABBREVIATIONS and not (len(word) == 1 and word.isalpha())
    if nxt.islower():
        # "e.g. the", "approx. three", "U.S. and": a new sentence starts with a capital, or with a name in lower case
        if not (words and after_word) or term.startswith(".."):
            return False
        if LOWERCASE_NAME.match(after):
            return True
        return False if complete else None
    if term.startswith(".."):
        return True
    # "Dr. Smith", "et al. (2019)", "Fig. 3", an initial: "J. R. R. Tolkien"
    return bool(words) and after_word


class SentenceSegmenter:
    """Incremental segmenter: ``feed`` pieces of text, then ``finish``; see the module docstring."""

    def __init__(self, max_chars: int = 2000):
        if max_chars < 16:
            raise ValueError(f"max_chars must be >= 16, got {max_chars}")
        self.max_chars = max_chars
        self._buf = ""  # unconsumed text; always starts at the current sentence start
        self._base = 0  # document offset of self._buf[0]
        self._index = 0
        self._paragraph = 0
        self._new_paragraph = False  # a blank line was seen since the last emitted sentence

    def feed(self, text: str) -> list[Sentence]:
        """Add the next piece of the document; return the sentences it completes (maybe none)."""
        self._buf += text
        out = []
        while (s := self._next(final=False)) is not None:
            out.append(s)
        return out

    def finish(self) -> list[Sentence]:
        """The end of the document: return the remaining sentences and reset for a new document."""
        out = []
        while (s := self._next(final=True)) is not None:
            out.append(s)
        self.__init__(self.max_chars)
        return out

    def _next(self, final: bool) -> Sentence | None:
        """Emit the next sentence if the buffer decides it; consume it from the buffer."""
        self._skip_space(final)
        if not self._buf or self._buf.isspace():
            return None
        window = self._buf[: 2 * self.max_chars]
        for m in _BOUNDARY.finditer(window):
            if m.start() >= self.max_chars:
                break
            after = self._buf[m.end() : m.end() + LOOKAHEAD]
            decided = _is_boundary(window[: m.start()], m, window, after, final or len(after) == LOOKAHEAD)
            if decided is None:
                return None  # a lowercase word after a period: wait for the text that decides
            if decided:
                sentence = self._make(m.start() + len(m.group(0).rstrip()))  # keep terminator and closers
                if _ends_paragraph(m.group(0), after):
                    self._new_paragraph = True
                self._consume(m.end())
                return sentence
        if len(window) >= 2 * self.max_chars or (final and len(self._buf) > self.max_chars):
            # no boundary within max_chars: cut at the last space or wide comma (kept with its clause)
            cut = max(window.rfind(c, 1, self.max_chars) for c in " \n" + _WIDE_COMMAS)
            end = cut + (window[cut] in _WIDE_COMMAS) if cut > 0 else self.max_chars
        elif final:
            end = len(self._buf)
        else:
            return None
        sentence = self._make(end)
        self._consume(end)
        return sentence

    def _make(self, end: int) -> Sentence:
        text = self._buf[:end].rstrip()
        if self._new_paragraph and self._index > 0:
            self._paragraph += 1
        self._new_paragraph = False
        s = Sentence(text, self._base, self._base + len(text), self._index, self._paragraph)
        self._index += 1
        return s

    def _consume(self, n: int) -> None:
        self._buf = self._buf[n:]
        self._base += n

    def _skip_space(self, final: bool) -> None:
        """Drop whitespace before a sentence, noting blank lines (a paragraph break)."""
        stripped = self._buf.lstrip()
        if not stripped and not final:
            return  # the gap may continue in the next piece: decide when it ends
        gap = len(self._buf) - len(stripped)
        if gap:
            if _PARAGRAPH.search(self._buf[:gap]):
                self._new_paragraph = True
            self._consume(gap)


def iter_sentences(pieces: Iterable[str], max_chars: int = 2000) -> Iterator[Sentence]:
    """Sentences of a document that arrives as an iterable of text pieces (constant memory)."""
    seg = SentenceSegmenter(max_chars)
    for piece in pieces:
        yield from seg.feed(piece)
    yield from seg.finish()


def split_sentences(text: str, max_chars: int = 2000) -> list[Sentence]:
    """All sentences of a document held in memory."""
    return list(iter_sentences([text], max_chars))
