"""Incremental extractive summarization from the state of a linear-transformer LM.

The document streams through the LM sentence by sentence with its state carried (chunked mode inside a call,
the state across calls), so memory is constant in the document length. Each sentence is scored by a small
salience head on features read from the LM: the mean and last hidden state over the sentence's bytes (both
functions of the carried state, i.e. of everything read so far), their agreement with a running document
centroid, and its position (sentence and paragraph number, not the unknown document length). A bounded buffer
keeps the best sentences that fit a word budget: the running summary, ready at any point.

Training: a greedy ROUGE oracle (rouge-score's tokenizer and stemmer) against the reference summary labels the
sentences of each training document; the head is fit with a plain loop (seconds on a CPU).
"""

from __future__ import annotations

import heapq
import json
import math
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from data.segment import Sentence, SentenceSegmenter
from data.tokenizers import ByteTokenizer
from models import LinearTransformerLM, load

N_POSITION_FEATURES = 5
GROUP = 64  # sentences per LM call: fixed, so results do not depend on how the text arrives
MAX_CALL_TOKENS = 1024  # tokens per LM call: bounded activations and allocator reuse keep peak memory flat (measured)


# ---- oracle labels -------------------------------------------------------------------------------
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
    words = [len(s.split()) for s in sentences]
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


# ---- the running summary -------------------------------------------------------------------------
@dataclass(order=True)
class Scored:
    """A candidate sentence with its salience score (ordering: by score, then earlier sentence first)."""

    score: float
    neg_index: int
    sentence: Sentence = field(compare=False)


class SummaryBuffer:
    """The best-scoring sentences whose words fit ``budget``, from a bounded pool of candidates.

    The pool keeps the ``capacity`` best-scored sentences seen so far (a min-heap), so a sentence pushed out of the
    summary by a better one can come back when a later sentence displaces that one. The summary is the greedy
    fill of the pool by score, skipping sentences that would overflow the budget. Memory: ``capacity`` sentences,
    whatever the document length. ``sentences()`` returns the summary in document order.
    """

    def __init__(self, budget: int, capacity: int = 64, min_words: int = 4):
        if budget < 1:
            raise ValueError(f"budget must be >= 1 word, got {budget}")
        self.budget, self.capacity = budget, max(1, capacity)
        self.min_words = min_words  # headings ("Introduction") and fragments are never summary sentences
        self._pool: list[Scored] = []  # min-heap on (score, -index)
        self._chosen: list[Scored] = []

    def offer(self, sentence: Sentence, score: float) -> bool:
        """Consider one sentence; True if the summary changed."""
        if not self.min_words <= sentence.n_words <= self.budget:
            return False
        item = Scored(score, -sentence.index, sentence)
        if len(self._pool) < self.capacity:
            heapq.heappush(self._pool, item)
        elif item > self._pool[0]:
            heapq.heapreplace(self._pool, item)
        else:
            return False
        chosen, used = [], 0
        for c in sorted(self._pool, reverse=True):
            if used + c.sentence.n_words <= self.budget:
                chosen.append(c)
                used += c.sentence.n_words
        changed = [c.sentence.index for c in chosen] != [c.sentence.index for c in self._chosen]
        self._chosen = chosen
        return changed

    def sentences(self) -> list[Scored]:
        return sorted(self._chosen, key=lambda c: c.sentence.index)

    @property
    def n_words(self) -> int:
        return sum(c.sentence.n_words for c in self._chosen)


