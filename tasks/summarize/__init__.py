"""Incremental extractive summarization from the state of a linear-transformer LM.

The document streams through the byte LM sentence by sentence with its state carried, so memory is constant
in the document length. Non-prose sentences (code, markup, tables, references, headings, boilerplate,
fragments; ``strandline.tasks.summarize.prose``) are read by the LM but never offered to the summary. Each prose sentence
gets domain-agnostic features (``strandline.tasks.summarize.features``: position as read, centrality and novelty against
the LM state and the words read so far, agreement with the lead and the title, surprisal, prose cues) and a
salience score from a small head trained across domains, plus a lead prior (``lead_bonus`` for the first
``LEAD`` prose sentences) selected leave-one-domain-out. A bounded buffer keeps the best-scored candidates and
fills the word budget from them by score plus their centrality (how much the other candidates say the same),
without repeating one another (``redundancy``: the largest word cosine allowed between two chosen sentences):
the running summary, ready at any point.
"""

from __future__ import annotations

import heapq
import json
import math
import re
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from strandline.data.segment import LIST_ITEM, Sentence, SentenceSegmenter, item_body
from strandline.data.tokenizers import ByteTokenizer
from strandline.errors import UserInputError, one_of
from strandline.models import LinearTransformerLM, load
from strandline.resources import resolve
from strandline.tasks.summarize.features import FEATURES, GROUP, LEAD, FeatureState, LMReader, bow_cosine
from strandline.tasks.summarize.oracle import greedy_oracle, oracle_labels, rouge_tokens
from strandline.tasks.summarize.prose import MIN_WORDS, RstComments

__all__ = [
    "CENTRALITY_KINDS",
    "GROUP",
    "SummaryBuffer",
    "SalienceHead",
    "Summarizer",
    "SummarizerError",
    "greedy_oracle",
]
__all__ += ["fit_head", "head_objective", "load_summarizer", "oracle_labels", "rouge_tokens"]
FORMAT = "strandline-summarizer-2"


class SummarizerError(UserInputError):
    """A summarizer directory that cannot be used (missing, corrupt or mismatched head files)."""


# ---- the running summary -------------------------------------------------------------------------
@dataclass(order=True)
class Scored:
    """A candidate sentence with its salience score (ordering: by score, then earlier sentence first)."""

    score: float
    neg_index: int
    sentence: Sentence = field(compare=False)
    bow: dict = field(compare=False, default_factory=dict)


CENTRALITY_KINDS = ("candidates", "document")
"""What a sentence's centrality is measured against (``SummaryBuffer.centralities``)."""

FILLS = ("skip", "stop")
"""What the summary does when the next sentence in rank order does not fit the budget (``SummaryBuffer.sentences``)."""

NEAR_DUPLICATE = 0.9
"""Word cosine (hashed bags of words) above which a sentence is a near-repeat of one already chosen: never
chosen again, whatever ``redundancy`` is (which may cut lower)."""


def normalized_text(text: str) -> str:
    """A sentence's words, lowercase, without punctuation or spacing: equal for repeats that differ in form."""
    return " ".join(re.findall(r"\w+", text.lower()))


def template_text(text: str) -> str | None:
    """A sentence's words with its names and numbers as ``_`` (a word with a digit, a capitalized word after the
    first; a run of them is one ``_``): equal for the sentences of one template, as release notes write them
    ("Support for CPython 3.9.5 has been added.", "Support for Miniforge3 4.10.1-1 has been added."). None when
    that says too little to call two sentences one: under 4 words left, or as many ``_`` as words."""
    out: list[str] = []
    for i, w in enumerate(re.findall(r"\w+", text)):
        if any(c.isdigit() for c in w) or (i and w[:1].isupper()):
            if not out or out[-1] != "_":
                out.append("_")
        else:
            out.append(w.lower())
    words = sum(w != "_" for w in out)
    return " ".join(out) if words >= 4 and words > len(out) - words else None


