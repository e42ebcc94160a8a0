"""Sentence features for salience that do not depend on one domain's style, computed as the document streams.

Two stages, both in reading order with constant memory:

1. ``LMReader`` feeds the sentences' bytes through the byte LM, state carried (chunked calls inside a group of
   ``GROUP`` sentences, the state across groups), and returns per sentence the mean final hidden state over its
   bytes [D] and its surprisal (mean bits per byte the LM spent on it). This is the only costly part.
2. ``FeatureState`` turns those, with the sentence's words, into ``N_FEATURES`` scalars against what has been
   read so far: position as read (prose sentence and paragraph number, first in its paragraph), centrality and
   novelty against the LM state's running centroid and against the words read so far, agreement with the lead
   (the first ``LEAD`` prose sentences) and with the title (the first line), surprisal relative to the running
   mean, prose cues (function-word share, letters share, summary cue words), and the document's structure:
   the section a sentence is in (``heading_text`` finds headings among the non-prose sentences: a short line
   without a sentence end, reST and Markdown heading marks removed), its position in that section, its word
   overlap with that heading and with every heading read so far, and whether the heading names an introduction
   (``INTRO_WORDS``: Introduction, Overview, About, Abstract, ...); and whether it says what something is or does
   in its first words (``_DEFINITION``: "Flex is a tool for ...", "This module provides ..."); and whether it is
   part of a list item (its paragraph opens with a list marker, ``segment.LIST_ITEM``: a step or a point that the
   lines before the list introduce). Only prose sentences (see ``strandline.tasks.summarize.prose``) update the running centroids, so code and tables do not pull them.

The document's length is unknown while streaming, so there is no relative position. Memory: a few vectors of
``D`` floats, hashed bags of ``BOW_DIM`` words (the document, the lead, the headings), and a hashed bitset of the
words seen (``SEEN_BITS``).
"""

from __future__ import annotations

import math
import re
import zlib
from collections import Counter
from collections.abc import Iterator

import numpy as np
import torch
from torch import Tensor

from strandline.data.segment import FUNCTION_WORDS, LIST_ITEM, Sentence, item_body
from strandline.data.tokenizers import ByteTokenizer
from strandline.models import LinearTransformerLM
from strandline.tasks.summarize.prose import non_prose

GROUP = 64  # sentences per LM group: fixed, so results do not depend on how the text arrives
MAX_CALL_TOKENS = 1024  # tokens per LM call: bounded activations keep peak memory flat (measured)
LEAD = 5  # prose sentences that make the "lead" the others are compared with
BOW_DIM = 1 << 14  # hashed vocabulary of the running bag of words
SEEN_BITS = 1 << 20  # hashed set of words seen so far (128 kB), for novelty
FEATURES = (
    "log_prose_index", "log_paragraph", "in_lead", "inv_prose_index", "first_in_paragraph", "log_words",
    "cos_lm_centroid", "cos_lm_lead", "surprisal", "surprisal_rel",
    "cos_words_doc", "cos_words_lead", "cos_words_title", "cos_words_prev", "novel_words",
    "function_words", "letters", "cue_words",
    "log_section", "log_in_section", "first_in_section", "cos_words_heading", "cos_words_headings", "intro_section",
    "definition", "list_item",
)  # fmt: skip
N_FEATURES = len(FEATURES)

_WORD = re.compile(r"[^\W_]+")
# words that announce what a document is about, in any genre ("this paper/module/guide describes ...")
CUE_WORDS = frozenset(
    [
        "this",
        "we",
        "our",
        "provides",
        "provide",
        "describes",
        "describe",
        "introduces",
        "introduce",
        "presents",
        "present",
        "proposes",
        "propose",
        "explains",
        "explain",
        "shows",
        "show",
        "allows",
        "allow",
        "overview",
        "summary",
        "goal",
        "purpose",
        "aims",
        "aim",
        "designed",
    ]
)


