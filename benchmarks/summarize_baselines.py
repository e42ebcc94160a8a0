"""Extractive baselines under a word budget: Lead, TextRank, LexRank (all over the same candidate sentences)."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np

from strandline.errors import one_of
from strandline.tasks.summarize import FILLS
from strandline.tasks.summarize.oracle import rouge_tokens


def fill(sentences, order, budget: int, min_words: int = 4, rule: str = "skip") -> list:
    """Sentences taken in ``order`` while they fit the word budget, returned in document order. Sentences under
    ``min_words`` (headings, fragments) or over the whole budget are never taken, as in the summarizer's buffer.
    When the next one does not fit the words left, ``rule`` ``"skip"`` passes over it, ``"stop"`` ends there
    (``SummaryBuffer.sentences``' ``fill``), so a baseline and the summarizer can share one rule."""
    one_of("rule", rule, FILLS)
    chosen, used = [], 0
    for i in order:
        n = sentences[i].n_words
        if not min_words <= n <= budget:
            continue
        if used + n > budget:
            if rule == "stop":
                break
            continue
        chosen.append(i)
        used += n
    return [sentences[i] for i in sorted(chosen)]


def lead(sentences, budget: int, rule: str = "skip") -> list:
    """The leading sentences that fit the budget: with ``rule`` ``"stop"`` a prefix of the document (its
    candidates), with ``"skip"`` a later sentence short enough to fit the words left comes in too."""
    return fill(sentences, lead_order(sentences), budget, rule=rule)


def both_fills(docs: list[dict], rank=None) -> dict[str, list[list]]:
    """A baseline's summaries of ``docs`` under each fill rule: {rule: [chosen sentences per document]}; its
    ranking (``rank(sentences)``: an ``*_order`` function; none: Lead's) is computed once per document."""
    orders = [rank(d["prose"]) if rank else lead_order(d["prose"]) for d in docs]
    return {r: [fill(d["prose"], o, d["budget"], rule=r) for d, o in zip(docs, orders, strict=True)] for r in FILLS}


def stronger_fill(docs: list[dict], score, rank=None) -> tuple[str, list[float]]:
    """A baseline at its stronger fill on ``docs``: its ranking (``rank``, as ``both_fills``) filled by each rule,
    and of the two the one with the higher mean ``score(doc, chosen)``, with its per-document scores. Which fill
    is stronger depends on the references' length (a prefix wins where they are one line), so both are tried and
    the stronger kept."""
    per = {r: [score(d, c) for d, c in zip(docs, chosen, strict=True)] for r, chosen in both_fills(docs, rank).items()}
    rule = ranked_fills({r: float(np.mean(v)) if docs else 0.0 for r, v in per.items()})[0]
    return rule, per[rule]


def stronger_lead(docs: list[dict], score) -> tuple[str, list[float]]:
    """The Lead the summarizer is measured against on ``docs``: ``stronger_fill`` of Lead."""
    return stronger_fill(docs, score, lead_order)


def ranked_fills(means: dict[str, float]) -> tuple[str, str]:
    """The two fill rules, the one of the higher mean score first (a tie: ``"skip"``, the older rule)."""
    strong = max(FILLS, key=lambda r: (means[r], r == "skip"))
    return strong, next(r for r in FILLS if r != strong)


def _pagerank(W: np.ndarray, damping: float = 0.85, iters: int = 50) -> np.ndarray:
    n = len(W)
    W = W / np.maximum(W.sum(1, keepdims=True), 1e-12)
    r = np.full(n, 1.0 / max(1, n))
    for _ in range(iters):
        r = (1 - damping) / max(1, n) + damping * W.T @ r
    return r


def textrank_order(sentences) -> np.ndarray:
    """TextRank's ranking (Mihalcea & Tarau 2004): sentence indices by PageRank over overlap / (log|Si| + log|Sj|)
    similarities, best first."""
    if not sentences:
        return np.zeros(0, dtype=int)
    sets = [set(rouge_tokens(s.clean)) for s in sentences]
    vocab = {w: k for k, w in enumerate(set().union(*sets))}
    X = np.zeros((len(sets), max(1, len(vocab))))
    for i, ws in enumerate(sets):
        X[i, [vocab[w] for w in ws]] = 1.0
    n = np.log(np.maximum(X.sum(1), 2))
    W = (X @ X.T) / (n[:, None] + n[None, :])
    np.fill_diagonal(W, 0.0)
    return np.argsort(-_pagerank(W), kind="stable")


def lexrank_order(sentences, threshold: float = 0.1) -> np.ndarray:
    """LexRank's ranking (Erkan & Radev 2004): sentence indices by PageRank over the graph of tf-idf cosines above
    ``threshold``, best first; the idf comes from the document's own sentences (single-document summarization, no
    outside corpus)."""
    if not sentences:
        return np.zeros(0, dtype=int)
    toks = [Counter(rouge_tokens(s.clean)) for s in sentences]
    df = Counter(w for t in toks for w in t)
    vocab = {w: k for k, w in enumerate(df)}
    X = np.zeros((len(toks), max(1, len(vocab))))
    for i, t in enumerate(toks):
        for w, c in t.items():
            X[i, vocab[w]] = c * math.log(len(toks) / df[w])
    X /= np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1e-12)
    W = ((X @ X.T) > threshold).astype(float)
    np.fill_diagonal(W, 0.0)
    return np.argsort(-_pagerank(W), kind="stable")


def lead_order(sentences) -> range:
    """Lead's ranking: reading order."""
    return range(len(sentences))


def textrank(sentences, budget: int, rule: str = "skip") -> list:
    """TextRank's summary: its ranking (``textrank_order``) filled to the budget by ``rule``."""
    return fill(sentences, textrank_order(sentences), budget, rule=rule)


def lexrank(sentences, budget: int, rule: str = "skip") -> list:
    """LexRank's summary: its ranking (``lexrank_order``) filled to the budget by ``rule``."""
    return fill(sentences, lexrank_order(sentences), budget, rule=rule)