_POINTS_BACK = re.compile(
    r"^[\"'(\u201c\u2018]*(?:However|Otherwise|Furthermore|Moreover|Instead|Nevertheless|Nonetheless|Conversely|"
    r"Consequently|Therefore|Thus|Hence|Similarly|Likewise|Additionally|Also|Besides|Meanwhile|Alternatively|"
    r"Accordingly|Finally|Lastly|Then|Still|But|And|Or|So|Again|Secondly|Thirdly|In addition|In contrast|"
    r"On the other hand|In this case|In that case|In either case|As a result|For example|For instance|As such|"
    r"In particular|That is|By contrast|Even so|In turn|Apart from this|Apart from that|After that|Afterwards)\b"
)


def points_back(text: str) -> bool:
    """Whether a sentence opens with a word that ties it to the one before it ("However, ...", "Otherwise, ...",
    "For example, ...", "In this case ..."): read alone, in a summary that left that one out, it dangles.
    ``SummaryBuffer(standalone=True)`` (``strandline summarize --standalone``) never chooses one."""
    return bool(_POINTS_BACK.match(item_body(text)))


_POINTS_ELSEWHERE = re.compile(
    r"^\(?(?:please\s+)?(?:see|refer\s+to|consult|have\s+a\s+look\s+at|take\s+a\s+look\s+at)\b|"
    r"^\(?for\s+(?:(?:more|further|full|additional)\s+)?(?:details|information|info|background|examples?|"
    r"instructions)\b[^.;]*?\bsee\b",
    re.IGNORECASE,
)


def points_elsewhere(text: str) -> bool:
    """Whether a sentence only sends the reader elsewhere ("See CONTRIBUTING.md for details.", "See also the PROJ
    migration notes.", "For more information, see the user guide."): it says nothing on its own. A sentence that
    says something first ("The tool is fast; see the benchmarks.") does not. ``standalone`` never chooses one."""
    return bool(_POINTS_ELSEWHERE.match(item_body(text)))


def stands_alone(text: str) -> bool:
    """Whether a sentence reads on its own: it neither ``points_back`` nor ``points_elsewhere``, and it is not a
    list item (``segment.LIST_ITEM``: a step or a point of a list, read without the list)."""
    return not (points_back(text) or points_elsewhere(text) or LIST_ITEM.match(text))


def finite_number(v) -> bool:
    """Whether a setting read from JSON is a finite number (not a bool, NaN or infinity)."""
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def optional_number(name: str, value, kind: str, error: type[Exception] = ValueError, where: str = "",
                    at_least: float | None = None) -> float | None:  # fmt: skip
    """A setting read from JSON that may be null: None, or ``value`` as a float when it is a ``finite_number``
    (at least ``at_least`` if given); otherwise ``error`` with one line, ``"{where}{name} must be {kind} or null,
    got ..."``. One check for the recipe and the saved model, each raising its own error type."""
    if value is None:
        return None
    if not finite_number(value) or (at_least is not None and value < at_least):
        raise error(f"{where}{name} must be {kind} or null, got {value!r}")
    return float(value)


SLACK = "a number of words >= 0"  # what floor_slack must be (optional_number)


