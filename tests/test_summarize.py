"""Incremental summarization: oracle labels, the bounded buffer, streaming invariance, errors, end to end."""

import json
import random
from pathlib import Path

import pytest
import torch
from rouge_score import rouge_scorer

from app.cli import main
from app.errors import UserError
from app.summarize import summarize
from data.segment import Sentence, split_sentences
from models import LinearTransformerLM, ModelConfig
from tasks.summarize import (
    GROUP,
    SalienceHead,
    SentenceFeaturizer,
    Summarizer,
    SummaryBuffer,
    greedy_oracle,
    load_summarizer,
    oracle_labels,
    train_head,
)

SHIPPED = Path(__file__).resolve().parents[1] / "data" / "models" / "summarizer"
WORDS = [
    "model",
    "state",
    "memory",
    "token",
    "stream",
    "linear",
    "attention",
    "summary",
    "sentence",
    "document",
    "chunk",
    "layer",
]


def make_doc(n_sentences: int, seed: int = 0) -> str:
    rng = random.Random(seed)
    paras = []
    for p in range(0, n_sentences, 7):
        sents = [
            " ".join(rng.choices(WORDS, k=rng.randint(4, 14))).capitalize() + "."
            for _ in range(min(7, n_sentences - p))
        ]
        paras.append(" ".join(sents))
    return "\n\n".join(paras)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    torch.manual_seed(0)
    lm = LinearTransformerLM(ModelConfig(vocab_size=260, d_model=16, n_layers=1, n_heads=2, decay="retnet"))
    head = SalienceHead(SentenceFeaturizer(lm).dim, hidden=8)
    path = tmp_path_factory.mktemp("summ") / "model"
    Summarizer(lm, head).save(path, training={"note": "random weights, for tests"})
    return path


def test_oracle_picks_the_reference_sentences_within_budget():
    sents = [
        "The weather was mild and nobody cared.",
        "Linear attention turns a transformer into a recurrent network.",
        "Bananas are yellow.",
        "The state has constant size so memory stays flat.",
        "A very long sentence " + "with many filler words " * 10 + "here.",
    ]
    ref = "Linear attention turns a transformer into a recurrent network. Its state has constant size, so memory stays flat."
    chosen = greedy_oracle(sents, ref, budget=25)
    assert sorted(chosen) == [1, 3]
    assert sum(len(sents[i].split()) for i in chosen) <= 25
    assert oracle_labels(sents, ref, budget=25).tolist() == [0, 1, 0, 1, 0]
    assert greedy_oracle(sents, ref, budget=10) == [1]  # 9 words each: only the better of the two fits
    assert greedy_oracle(sents, ref, budget=8) == []  # nothing that fits overlaps the reference
    # the oracle's choice beats every single sentence under rouge-score itself
    sc = rouge_scorer.RougeScorer(["rouge2"], use_stemmer=True)
    best = sc.score(ref, "\n".join(sents[i] for i in chosen))["rouge2"].recall
    assert all(best >= sc.score(ref, s)["rouge2"].recall for s in sents)
    assert greedy_oracle(sents, "zebra quantum", budget=50) == []


def _sent(i: int, words: int) -> Sentence:
    text = " ".join(["w"] * words)
    return Sentence(text, 100 * i, 100 * i + len(text), i, 0)


def test_buffer_keeps_best_sentences_under_budget_in_document_order():
    buf = SummaryBuffer(budget=10, min_words=1)
    scores = [0.1, 0.9, 0.5, 0.8, 0.95, 0.2]
    sizes = [3, 4, 3, 5, 2, 11]
    for i, (sc, n) in enumerate(zip(scores, sizes, strict=True)):
        buf.offer(_sent(i, n), sc)
        assert buf.n_words <= 10
    kept = [c.sentence.index for c in buf.sentences()]
    assert kept == [1, 2, 4]  # 0.95 (2 w) + 0.9 (4 w) fit; 0.8 (5 w) would overflow; 0.5 (3 w) comes back
    small = SummaryBuffer(budget=10, capacity=2, min_words=1)
    for i, (sc, n) in enumerate(zip(scores, sizes, strict=True)):
        small.offer(_sent(i, n), sc)
    assert [c.sentence.index for c in small.sentences()] == [1, 4]  # the pool holds only the 2 best
    assert not buf.offer(_sent(9, 11), 99.0)  # longer than the whole budget: never chosen
    with pytest.raises(ValueError):
        SummaryBuffer(0)
    default = SummaryBuffer(budget=10)  # min_words=4: a heading or fragment is never chosen
    assert not default.offer(_sent(0, 1), 5.0) and default.offer(_sent(1, 4), 0.0)