# ---- features from the LM ------------------------------------------------------------------------
class SentenceFeaturizer:
    """Feeds sentences through the LM with its state carried and returns one feature vector per sentence.

    Sentences are processed in groups of ``GROUP`` (one LM call each) so the result is the same however
    the document was split into pieces. The state is reset by ``reset()`` at each new document.
    """

    def __init__(self, model: LinearTransformerLM):
        self.model = model.eval()
        self.tok = ByteTokenizer()
        self.d = model.config.d_model
        self.dim = 3 * self.d + 1 + N_POSITION_FEATURES
        self.reset()

    def reset(self) -> None:
        self.state = None
        self.centroid = torch.zeros(self.d)
        self.count = 0
        self.paragraph = 0

    @torch.no_grad()
    def __call__(self, sentences: list[Sentence]) -> Tensor:
        """Features [len(sentences), dim] for the next sentences of the current document."""
        feats = [self._group(sentences[i : i + GROUP]) for i in range(0, len(sentences), GROUP)]
        return torch.cat(feats) if feats else torch.zeros(0, self.dim)

    def _group(self, sentences: list[Sentence]) -> Tensor:
        ids, spans = [], []
        for s in sentences:
            sep = "" if s.index == 0 else ("\n\n" if s.paragraph != self.paragraph else " ")
            sep_ids, text_ids = self.tok.encode(sep), self.tok.encode(s.clean)
            start = sum(len(x) for x in ids) + len(sep_ids)
            ids += [sep_ids, text_ids]
            spans.append((start, start + len(text_ids)))
            self.paragraph = s.paragraph
        tokens = torch.from_numpy(np.concatenate(ids).astype(np.int64))[None]
        sums, lasts = torch.zeros(len(sentences), self.d), torch.zeros(len(sentences), self.d)
        # oneDNN caches one primitive per input shape; every group has a new length, so with it enabled memory grew
        # ~25 MB per 1000 sentences (measured). The native kernels keep memory flat at the same speed here.
        onednn = torch.backends.mkldnn.enabled
        torch.backends.mkldnn.enabled = False  # set and restored by hand: flags() also warns about TF32 on every call
        try:
            # calls of at most MAX_CALL_TOKENS, reduced to per-sentence sums at once: memory is one call's
            # activations, not the group's hidden states (a group of 64 long sentences is up to 128k tokens)
            for a in range(0, tokens.shape[1], MAX_CALL_TOKENS):
                h, self.state = self.model.hidden(tokens[:, a : a + MAX_CALL_TOKENS], self.state)
                h, b = h[0].float(), a + h.shape[1]
                for j, (s0, s1) in enumerate(spans):
                    if max(s0, a) < min(s1, b):
                        sums[j] += h[max(s0, a) - a : min(s1, b) - a].sum(0)
                    if a < s1 <= b:
                        lasts[j] = h[s1 - 1 - a]
        finally:
            torch.backends.mkldnn.enabled = onednn
        out = []
        for j, s in enumerate(sentences):
            mean, last = sums[j] / (spans[j][1] - spans[j][0]), lasts[j]
            cos = torch.cosine_similarity(mean, self.centroid, dim=0) if self.count else torch.tensor(0.0)
            out.append(torch.cat([mean, last, mean - self.centroid, cos[None], _position(s)]))
            self.centroid = (self.centroid * self.count + mean) / (self.count + 1)  # running mean: constant memory
            self.count += 1
        return torch.stack(out)


def _position(s: Sentence) -> Tensor:
    """Where the sentence is, from what has been read (the document's length is unknown while streaming)."""
    return torch.tensor(
        [math.log1p(s.index), math.log1p(s.paragraph), float(s.index < 8), math.log1p(s.n_words), float(s.n_words < 5)]
    )


# ---- the salience head -----------------------------------------------------------------------------
class SalienceHead(nn.Module):
    """Features [N, F] -> salience logits [N]: standardization (fit on training data) then a small MLP."""

    def __init__(self, dim: int, hidden: int = 64, dropout: float = 0.1):
        super().__init__()
        self.register_buffer("mu", torch.zeros(dim))
        self.register_buffer("sigma", torch.ones(dim))
        self.net = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Dropout(dropout), nn.Linear(hidden, 1))
        self.dim, self.hidden = dim, hidden

    def forward(self, x: Tensor) -> Tensor:
        return self.net((x - self.mu) / self.sigma)[:, 0]