class SummaryBuffer:
    """The best-scoring sentences whose words fit ``budget``, from a bounded pool of candidates.

    The pool keeps the ``capacity`` best-scored sentences seen so far (a min-heap), so a sentence pushed out of the
    summary by a better one can come back when a later sentence displaces that one. The summary is the greedy
    fill of the pool by rank (score + ``centrality_weight`` × ``centralities``), skipping sentences that
    overflow the budget (``fill`` ``"skip"``; ``"stop"`` ends the summary at the first that does not fit),
    repeat a chosen one (the same words, the same words but for names and numbers: ``template_text``, or a word
    cosine above ``NEAR_DUPLICATE``), or whose word cosine with a chosen one exceeds ``redundancy`` (1.0: only the repeat check). With ``standalone``, a
    sentence that opens by pointing back to the one before (``points_back``), only points elsewhere
    (``points_elsewhere``) or belongs to a list item (any of its sentences: ``offer``'s ``in_item``) never enters
    the pool. With ``floor``, a sentence whose rank is under it never comes in after the first: the word limit is
    a maximum, and a summary of one clearly salient sentence is not padded with sentences the head rates unlikely
    (not with ``max_sentences``, which asks for that many). With ``floor_slack`` as well, the floor waits until
    the summary holds the word limit less that many words: only the last ``floor_slack`` words of a long summary
    are left unused for want of a sentence ranked at least the floor (None: the floor acts after the first
    sentence at any length). Memory: ``capacity`` sentences, whatever the document length. ``sentences()``
    returns the summary in document order.
    """

    def __init__(
        self,
        budget: int,
        capacity: int = 64,
        min_words: int = MIN_WORDS,
        redundancy: float = 1.0,
        centrality: float = 0.0,
        ratio: float | None = None,
        max_sentences: int | None = None,
        mmr: float = 0.0,
        centrality_words: float | None = None,
        centrality_kind: str = "document",
        standalone: bool = False,
        fill: str = "skip",
        floor: float | None = None,
        floor_slack: float | None = None,
    ):
        if budget < 1:
            raise ValueError(f"budget must be >= 1 word, got {budget}")
        self.budget, self.capacity = budget, max(1, capacity)
        # the length by share of the words read so far, or by sentences: then the pool takes any length
        self.ratio, self.max_sentences, self.words_read = ratio, max_sentences, 0
        self.min_words = min_words  # headings ("Introduction") and fragments are never summary sentences
        self.redundancy, self.centrality, self.mmr = redundancy, centrality, mmr
        self.centrality_words = centrality_words  # None: the centrality weight is the same at any length
        self.centrality_kind = one_of("centrality_kind", centrality_kind, CENTRALITY_KINDS)
        self.fill = one_of("fill", fill, FILLS)
        self.floor = floor  # None: off
        self.floor_slack = floor_slack  # None: the floor acts after the first sentence
        self.standalone = standalone  # every chosen sentence reads on its own (stands_alone)
        self._pool: list[Scored] = []  # min-heap on (score, -index)
        self._context = None

    def offer(
        self, sentence: Sentence, score: float, bow: dict | None = None, context=None, in_item: bool = False
    ) -> bool:
        """Consider one sentence; True if it entered the pool of candidates.

        Args:
            sentence: the candidate.
            score: its salience.
            bow: its hashed bag of words (for the redundancy and centrality terms).
            context: the running bag of words of the document (dense [BOW_DIM], updated in place by the caller),
                for ``centrality_kind`` ``"document"``.
            in_item: the sentence belongs to a list item whose marker an earlier sentence of the paragraph
                carries (the ``list_item`` feature): with ``standalone`` it is left out like the item's first one.
        """
        self._context = context
        longest = self.budget if self.ratio is None and self.max_sentences is None else float("inf")
        if not self.min_words <= sentence.n_words <= longest:
            return False
        if self.standalone and (in_item or not stands_alone(sentence.clean)):
            return False
        item = Scored(score, -sentence.index, sentence, bow or {})
        if len(self._pool) < self.capacity:
            heapq.heappush(self._pool, item)
        elif item > self._pool[0]:
            heapq.heapreplace(self._pool, item)
        else:
            return False
        return True

    def sentences(self) -> list[Scored]:
        """The summary now, in document order: the greedy fill of the pool by rank under the budget.

        When the next sentence in rank order does not fit the words left, ``fill`` ``"skip"`` passes over it to
        the best that still fits (the budget is used up, often by a short low-ranked sentence), ``"stop"`` ends
        the summary there (it is the best sentences in rank order and may stay under the budget). After the first
        sentence (with ``floor_slack``: once the summary holds the word limit less ``floor_slack`` words), none
        ranked under ``floor`` is a candidate.

        With ``mmr`` > 0 the fill is maximal marginal relevance (Carbonell & Goldstein 1998): each next sentence is
        the one of best ``rank - mmr * (largest word cosine with a sentence already chosen)``, so a sentence that
        says again what the summary says loses to one that adds something."""
        rank = {id(c): c.score for c in self._pool}
        if weight := self.centrality_weight():
            for c, value in zip(self._pool, self.centralities(), strict=True):
                rank[id(c)] += weight * value
        limit = self.word_limit()  # a sentence longer than the whole budget is never a candidate
        order = sorted(
            (c for c in self._pool if c.sentence.n_words <= limit),
            key=lambda c: (rank[id(c)], c.neg_index),
            reverse=True,
        )
        chosen, used, seen = [], 0, set()
        overlap = {id(c): 0.0 for c in order}  # largest cosine with a chosen sentence (MMR)
        n_words = {id(c): c.sentence.n_words for c in order}

        def best(cands: list[Scored]) -> Scored:
            if not self.mmr:
                return cands[0]
            return max(cands, key=lambda c: (rank[id(c)] - self.mmr * overlap[id(c)], c.neg_index))

        floor = self.floor if self.max_sentences is None else None
        floor_from = 0.0 if self.floor_slack is None else limit - self.floor_slack  # words held when the floor acts
        while order and (self.max_sentences is None or len(chosen) < self.max_sentences):
            c = best(order)
            if used + n_words[id(c)] > limit and self.fill == "skip":
                fits = [c for c in order if used + n_words[id(c)] <= limit]
                if not fits:
                    break
                c = best(fits)
            order.remove(c)
            keys = {normalized_text(c.sentence.text), template_text(c.sentence.text)} - {None}
            if keys & seen or any(bow_cosine(c.bow, o.bow) > min(self.redundancy, NEAR_DUPLICATE) for o in chosen):
                continue  # a repeated sentence (release notes, boilerplate) is said once, and ends nothing
            if used + n_words[id(c)] > limit:
                break  # "stop": the summary is the best sentences in rank order, never a lower-ranked filler
            chosen.append(c)
            seen |= keys
            used += n_words[id(c)]
            if floor is not None and used >= floor_from:  # from here: only sentences ranked at least the floor
                order = [o for o in order if rank[id(o)] >= floor]
                floor = None  # filtered once
            if self.mmr:
                for o in order:
                    overlap[id(o)] = max(overlap[id(o)], bow_cosine(o.bow, c.bow))
        return sorted(chosen, key=lambda c: c.sentence.index)

    def centralities(self) -> list[float]:
        """The centrality of each pooled sentence (in pool order), which ``sentences`` adds to its score times
        ``centrality_weight``:

        - ``"candidates"``: its mean word cosine with the other candidates of the pool, divided by the largest such
          mean (the most central candidate has 1): LexRank's degree centrality (Erkan & Radev 2004) over the
          pool, so a sentence that many of the best candidates agree with ranks up. The pool is bounded, so this
          costs at most ``capacity``² cosines whatever the document's length.
        - ``"document"``: its word cosine with the running bag of words of the whole document read so far
          (``offer``'s ``context``; 0 before one was given).
        """
        pool = self._pool
        if self.centrality_kind == "document":
            if self._context is None:
                return [0.0] * len(pool)
            norm = float(np.sqrt(self._context @ self._context)) or 1.0
            return [_dot(c.bow, self._context) / norm for c in pool]
        if len(pool) < 2:
            return [0.0] * len(pool)
        column: dict[int, int] = {}  # the pool's words (hashed buckets) as dense columns: at most capacity x words
        for c in pool:
            for k in c.bow:
                column.setdefault(k, len(column))
        m = np.zeros((len(pool), max(1, len(column))))
        for i, c in enumerate(pool):
            for k, v in c.bow.items():
                m[i, column[k]] = v
        norms = np.linalg.norm(m, axis=1)
        m /= np.where(norms > 0, norms, 1.0)[:, None]
        cos = m @ m.T
        np.fill_diagonal(cos, 0.0)
        degree = cos.sum(1) / (len(pool) - 1)
        top = degree.max()
        return (degree / top if top > 0 else degree).tolist()

    def centrality_weight(self) -> float:
        """The weight of the centrality term now: ``centrality``; with ``centrality_words``, in proportion to the
        summary's length, ``centrality * length / centrality_words`` (a long summary should cover what the whole
        document is about, a one-line one say what the thing is: on the summarizer's dev documents the best
        constant weight was 8 for abstracts of papers and 2 for one-line synopses). The length is the word
        limit; with ``max_sentences`` alone, that many sentences of the pool's mean length."""
        if not self.centrality or not self.centrality_words:
            return self.centrality
        length = self.word_limit()
        if math.isinf(length):
            pooled = [c.sentence.n_words for c in self._pool]
            length = (self.max_sentences or 1) * (sum(pooled) / len(pooled) if pooled else 0.0)
        return self.centrality * length / self.centrality_words

    def word_limit(self) -> float:
        """Words the summary may hold now: the budget; with ``ratio``, that share of the words read so far (at least
        one sentence's worth); with ``max_sentences`` alone, no word limit."""
        if self.ratio is not None:
            return max(self.min_words, math.ceil(self.ratio * self.words_read))
        return float("inf") if self.max_sentences is not None else self.budget

    @property
    def n_words(self) -> int:
        return sum(c.sentence.n_words for c in self.sentences())


