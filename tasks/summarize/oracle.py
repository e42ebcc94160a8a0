"""The greedy ROUGE oracle that labels training sentences (and bounds what extraction can reach).

rouge-score's own tokenizer and Porter stemmer, so labels match the metric the benchmark reports.
"""

from __future__ import annotations

from collections import Counter

import torch
from torch import Tensor

from strandline.data.segment import count_words

_TOKENIZER = None


def rouge_tokens(text: str) -> list[str]:
    """rouge-score's own tokenization (lowercase, alphanumerics, Porter stemmer), so labels match the metric."""
    global _TOKENIZER
    if _TOKENIZER is None:
        from rouge_score.tokenizers import DefaultTokenizer

        _TOKENIZER = DefaultTokenizer(use_stemmer=True)
    return _TOKENIZER.tokenize(text)


def _ngrams(tokens: list[str], n: int) -> Counter:
    return Counter(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))


def _f1(cand: Counter, ref: Counter) -> float:
    overlap = sum((cand & ref).values())
    if not overlap:
        return 0.0
    p, r = overlap / sum(cand.values()), overlap / sum(ref.values())
    return 2 * p * r / (p + r)


def _overlap_gain(cur: Counter, cand: Counter, ref: Counter) -> int:
    """How much adding ``cand`` to ``cur`` raises the clipped n-gram overlap with ``ref`` (touches cand only)."""
    return sum(min(cur[g] + c, ref[g]) - min(cur[g], ref[g]) for g, c in cand.items() if g in ref)


def greedy_oracle(sentences: list[str], reference: str, budget: int, objective: str = "recall") -> list[int]:
    """Indices of the sentences a greedy ROUGE oracle picks: repeatedly add the sentence that most raises the
    mean of ROUGE-1 and ROUGE-2 (``objective``: 'recall' or 'f1') against ``reference`` while the words fit
    ``budget``; stop when nothing raises it. Recall under a word budget (the default) fills the budget like the
    summaries it trains for; F1 stops after a few short sentences. Bigrams across two chosen sentences are not
    counted, as rouge-score does with newline-separated sentences.

    Args:
        sentences: the document's sentences.
        reference: the reference summary.
        budget: maximum total words (whitespace-separated) of the chosen sentences.
        objective: 'recall' or 'f1'.
    Returns:
        Chosen indices, in the order they were picked.
    """
    if objective not in ("recall", "f1"):
        raise ValueError(f"objective must be 'recall' or 'f1', got {objective!r}")
    ref_tok = rouge_tokens(reference)
    refs = (_ngrams(ref_tok, 1), _ngrams(ref_tok, 2))
    ref_n = [max(1, sum(r.values())) for r in refs]
    grams = [(_ngrams(t, 1), _ngrams(t, 2)) for t in map(rouge_tokens, sentences)]
    sizes = [(sum(g[0].values()), sum(g[1].values())) for g in grams]
    words = [count_words(s) for s in sentences]
    cur, overlap, size = (Counter(), Counter()), [0, 0], [0, 0]

    def score(ov: list[int], sz: list[int]) -> float:
        if objective == "recall":
            return sum(o / n for o, n in zip(ov, ref_n, strict=True)) / 2
        return sum(2 * o / (s + n) if o else 0.0 for o, s, n in zip(ov, sz, ref_n, strict=True)) / 2

    chosen: list[int] = []
    used, best = 0, 0.0
    while True:
        pick, pick_score = None, best
        for i, g in enumerate(grams):
            if i in chosen or used + words[i] > budget or not sizes[i][0]:
                continue
            ov = [overlap[n] + _overlap_gain(cur[n], g[n], refs[n]) for n in (0, 1)]
            sc = score(ov, [size[n] + sizes[i][n] for n in (0, 1)])
            if sc > pick_score + 1e-12:
                pick, pick_score = i, sc
        if pick is None:
            return chosen
        for n in (0, 1):
            overlap[n] += _overlap_gain(cur[n], grams[pick][n], refs[n])
            size[n] += sizes[pick][n]
            cur[n].update(grams[pick][n])
        chosen.append(pick)
        used, best = used + words[pick], pick_score


def oracle_labels(sentences: list[str], reference: str, budget: int, objective: str = "recall") -> Tensor:
    """Binary labels [N] (1 = picked by ``greedy_oracle``)."""
    y = torch.zeros(len(sentences))
    y[greedy_oracle(sentences, reference, budget, objective)] = 1.0
    return y


def rouge_labels(sentences: list[list[str]], reference: list[str]) -> Tensor:
    """Graded labels [N] in [0, 1]: each sentence's mean of ROUGE-1 and ROUGE-2 F1 against the reference, divided
    by the document's best (0 everywhere when no sentence shares a word with it).

    Args:
        sentences: the sentences as ``rouge_tokens``.
        reference: the reference summary as ``rouge_tokens``.
    """
    refs = (_ngrams(reference, 1), _ngrams(reference, 2))
    y = torch.tensor([sum(_f1(_ngrams(t, n), refs[n - 1]) for n in (1, 2)) / 2 for t in sentences])
    return y / y.max() if len(y) and y.max() > 0 else y