# words of a heading that opens an introduction or a summary of what follows, in manuals, papers and READMEs
INTRO_WORDS = frozenset(
    [
        "introduction",
        "intro",
        "overview",
        "about",
        "abstract",
        "summary",
        "description",
        "synopsis",
        "purpose",
        "preface",
        "background",
        "motivation",
        "foreword",
        "what",
    ]
)
_UNDERLINE = re.compile(r"""^\s*([=\-~^"'`#*+_.:])\1{2,}\s*$""")  # reST over- and underlines, rules
_HEADING_MARK = re.compile(r"^\s{0,3}#{1,6}\s+|\s+#+\s*$")  # Markdown ATX marks
_NUMBERING = re.compile(r"^(?:\d+(?:\.\d+)*\.?|[A-Z]\.|[IVX]+\.)\s+")  # "2.1 ", "A. ", "IV. "
_ENDS = re.compile(r"""[.!?:;,\u3002\uff01\uff1f]["'\u201d\u2019)\]]*$""")


# a sentence that says what something is or does, in its first words: "Flex is a tool for ...", "The json module
# provides ...", "This manual describes ..." (summaries of manuals, READMEs and papers open with one)
_DEFINITION = re.compile(
    r"^\W*(?:[\w.+-]+\W+){0,6}?(?:is|are)\s+(?:a|an|the|one)\b|^\W*(?:[\w.+-]+\W+){0,6}?(?:provides?|implements?|"
    r"allows?|lets|offers?|supports?|describes?|documents?|explains?|introduces?|presents?|contains?|defines?)\b",
    re.IGNORECASE,
)


def heading_text(text: str) -> str | None:
    """The heading a non-prose sentence is, without its marks and numbering, or None: one line (besides reST
    under- and overlines) of 1 to 15 words, no sentence end, mostly letters, not a list item (an entry of a list
    of contents or of features is a point of the list, not a section)."""
    if LIST_ITEM.match(text):
        return None
    lines = [ln for ln in text.strip().splitlines() if ln.strip() and not _UNDERLINE.match(ln)]
    if len(lines) != 1:
        return None
    line = _NUMBERING.sub("", _HEADING_MARK.sub("", lines[0]).strip())
    words = _WORD.findall(line)
    letters = sum(c.isalpha() for c in line) / max(1, sum(not c.isspace() for c in line))
    if not 1 <= len(words) <= 15 or _ENDS.search(line) or letters < 0.6:
        return None
    return line


def words_of(text: str) -> list[str]:
    """Lowercase word tokens (letters and digits of any script)."""
    return _WORD.findall(text.lower())


def _bow(words: list[str]) -> dict[int, float]:
    """Hashed bag of content words (function words dropped), as {bucket: count}."""
    counts = Counter(zlib.crc32(w.encode()) % BOW_DIM for w in words if w not in FUNCTION_WORDS)
    return {k: float(v) for k, v in counts.items()}


def bow_cosine(a: dict[int, float], b: dict[int, float] | np.ndarray) -> float:
    """Cosine between a sparse bag and a sparse or dense one (0 when either is empty)."""
    if isinstance(b, np.ndarray):
        dot, nb = sum(v * b[k] for k, v in a.items()), float(np.sqrt((b * b).sum()))
    else:
        dot, nb = sum(v * b.get(k, 0.0) for k, v in a.items()), math.sqrt(sum(v * v for v in b.values()))
    na = math.sqrt(sum(v * v for v in a.values()))
    return dot / (na * nb) if na and nb else 0.0