def train_head(
    feats: list[Tensor], labels: list[Tensor], epochs: int = 30, hidden: int = 64, lr: float = 3e-3, seed: int = 0
) -> Iterator[tuple[int, SalienceHead]]:
    """Fit a ``SalienceHead`` with BCE on oracle labels (class-balanced); yields (epoch, head) after each epoch
    so the caller can select the epoch on validation. Full-batch-free minibatches of 512 rows."""
    torch.manual_seed(seed)
    x, y = torch.cat(feats), torch.cat(labels)
    head = SalienceHead(x.shape[1], hidden)
    head.mu.copy_(x.mean(0))
    head.sigma.copy_(x.std(0).clamp(min=1e-4))
    opt = torch.optim.AdamW(head.parameters(), lr=lr, weight_decay=0.01)
    pos_weight = ((1 - y).sum() / y.sum().clamp(min=1)).clamp(max=50)
    loss_fn = nn.BCEWithLogitsLoss(pos_weight=pos_weight)
    for epoch in range(1, epochs + 1):
        head.train()
        for idx in torch.randperm(len(x)).split(512):
            loss = loss_fn(head(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
        yield epoch, head.eval()


# ---- the summarizer ----------------------------------------------------------------------------------
@dataclass
class Update:
    """A running summary (``final`` once the document has ended)."""

    sentences_read: int
    chars_read: int
    summary: list[Scored]
    final: bool = False

    def text(self) -> str:
        return "\n".join(c.sentence.clean for c in self.summary)


class Summarizer:
    """An LM plus a trained salience head: ``stream(pieces)`` yields running summaries of one document."""

    def __init__(self, model: LinearTransformerLM, head: SalienceHead, meta: dict | None = None):
        self.model, self.head = model.eval(), head.eval()
        self.featurizer = SentenceFeaturizer(model)
        self.meta = meta or {}
        if self.featurizer.dim != head.dim:
            raise ValueError(f"salience head expects {head.dim} features, the LM gives {self.featurizer.dim}")

    @torch.no_grad()
    def stream(self, pieces: Iterable[str], budget: int = 120, every: int = 0) -> Iterator[Update]:
        """Read a document piece by piece; yield an Update every ``every`` sentences (0: none) and a final one.

        Memory: the LM state, one group of sentences, the current sentence and the buffer; constant in length.
        """
        seg, buf = SentenceSegmenter(), SummaryBuffer(budget)
        self.featurizer.reset()
        pending: list[Sentence] = []
        read = chars = 0
        for piece, last in _with_last(pieces):
            pending += seg.feed(piece) if not last else [*seg.feed(piece), *seg.finish()]
            while len(pending) >= GROUP or (last and pending):
                group, pending = pending[:GROUP], pending[GROUP:]
                scores = self.head(self.featurizer(group)).tolist()
                for s, score in zip(group, scores, strict=True):
                    buf.offer(s, score)
                    read, chars = read + 1, s.end
                    if every and read % every == 0:
                        yield Update(read, chars, buf.sentences())
        yield Update(read, chars, buf.sentences(), final=True)

    def summarize(self, text: str, budget: int = 120) -> Update:
        """The final summary of a document held in memory."""
        *_, final = self.stream([text], budget)
        return final

    def save(self, path: str | Path, training: dict | None = None) -> None:
        """Write the LM (config.json + model.safetensors) and the head (salience.safetensors + salience.json)."""
        from safetensors.torch import save_file

        path = Path(path)
        self.model.save(path, tokenizer="bytes", training=self.model.meta.get("training"))
        save_file({k: v.contiguous() for k, v in self.head.state_dict().items()}, str(path / "salience.safetensors"))
        meta = {"dim": self.head.dim, "hidden": self.head.hidden, "group": GROUP, **self.meta, **(training or {})}
        tmp = path / "salience.json.tmp"
        tmp.write_text(json.dumps(meta, indent=2) + "\n")
        tmp.replace(path / "salience.json")


def load_summarizer(path: str | Path) -> Summarizer:
    """A Summarizer from a directory written by ``Summarizer.save`` (raises ModelLoadError if unusable)."""
    from safetensors.torch import load_file

    from models import ModelLoadError

    path = Path(path)
    model = load(path)
    if not (path / "salience.json").exists():
        raise ModelLoadError(f"{path} has no salience head (salience.json); build one with benchmarks/summarize.py")
    meta = json.loads((path / "salience.json").read_text())
    head = SalienceHead(meta["dim"], meta["hidden"])
    head.load_state_dict(load_file(str(path / "salience.safetensors")))
    return Summarizer(model, head, meta)


def _with_last(items: Iterable[str]) -> Iterator[tuple[str, bool]]:
    """(item, is_last) pairs; an empty iterable gives one ('', True) so the caller still finishes."""
    it = iter(items)
    prev = next(it, None)
    if prev is None:
        yield "", True
        return
    for item in it:
        yield prev, False
        prev = item
    yield prev, True