def _dot(bow: dict, dense) -> float:
    """Dot product of a unit-normalized sparse bag with a dense vector (0 for an empty bag)."""
    n = sum(v * v for v in bow.values()) ** 0.5
    return sum(v * dense[k] for k, v in bow.items()) / n if n else 0.0


# ---- the salience head -----------------------------------------------------------------------------
class SalienceHead(nn.Module):
    """Features [N, F] -> salience logits [N]: standardization (fit on training data), then a linear model
    (``hidden`` = 0, what ``fit_head`` fits) or a small MLP (``hidden`` > 0, as older summarizers saved)."""

    def __init__(self, dim: int, hidden: int = 16, dropout: float = 0.1):
        super().__init__()
        self.register_buffer("mu", torch.zeros(dim))
        self.register_buffer("sigma", torch.ones(dim))
        layers = [nn.Linear(dim, hidden), nn.GELU(), nn.Dropout(dropout), nn.Linear(hidden, 1)] if hidden else []
        self.net = nn.Sequential(*(layers or [nn.Linear(dim, 1)]))
        self.dim, self.hidden = dim, hidden

    def forward(self, x: Tensor) -> Tensor:
        return self.net((x - self.mu) / self.sigma)[:, 0]


OBJECTIVES = ("bce", "listwise")