class LMReader:
    """Per-sentence mean hidden state [D] and surprisal (bits/byte) from the byte LM, state carried."""

    def __init__(self, model: LinearTransformerLM):
        self.model = model.eval()
        self.tok = ByteTokenizer()
        self.d = model.config.d_model
        self.reset()

    def reset(self) -> None:
        """A new document: the LM state starts empty."""
        self.state, self.paragraph = None, 0

    @torch.no_grad()
    def __call__(self, sentences: list[Sentence]) -> tuple[Tensor, Tensor]:
        """(mean hidden [N, D], surprisal [N]) for the next sentences, in groups of ``GROUP``."""
        parts = [self._group(sentences[i : i + GROUP]) for i in range(0, len(sentences), GROUP)]
        if not parts:
            return torch.zeros(0, self.d), torch.zeros(0)
        return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])

    def _group(self, sentences: list[Sentence]) -> tuple[Tensor, Tensor]:
        ids, spans = [], []
        for s in sentences:
            sep = "" if s.index == 0 else ("\n\n" if s.paragraph != self.paragraph else " ")
            sep_ids, text_ids = self.tok.encode(sep), self.tok.encode(s.clean)
            start = sum(len(x) for x in ids) + len(sep_ids)
            ids += [sep_ids, text_ids]
            spans.append((start, start + len(text_ids)))
            self.paragraph = s.paragraph
        tokens = torch.from_numpy(np.concatenate(ids).astype(np.int64))[None]
        sums, bits = torch.zeros(len(sentences), self.d), torch.zeros(len(sentences))
        # oneDNN caches one primitive per input shape; every group has a new length, so with it enabled memory grew
        # ~25 MB per 1000 sentences (measured). The native kernels keep memory flat at the same speed here.
        onednn = torch.backends.mkldnn.enabled
        torch.backends.mkldnn.enabled = False  # set and restored by hand: flags() also warns about TF32 on every call
        try:
            for a in range(0, tokens.shape[1], MAX_CALL_TOKENS):
                chunk = tokens[:, a : a + MAX_CALL_TOKENS]
                h, self.state = self.model.hidden(chunk, self.state)
                h, b = h[0].float(), a + h.shape[1]
                # bits of byte t+1 given bytes <= t, for positions inside this call (the last one has no target)
                logp = torch.log_softmax(self.model.head(h[:-1]).float(), -1)
                nll = -logp.gather(1, chunk[0, 1:, None])[:, 0] / math.log(2)
                for j, (s0, s1) in enumerate(spans):
                    lo, hi = max(s0, a), min(s1, b)
                    if lo < hi:
                        sums[j] += h[lo - a : hi - a].sum(0)
                        bits[j] += nll[lo - a : min(hi, b - 1) - a].sum()  # byte lo+1.. predicted in this call
        finally:
            torch.backends.mkldnn.enabled = onednn
        n = torch.tensor([s1 - s0 for s0, s1 in spans], dtype=torch.float32)
        return sums / n[:, None], bits / n