def test_summary_is_identical_streamed_or_in_one_call(tiny_dir):
    summ = load_summarizer(tiny_dir)
    doc = make_doc(3 * GROUP + 5)
    one = list(summ.stream([doc], budget=40, every=10))
    rng = random.Random(1)
    for _ in range(3):
        pieces, i = [], 0
        while i < len(doc):
            n = rng.randint(1, 300)
            pieces.append(doc[i : i + n])
            i += n
        streamed = list(summ.stream(pieces, budget=40, every=10))
        assert [(u.sentences_read, [(c.sentence, round(c.score, 5)) for c in u.summary]) for u in streamed] == [
            (u.sentences_read, [(c.sentence, round(c.score, 5)) for c in u.summary]) for u in one
        ]
    final = one[-1]
    assert final.final and final.sentences_read == len(split_sentences(doc))
    assert 0 < sum(c.sentence.n_words for c in final.summary) <= 40


def test_salience_head_learns_oracle_labels():
    torch.manual_seed(0)
    x = [torch.randn(200, 6) for _ in range(3)]
    y = [(f[:, 0] > 1.0).float() for f in x]
    *_, (epoch, head) = train_head(x, y, epochs=8, hidden=8, lr=1e-2)
    with torch.no_grad():
        s = head(torch.cat(x))
    yy = torch.cat(y).bool()
    auc = (s[yy][:, None] > s[~yy][None, :]).float().mean()
    assert epoch == 8 and auc > 0.9


def test_app_end_to_end_jsonl_offsets(tiny_dir, tmp_path, capsys):
    doc = make_doc(80, seed=3)
    p = tmp_path / "doc.txt"
    p.write_text(doc, encoding="utf-8")
    out = tmp_path / "out" / "summary.jsonl"
    assert main(["summarize", str(tiny_dir), str(p), "-o", str(out), "--every", "10", "--budget", "30"]) == 0
    printed = capsys.readouterr().out
    assert printed.count("--- after") == 8
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows and sum(r["words"] for r in rows) <= 30
    assert [r["index"] for r in rows] == sorted(r["index"] for r in rows)
    for r in rows:
        assert " ".join(doc[r["start"] : r["end"]].split()) == r["text"]
    assert not [f for f in out.parent.iterdir() if f.name != "summary.jsonl"]  # no temp file left behind
    again = tmp_path / "out" / "pieces.jsonl"
    summarize(str(tiny_dir), str(p), output=str(again), budget=30, piece_kb=1)  # read in 1 kB pieces
    assert again.read_text() == out.read_text()


def test_invalid_utf8_and_empty_are_one_line_errors(tiny_dir, tmp_path, capsys):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"Fine text. " * 10 + b"\xc3\x28 broken")
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    with pytest.raises(UserError, match="invalid UTF-8 at byte 110"):
        summarize(str(tiny_dir), str(bad), output=str(tmp_path / "o.jsonl"))
    assert not (tmp_path / "o.jsonl").exists()
    assert main(["summarize", str(tiny_dir), str(empty)]) == 2
    err = capsys.readouterr().err.strip()
    assert "empty document" in err and len(err.splitlines()) == 1
    assert main(["summarize", str(tmp_path / "no-model"), str(empty)]) == 2


def test_shipped_summarizer_summarizes_the_shipped_document():
    summ = load_summarizer(SHIPPED)
    doc = (SHIPPED.parents[1] / "documents" / "2022.acl-long.286.txt").read_text(encoding="utf-8")[:20000]
    final = summ.summarize(doc, budget=60)
    assert final.summary and sum(c.sentence.n_words for c in final.summary) <= 60