def head_objective(
    head: SalienceHead, x: Tensor, y: Tensor, w: Tensor, l2: float, objective: str = "bce", doc: Tensor | None = None
) -> Tensor:
    """The convex objective ``fit_head`` minimizes, plus ``l2 / 2`` times the squared weights (the bias is not
    penalized).

    ``"bce"``: class-balanced (by weight), row-weighted BCE of a linear head's logits against the 0/1 labels. ``"listwise"``:
    within each document, the cross-entropy of the softmax of its sentences' logits against the oracle's choice
    (the labels spread evenly over the chosen sentences), weighted by the document's row weight: only how a
    sentence ranks against the others of its document counts, which is how the summary uses the scores (the
    top of each document fills the budget). Both are convex in the weights.

    Args:
        head: a linear ``SalienceHead`` (``hidden`` = 0) whose standardization is already set.
        x: features [N, F]; y: 0/1 labels [N]; w: row weights [N] with mean 1.
        doc: [N] the document of each row, 0..D-1 (``"listwise"`` only).
    """
    one_of("objective", objective, OBJECTIVES)
    penalty = 0.5 * l2 * head.net[0].weight.square().sum()
    logits = head(x)
    if objective == "bce":
        pos_weight = (((1 - y) * w).sum() / (y * w).sum().clamp(min=1e-12)).clamp(max=50)  # balance the few chosen
        bce = nn.functional.binary_cross_entropy_with_logits(logits, y, pos_weight=pos_weight, reduction="none")
        return (bce * w).mean() + penalty
    if doc is None:
        raise ValueError("the listwise objective needs the document of each row (doc)")
    n_docs = int(doc.max()) + 1
    top = torch.full((n_docs,), -torch.inf, dtype=logits.dtype).scatter_reduce(0, doc, logits.detach(), "amax")
    lse = torch.zeros(n_docs, dtype=logits.dtype).index_add(0, doc, (logits - top[doc]).exp()).log() + top
    chosen = torch.zeros(n_docs, dtype=logits.dtype).index_add(0, doc, y)
    target = y / chosen[doc].clamp(min=1)  # each document's chosen sentences share its mass
    doc_w = torch.zeros(n_docs, dtype=logits.dtype).index_add(0, doc, w) / torch.bincount(doc, minlength=n_docs)
    ce = lse - torch.zeros(n_docs, dtype=logits.dtype).index_add(0, doc, target * logits)
    has = chosen > 0  # a document whose oracle chose nothing says nothing about ranking
    return (ce * doc_w)[has].sum() / doc_w[has].sum().clamp(min=1e-12) + penalty