class FeatureState:
    """The running state behind the scalar features of one document (see the module docstring)."""

    def __init__(self, d: int):
        self.d = d
        self.reset()

    def reset(self) -> None:
        self.prose = 0  # prose sentences read
        self.centroid, self.lead = torch.zeros(self.d), torch.zeros(self.d)
        self.doc_bow, self.lead_bow = np.zeros(BOW_DIM), np.zeros(BOW_DIM)
        self.title: dict[int, float] | None = None
        self.prev: dict[int, float] = {}
        self.seen = np.zeros(SEEN_BITS // 8, dtype=np.uint8)
        self.bits_mean, self.last_paragraph = 0.0, -1
        self.paragraph, self.item = -1, False  # the paragraph read last (prose or not), and whether it is a list item
        # structure: headings seen, the current one's bag of words and intro flag, prose read in its section
        self.sections, self.in_section, self.intro = 0, 0, False
        self.heading: dict[int, float] = {}
        self.headings_bow = np.zeros(BOW_DIM)

    def read(
        self, sentences: list[Sentence], hidden: Tensor, bits: Tensor, comments: list[bool] | None = None
    ) -> Iterator[tuple[int, Tensor, dict]]:
        """Features of the prose sentences among the next ``sentences`` (LM outputs ``hidden`` [N, D], ``bits``
        [N]), lazily: (position in ``sentences``, features [N_FEATURES], bag of words); the state has read up to
        and including that sentence when it is yielded. ``comments[j]``: sentence j lies in a reST comment
        (``RstComments``), so it is not prose whatever its text."""
        for j, s in enumerate(sentences):
            self.title_from(s)
            if s.paragraph != self.paragraph:  # a paragraph's first sentence carries its list marker, if any
                self.paragraph, self.item = s.paragraph, bool(LIST_ITEM.match(s.text))
            if comments and comments[j]:
                continue
            if non_prose(s.text) is None:
                yield (j, *self.features(s, hidden[j], float(bits[j])))
            elif (head := heading_text(s.text)) is not None:
                self.heading_from(head)

    def heading_from(self, head: str) -> None:
        """A heading was read: a new section starts."""
        words = words_of(head)
        self.heading = _bow(words)
        for b, v in self.heading.items():
            self.headings_bow[b] += v
        self.sections, self.in_section, self.intro = self.sections + 1, 0, bool(INTRO_WORDS.intersection(words))

    def title_from(self, sentence: Sentence) -> None:
        """The document's first line (a title or heading, prose or not) is what every sentence may echo."""
        if self.title is None:
            self.title = _bow(words_of(sentence.text.split("\n", 1)[0]))

    def features(self, s: Sentence, hidden: Tensor, bits: float) -> tuple[Tensor, dict[int, float]]:
        """The features [N_FEATURES] of prose sentence ``s`` and its bag of words; then updates the state."""
        text = item_body(s.text)  # the sentence's words, a list item's marker left out
        words = words_of(text)
        bow = _bow(words)
        buckets = [zlib.crc32(w.encode()) % SEEN_BITS for w in set(words) if w not in FUNCTION_WORDS]
        novel = sum(not (self.seen[b >> 3] >> (b & 7)) & 1 for b in buckets) / max(1, len(buckets))
        k = self.prose
        cos = torch.nn.functional.cosine_similarity
        f = [
            math.log1p(k), math.log1p(s.paragraph), float(k < LEAD), 1.0 / (1 + k),
            float(s.paragraph != self.last_paragraph), math.log1p(len(words)),
            float(cos(hidden, self.centroid, dim=0)) if k else 0.0,
            float(cos(hidden, self.lead, dim=0)) if k else 0.0,
            bits, bits - self.bits_mean if k else 0.0,
            bow_cosine(bow, self.doc_bow), bow_cosine(bow, self.lead_bow), bow_cosine(bow, self.title or {}),
            bow_cosine(bow, self.prev), novel,
            sum(w in FUNCTION_WORDS for w in words) / max(1, len(words)),
            sum(c.isalpha() for c in text) / max(1, sum(not c.isspace() for c in text)),
            sum(w in CUE_WORDS for w in words) / max(1, len(words)),
            math.log1p(self.sections), math.log1p(self.in_section), float(self.sections > 0 and not self.in_section),
            bow_cosine(bow, self.heading), bow_cosine(bow, self.headings_bow), float(self.intro),
            float(bool(_DEFINITION.search(" ".join(text.split())))), float(self.item),
        ]  # fmt: skip
        self._update(k, hidden, bits, bow, buckets, s.paragraph)
        return torch.tensor(f, dtype=torch.float32), bow

    def _update(self, k: int, hidden: Tensor, bits: float, bow: dict, buckets: list[int], paragraph: int) -> None:
        self.centroid = (self.centroid * k + hidden) / (k + 1)  # running means: constant memory
        self.bits_mean = (self.bits_mean * k + bits) / (k + 1)
        for b, v in bow.items():
            self.doc_bow[b] += v
            if k < LEAD:
                self.lead_bow[b] += v
        if k < LEAD:
            self.lead = (self.lead * k + hidden) / (k + 1)
        for b in buckets:
            self.seen[b >> 3] |= 1 << (b & 7)
        self.prev, self.prose, self.last_paragraph = bow, k + 1, paragraph
        self.in_section += 1