def fit_head(
    feats: list[Tensor],
    labels: list[Tensor],
    l2: float = 0.1,
    weights: list[float] | None = None,
    objective: str = "bce",
) -> SalienceHead:
    """A linear ``SalienceHead`` fit to the optimum of ``head_objective`` on oracle labels.

    The objective is convex, strictly in the weights for ``l2`` > 0 (standardized features), so L-BFGS in
    float64 run to a vanishing gradient finds its one minimum: the head does not depend on a seed, an epoch count
    or the order of the documents, and ``l2`` (selected leave-one-domain-out) is its only setting. The stochastic
    head this replaces moved a held-out domain's ROUGE-2 by up to 3.6 points between seeds (docs/summarizing.md).

    Args:
        feats: per document, features [N_i, F].
        labels: per document, 0/1 labels [N_i].
        l2: the weight penalty, in units of the (mean 1) row-weighted loss.
        weights: per document, a row weight (e.g. 1 / sentences of its domain, so every domain counts the same).
        objective: ``"bce"`` or ``"listwise"`` (``head_objective``).
    Returns:
        The head in eval mode, float32, standardization fit on all rows as weighted.
    """
    if l2 <= 0:
        raise ValueError(f"l2 must be > 0 (the objective is then strictly convex), got {l2}")
    one_of("objective", objective, OBJECTIVES)
    x, y = torch.cat(feats).double(), torch.cat(labels).double()
    doc = torch.cat([torch.full((len(f),), i, dtype=torch.long) for i, f in enumerate(feats)])
    w = torch.cat([torch.full((len(f),), wt) for f, wt in zip(feats, weights or [1.0] * len(feats), strict=True)])
    w = (w / w.mean()).double()
    head = SalienceHead(x.shape[1], hidden=0).double()
    with torch.no_grad():
        mu = (w[:, None] * x).mean(0)  # the rows as weighted: a domain's share does not hang on its length
        head.mu.copy_(mu)
        head.sigma.copy_((w[:, None] * (x - mu).square()).mean(0).sqrt().clamp(min=1e-4))
        head.net[0].weight.zero_()  # a fixed start: nothing random anywhere
        head.net[0].bias.zero_()
    opt = torch.optim.LBFGS(head.parameters(), max_iter=1000, tolerance_grad=1e-9, tolerance_change=1e-15,
                            history_size=50, line_search_fn="strong_wolfe")  # fmt: skip

    def closure() -> Tensor:
        opt.zero_grad()
        loss = head_objective(head, x, y, w, l2, objective, doc)
        loss.backward()
        return loss

    opt.step(closure)
    return head.float().eval()


# ---- the summarizer ----------------------------------------------------------------------------------
@dataclass
class Update:
    """A running summary (``final`` once the document has ended); ``prose_read``: sentences that qualified."""

    sentences_read: int
    chars_read: int
    summary: list[Scored]
    final: bool = False
    prose_read: int = 0

    def text(self) -> str:
        return "\n".join(c.sentence.clean for c in self.summary)


class Summarizer:
    """An LM plus a trained salience head: ``stream(pieces)`` yields running summaries of one document.

    ``lead_bonus`` (added to the score of the first ``LEAD`` prose sentences), ``redundancy``, ``centrality``,
    ``centrality_words``, ``centrality_kind``, ``mmr``, ``fill``, ``floor`` and ``floor_slack`` (see
    ``SummaryBuffer``) are the selection settings saved with the head.
    """

    def __init__(self, model: LinearTransformerLM, head: SalienceHead, meta: dict | None = None):
        self.model, self.head = model.eval(), head.eval()
        self.reader = LMReader(model)
        self.meta = dict(meta or {})
        self.lead_bonus = float(self.meta.get("lead_bonus", 0.0))
        self.redundancy = float(self.meta.get("redundancy", 1.0))
        self.centrality = float(self.meta.get("centrality", 0.0))
        self.mmr = float(self.meta.get("mmr", 0.0))
        words = self.meta.get("centrality_words")  # absent in summarizers saved before the weight followed the length
        self.centrality_words = float(words) if words else None
        # absent in summarizers saved before centrality among the candidates: the whole document's words
        kind = str(self.meta.get("centrality_kind", "document"))
        self.centrality_kind = one_of("centrality_kind", kind, CENTRALITY_KINDS, SummarizerError)
        fill = str(self.meta.get("fill", "skip"))  # absent in summarizers saved before the rule was a setting
        self.fill = one_of("fill", fill, FILLS, SummarizerError)
        # absent in summarizers saved before the floor: off; before the slack: the floor acts after the first
        self.floor = optional_number("floor", self.meta.get("floor"), "a number", SummarizerError)
        self.floor_slack = optional_number("floor_slack", self.meta.get("floor_slack"), SLACK, SummarizerError,
                                           at_least=0)  # fmt: skip
        # the features the head reads, by name (a summarizer saved before a feature was added reads the others)
        names = _known_features(self.meta.get("features") or list(FEATURES))
        self.columns = None if names == list(FEATURES) else [FEATURES.index(n) for n in names]
        if head.dim != len(names):
            raise SummarizerError(f"salience head expects {head.dim} features, its settings name {len(names)}")

    def buffer(
        self, budget: int, ratio: float | None = None, sentences: int | None = None, standalone: bool = False
    ) -> SummaryBuffer:
        """An empty running summary with this summarizer's selection settings."""
        return SummaryBuffer(budget, redundancy=self.redundancy, centrality=self.centrality, ratio=ratio,
                             max_sentences=sentences, mmr=self.mmr, centrality_words=self.centrality_words,
                             centrality_kind=self.centrality_kind, standalone=standalone, fill=self.fill,
                             floor=self.floor, floor_slack=self.floor_slack)  # fmt: skip

    def scores(self, feats: Tensor) -> list[float]:
        """Salience of prose sentences from their features [N, F] (the lead prior included)."""
        with torch.no_grad():
            s = self.head(feats if self.columns is None else feats[:, self.columns])
        return (s + self.lead_bonus * (feats[:, FEATURES.index("in_lead")] > 0.5).float()).tolist()

    @torch.no_grad()
    def stream(
        self, pieces: Iterable[str], budget: int = 120, every: int = 0, ratio: float | None = None,
        sentences: int | None = None, live: bool = False, standalone: bool = False,
    ) -> Iterator[Update]:  # fmt: skip
        """Read a document piece by piece; yield an Update every ``every`` sentences (0: none) and a final one.

        The length: ``budget`` words; or ``ratio`` of the words read so far; or ``sentences`` sentences.
        ``standalone``: never choose a sentence that does not read on its own (``stands_alone``).

        Memory: the LM state, the feature state, one group of sentences, the current sentence and the buffer;
        constant in the document's length. The result does not depend on how the text is split into pieces.
        ``live``: a stream that grows while it is read (a pipe being written): the sentences of each piece are
        read as soon as it arrives, in a group shorter than ``GROUP`` if need be, so a running summary never
        waits for text that has not been written yet. Scores may then differ from a whole-file read in their
        last digits (the LM reads other group boundaries); without it the groups are fixed.
        """
        seg, buf, comments = SentenceSegmenter(), self.buffer(budget, ratio, sentences, standalone), RstComments()
        state = FeatureState(self.reader.d)
        self.reader.reset()
        pending: list[tuple[Sentence, bool]] = []  # (sentence, inside a reST comment)
        read = chars = prose = 0

        def drain(force: bool) -> Iterator[Update]:
            nonlocal pending, read, chars, prose
            while len(pending) >= GROUP or (force and pending):
                group, flags = zip(*pending[:GROUP], strict=True)
                group, pending = list(group), pending[GROUP:]
                rows = state.read(group, *self.reader(group), list(flags))  # lazy: one sentence at a time
                j, f, bow = next(rows, (None, None, None))
                for k, s in enumerate(group):
                    if k == j:
                        buf.offer(s, self.scores(f[None])[0], bow, state.doc_bow, in_item=state.item)
                        prose += 1
                        j, f, bow = next(rows, (None, None, None))
                    read, chars = read + 1, s.end
                    buf.words_read += s.n_words
                    if every and read % every == 0:
                        yield Update(read, chars, buf.sentences(), prose_read=prose)

        for piece in pieces:
            comments.feed(piece)
            pending += [(s, comments.in_comment(s)) for s in seg.feed(piece)]  # at once: the tracker stays short
            yield from drain(live)
        pending += [(s, comments.in_comment(s)) for s in seg.finish()]
        yield from drain(True)
        yield Update(read, chars, buf.sentences(), final=True, prose_read=prose)

    def summarize(self, text: str, budget: int = 120, standalone: bool = False) -> Update:
        """The final summary of a document held in memory."""
        *_, final = self.stream([text], budget, standalone=standalone)
        return final

    def save(self, path: str | Path, training: dict | None = None, overwrite: bool = False) -> None:
        """Write the LM (config.json, model.safetensors, README.md card) and the head (salience.safetensors + salience.json)
        as one directory, swapped in whole (``strandline.models.persist.modeldir.save_model``; ``overwrite`` replaces a model
        directory)."""
        from safetensors.torch import save

        state = {k: v.contiguous() for k, v in self.head.state_dict().items()}
        meta = {"format": FORMAT, "features": list(FEATURES), "dim": self.head.dim, "hidden": self.head.hidden}
        meta |= {"group": GROUP, "lead": LEAD, **self.meta, **(training or {})}
        head = {"salience.safetensors": save(state), "salience.json": (json.dumps(meta, indent=2) + "\n").encode()}
        training_facts = self.model.meta.get("training")
        self.model.save(path, tokenizer="bytes", training=training_facts, overwrite=overwrite, extra=head)


def _known_features(names) -> list:
    """``names`` (a head's feature names, as its salience.json lists them) when this version computes each of them;
    else a SummarizerError naming the others."""
    if not isinstance(names, list) or not set(map(str, names)) <= set(FEATURES):
        unknown = ", ".join(str(n) for n in (names if isinstance(names, list) else [names]) if n not in FEATURES)
        raise SummarizerError(f"the salience head reads features this version does not compute: {unknown}; retrain it")
    return names


def load_summarizer(path: str | Path) -> Summarizer:
    """A Summarizer from a directory written by ``Summarizer.save``.

    Raises:
        ModelLoadError: the LM part is not a model directory.
        SummarizerError: the head files are missing, corrupt, or made for other features or another LM.
    """
    from strandline.models.streaming import bound_memory

    path = Path(resolve(str(path)))  # a path, or a shipped summarizer's name
    model = load(path)
    if note := bound_memory(model, where=str(path)):  # a softmax LM reads the document with a window
        print(f"strandline summarize: note: {note}", file=sys.stderr)
    meta_path, weights = path / "salience.json", path / "salience.safetensors"
    if not meta_path.is_file() or not weights.is_file():
        raise SummarizerError(
            f"{path} has no salience head (salience.json + salience.safetensors); see docs/summarizing.md"
        )
    kind = model.meta.get("tokenizer")
    if kind not in ("bytes", None) or model.config.vocab_size < ByteTokenizer.vocab_size:
        raise SummarizerError(
            f"{path}: the summarizer's LM reads {kind!r} tokens ({model.config.vocab_size} ids); "
            f"a summarizer needs a 'bytes' LM ({ByteTokenizer.vocab_size} ids)"
        )
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        if not isinstance(meta, dict):
            raise ValueError("not a JSON object")
    except (ValueError, UnicodeDecodeError) as e:
        raise SummarizerError(f"{meta_path}: not a valid salience.json ({str(e).splitlines()[0]})") from None
    try:
        _known_features(meta.get("features"))
    except SummarizerError as e:
        raise SummarizerError(f"{meta_path}: {e}") from None
    try:
        head = SalienceHead(int(meta["dim"]), int(meta["hidden"]))
        head.load_state_dict(_read_safetensors(weights))
    except (KeyError, TypeError, ValueError, RuntimeError) as e:
        msg = f"missing key {e}" if isinstance(e, KeyError) else str(e).strip().splitlines()[0]
        raise SummarizerError(f"{path}: salience head does not match salience.json ({msg})") from None
    try:
        return Summarizer(model, head, meta)
    except SummarizerError as e:
        raise SummarizerError(f"{meta_path}: {e}") from None


def _read_safetensors(path: Path) -> dict[str, Tensor]:
    from safetensors import SafetensorError
    from safetensors.torch import load

    try:
        return load(path.read_bytes())
    except (SafetensorError, ValueError, OSError) as e:
        raise SummarizerError(f"{path}: not a readable safetensors file ({str(e).splitlines()[0]})") from None
