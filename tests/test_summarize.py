"""Incremental summarization: oracle labels, the bounded buffer, streaming invariance, errors, end to end."""

import copy
import json
import os
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from rouge_score import rouge_scorer

from strandline.app.cli import main
from strandline.app.summarize import NO_SUMMARY, summarize
from strandline.data.segment import Sentence, split_sentences
from strandline.errors import UserInputError
from strandline.models import LinearTransformerLM, ModelConfig
from strandline.tasks.summarize import (
    GROUP,
    NEAR_DUPLICATE,
    SalienceHead,
    Summarizer,
    SummarizerError,
    SummaryBuffer,
    fit_head,
    greedy_oracle,
    head_objective,
    load_summarizer,
    oracle_labels,
)
from strandline.tasks.summarize.features import BOW_DIM, N_FEATURES, _bow, bow_cosine, words_of
from strandline.tasks.summarize.prose import comment_flags, non_prose

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
    head = SalienceHead(N_FEATURES, hidden=8)
    path = tmp_path_factory.mktemp("summ") / "model"
    meta = {"lead_bonus": 1.0, "redundancy": 0.6, "centrality": 2.0}  # every selection setting in play
    Summarizer(lm, head, meta).save(path, training={"note": "random weights"})
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


def _toy_labels(seed: int = 0) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    x = [torch.randn(200, 6, generator=g) * torch.tensor([1.0, 5.0, 0.1, 1.0, 1.0, 30.0]) for _ in range(3)]
    return x, [(f[:, 0] + 0.3 * torch.randn(len(f), generator=g) > 1.0).float() for f in x]


def test_fit_head_learns_oracle_labels_at_the_objectives_optimum():
    x, y = _toy_labels()
    head = fit_head(x, y, l2=0.01, weights=[1.0, 2.0, 0.5])
    assert head.hidden == 0 and head.net[0].weight.dtype == torch.float32
    with torch.no_grad():
        s = head(torch.cat(x))
    yy = torch.cat(y).bool()
    assert (s[yy][:, None] > s[~yy][None, :]).float().mean() > 0.9  # AUC
    # the optimum: the objective's gradient vanishes there, and every small step away raises it
    xd, yd = torch.cat(x).double(), torch.cat(y).double()
    w = torch.cat([torch.full((200,), v) for v in (1.0, 2.0, 0.5)]).double()
    w = w / w.mean()
    opt = copy.deepcopy(head).double()
    loss = head_objective(opt, xd, yd, w, 0.01)
    grads = torch.autograd.grad(loss, list(opt.net.parameters()))
    assert max(float(g.abs().max()) for g in grads) < 1e-5
    with torch.no_grad():
        for k in range(5):
            moved = copy.deepcopy(opt)
            for p in moved.net.parameters():
                p.add_(1e-2 * torch.randn(p.shape, generator=torch.Generator().manual_seed(k), dtype=p.dtype))
            assert head_objective(moved, xd, yd, w, 0.01) > loss
    with pytest.raises(ValueError, match="l2 must be > 0"):
        fit_head(x, y, l2=0.0)


def test_fit_head_does_not_depend_on_the_seed_or_the_document_order():
    x, y = _toy_labels(1)
    torch.manual_seed(0)
    a = fit_head(x, y, l2=0.1)
    torch.manual_seed(12345)
    b = fit_head(x, y, l2=0.1)
    for k, v in a.state_dict().items():
        assert torch.equal(v, b.state_dict()[k]), k  # nothing random: bit-identical under any seed
    c = fit_head(x[::-1], y[::-1], l2=0.1)  # the same rows in another order: the same optimum
    for k, v in a.state_dict().items():
        torch.testing.assert_close(c.state_dict()[k], v, rtol=1e-5, atol=1e-5)
    d = fit_head(x, y, l2=10.0)  # a stronger penalty shrinks the weights: l2 is the one setting that matters
    assert d.net[0].weight.norm() < 0.5 * a.net[0].weight.norm()


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


def test_the_printed_summary_says_its_words_beside_the_budget(tiny_dir, tmp_path, capsys):
    p = tmp_path / "doc.txt"
    p.write_text(make_doc(40, seed=5), encoding="utf-8")
    assert main(["summarize", str(tiny_dir), str(p), "--budget", "30"]) == 0
    head = capsys.readouterr().out.splitlines()[0]
    words = int(head.split("(")[1].split()[0])
    assert 0 < words <= 30 and head.startswith(f"=== summary ({words} words of at most 30, ")  # may stop under it
    assert main(["summarize", str(tiny_dir), str(p), "--sentences", "2"]) == 0  # no word limit to name
    assert "at most" not in capsys.readouterr().out
    out = tmp_path / "s.jsonl"
    assert main(["summarize", str(tiny_dir), str(p), "--budget", "30", "-o", str(out)]) == 0
    assert f"({words} words of at most 30, " in capsys.readouterr().err


def test_invalid_utf8_and_empty_are_one_line_errors(tiny_dir, tmp_path, capsys):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"Fine text. " * 10 + b"\xc3\x28 broken")
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    with pytest.raises(UserInputError, match="invalid UTF-8 at byte 110"):
        summarize(str(tiny_dir), str(bad), output=str(tmp_path / "o.jsonl"))
    assert not (tmp_path / "o.jsonl").exists()
    assert main(["summarize", str(tiny_dir), str(empty)]) == 2
    err = capsys.readouterr().err.strip()
    assert "empty document" in err and len(err.splitlines()) == 1
    assert main(["summarize", str(tmp_path / "no-model"), str(empty)]) == 2


def test_shipped_summarizer_chooses_only_prose_on_the_shipped_documents():
    summ = load_summarizer(SHIPPED)  # a tracked file: missing is a failure, not a skip
    docs = SHIPPED.parents[1] / "documents"
    for name in ("2022.acl-long.286.txt", "python-howto-sockets.rst.txt"):
        final = summ.summarize((docs / name).read_text(encoding="utf-8")[:30000], budget=60)
        assert final.summary and sum(c.sentence.n_words for c in final.summary) <= 60
        assert all(non_prose(c.sentence.text) is None for c in final.summary)


def test_shipped_summarizer_streams_identically_on_a_rst_page_with_a_comment():
    """The shipped model, a real reST page with a maintainers' comment put in front: any piece sizes give the same
    running and final summaries (scores included), and no sentence of the comment is chosen."""
    summ = load_summarizer(SHIPPED)
    page = (SHIPPED.parents[1] / "documents" / "python-howto-sockets.rst.txt").read_text(encoding="utf-8")[:6000]
    comment = (
        ".. Rules for maintenance:\n\n   * Sockets are used nearly everywhere in this document and its sockets.\n\n"
    )
    doc = comment + page
    one = list(summ.stream([doc], budget=60, every=20))
    rng = random.Random(3)
    pieces, i = [], 0
    while i < len(doc):
        pieces.append(doc[i : i + rng.randint(1, 2000)])
        i += len(pieces[-1])
    streamed = list(summ.stream(pieces, budget=60, every=20))
    assert len(one) > 2 and [[(c.sentence, c.score) for c in u.summary] for u in streamed] == [
        [(c.sentence, c.score) for c in u.summary] for u in one
    ]
    assert one[-1].summary and all(c.sentence.start >= len(comment) for c in one[-1].summary)


def test_buffer_skips_a_sentence_that_repeats_a_chosen_one():
    a = Sentence("Linear attention keeps a constant state.", 0, 40, 0, 0)
    b = Sentence("Linear attention keeps a constant state for every genome it reads.", 41, 107, 1, 0)
    c = Sentence("Genomes are scanned base by base.", 108, 141, 2, 0)
    bows = {s.index: _bow(words_of(s.text)) for s in (a, b, c)}
    assert 0.5 < bow_cosine(bows[0], bows[1]) < NEAR_DUPLICATE  # similar, not a repeat
    for redundancy, kept in ((1.0, [0, 1, 2]), (0.5, [0, 2])):
        buf = SummaryBuffer(budget=30, redundancy=redundancy)
        for s, score in ((a, 3.0), (b, 2.0), (c, 1.0)):
            buf.offer(s, score, bows[s.index])
        assert [x.sentence.index for x in buf.sentences()] == kept


def test_a_standalone_summary_never_chooses_a_sentence_that_points_back(tmp_path, capsys):
    from strandline.tasks.summarize import points_back, points_elsewhere

    texts = [
        "The command copies files to the build tree.",
        "Otherwise, the dependency is resolved to that file.",  # dangles without the sentence before it
        "For example, a path is made absolute first.",
        "In this case the old file is kept as it was.",
        "Andromeda is a galaxy that the tool was named after.",  # "And" only as a word of its own
        "(However, the tool reads compressed files too.)",
    ]
    assert [points_back(t) for t in texts] == [False, True, True, True, False, True]
    assert points_back("- However, the tool reads compressed files too.")  # a list item's words
    pointers = [
        "See CONTRIBUTING.md for details on how to send a change.",
        "See also the PROJ migration notes.",
        "Please refer to the platform support page for the list of targets.",
        "For more details about the effect size measures and their uses, see the ANOVA vignette.",
        "The scanner is fast on long genomes; see the benchmarks for its numbers.",  # says something, then points
        "Seeds are drawn from the genome in a single pass over its records.",  # "See" only as part of a word
        "For more than ten genomes, the scanner reads them in parallel.",  # "For more" that is no pointer
    ]
    assert [points_elsewhere(t) for t in pointers] == [True, True, True, True, False, False, False]
    texts += [pointers[0], "- Run the code you want to test."]  # a step of a list, read without the list
    for standalone, kept in ((False, [0, 1, 2, 3, 4, 5, 6, 7]), (True, [0, 4])):
        buf = SummaryBuffer(budget=100, standalone=standalone)
        for i, t in enumerate(texts):
            buf.offer(Sentence(t, 100 * i, 100 * i + len(t), i, i), 10.0 - i, _bow(words_of(t)))
        assert [x.sentence.index for x in buf.sentences()] == kept
    doc = tmp_path / "notes.txt"
    doc.write_text("\n\n".join(f"However, the scanner {i} reads genomes in constant memory." for i in range(8)))
    assert main(["summarize", "summarizer", str(doc), "--sentences", "2"]) == 0
    capsys.readouterr()
    assert main(["summarize", "summarizer", str(doc), "--sentences", "2", "--standalone"]) == NO_SUMMARY


def test_a_standalone_summary_leaves_out_every_sentence_of_a_list_item():
    summ = load_summarizer(SHIPPED)
    doc = (
        "The scanner reads whole genomes in constant memory and writes one track value per base.\n\n"
        "The work is done in two steps that never hold the genome in memory:\n\n"
        "- The reader decodes each record of the input file in order. It checks every base against the alphabet "
        "of the model.\n\n"
        "- The model scores each base as it arrives from the reader. Its recurrent state keeps the same size at any "
        "genome length.\n\n"
        "The tracks are written to a temporary file and renamed once they are complete on disk.\n"
    )
    chosen = {}
    for standalone in (False, True):
        *_, final = summ.stream([doc], sentences=20, standalone=standalone)
        chosen[standalone] = [c.sentence.clean for c in final.summary]
    later = [t for t in chosen[False] if t.startswith(("It checks", "Its recurrent"))]
    assert len(later) == 2  # an item's second sentence carries no marker of its own
    assert not [t for t in chosen[True] if t.startswith("- ") or t in later]
    assert (
        [t for t in chosen[True] if t.startswith(("The scanner", "The tracks"))]
        == [t for t in chosen[False] if t.startswith(("The scanner", "The tracks"))]
        != []
    )


def test_summary_has_no_non_prose_and_streams_identically(tiny_dir):
    prose = make_doc(40, seed=5)
    junk = "\n\n".join(
        [
            "Installation\n============",
            ">>> import os; os.getcwd() returns the path.",
            r"\ifdim \dp4>\dp8 \dp8=\dp4\else \dp4=\dp8\fi",
            "| a | b | c | d | e | are the columns.",
            "[3] A. Smith. In Proceedings of ACL, pp. 1-9.",
            "Hi.",
            ".. Rules for maintenance:\n\n   * Model state memory token stream linear attention summary sentence.",
            "   Document chunk layer model state memory token stream linear attention.",  # still the comment
        ]
    )
    doc = junk + "\n\n" + prose + "\n\n" + junk
    summ = load_summarizer(tiny_dir)
    final = summ.summarize(doc, budget=60)
    assert final.summary and all(non_prose(c.sentence.text) is None for c in final.summary)
    sents = split_sentences(doc)
    in_comment = {s for s, f in zip(sents, comment_flags(doc, sents), strict=True) if f}
    assert len(in_comment) == 2 * 4 and not in_comment & {c.sentence for c in final.summary}
    pieces = [doc[i : i + 13] for i in range(0, len(doc), 13)]
    assert [c.sentence for c in list(summ.stream(pieces, budget=60))[-1].summary] == [c.sentence for c in final.summary]


def test_output_that_is_the_input_or_a_directory_is_refused(tiny_dir, tmp_path, capsys):
    doc = tmp_path / "doc.txt"
    text = make_doc(30, seed=2)
    doc.write_text(text, encoding="utf-8")
    link = tmp_path / "same.txt"
    link.symlink_to(doc)
    for out in (doc, link):
        assert main(["summarize", str(tiny_dir), str(doc), "-o", str(out)]) == 2
        err = capsys.readouterr().err.strip()
        assert "also an input" in err and len(err.splitlines()) == 1
    assert doc.read_text(encoding="utf-8") == text  # the document is untouched
    folder = tmp_path / "outdir"
    folder.mkdir()
    assert main(["summarize", str(tiny_dir), str(doc), "-o", str(folder)]) == 2
    err = capsys.readouterr().err.strip()
    assert "is a directory" in err and len(err.splitlines()) == 1 and not list(folder.iterdir())
    with pytest.raises(UserInputError, match="--budget"):
        summarize(str(tiny_dir), str(doc), budget=0)


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("Hi.", id="hi"),
        pytest.param("word " * 40_000, id="one-long-line-no-punctuation"),
        pytest.param("字" * 30_000, id="no-spaces-no-stops"),
        pytest.param("Introduction\n\n| a | b |\n\nx = 1", id="heading-table-code"),
    ],
)
def test_a_document_with_no_summary_says_so_and_writes_nothing(tiny_dir, tmp_path, capsys, text):
    doc = tmp_path / "doc.txt"
    doc.write_text(text, encoding="utf-8")
    out = tmp_path / "summary.jsonl"
    assert main(["summarize", str(tiny_dir), str(doc), "-o", str(out)]) == NO_SUMMARY == 1
    captured = capsys.readouterr()
    assert captured.err.startswith("strandline summarize: no summary: ") and len(captured.err.splitlines()) == 1
    assert not out.exists() and not captured.out.strip()


def test_chinese_text_without_spaces_gets_a_summary(tiny_dir):
    doc = (
        "线性注意力把变换器变成循环网络。" * 3
        + "它的状态大小固定，所以内存不随文档增长。"
        + "我们在三个领域上测试了这个方法。"
    )
    final = load_summarizer(tiny_dir).summarize(doc, budget=30)
    assert final.summary and sum(c.sentence.n_words for c in final.summary) <= 30


def _copy_model(src, dst):
    dst.mkdir()
    for f in src.iterdir():
        (dst / f.name).write_bytes(f.read_bytes())
    return dst


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("salience.json", b"{not json", "not a valid salience.json"),
        ("salience.json", b"[1, 2]", "not a valid salience.json"),
        ("salience.json", b'{"dim": 294, "hidden": 32}', "features this version does not compute: None"),
        ("salience.json", b'{"dim": 2, "hidden": 0, "features": ["surprisal", "topic"]}', "does not compute: topic;"),
        ("salience.safetensors", b"\x00garbage" * 10, "not a readable safetensors"),
        ("salience.safetensors", None, "no salience head"),
    ],
)
def test_corrupt_or_mismatched_head_files_are_one_line_errors(tiny_dir, tmp_path, capsys, name, content, message):
    bad = _copy_model(tiny_dir, tmp_path / "bad")
    if content is None:
        (bad / name).unlink()
    else:
        (bad / name).write_bytes(content)
    with pytest.raises(SummarizerError, match=message):
        load_summarizer(bad)
    doc = tmp_path / "doc.txt"
    doc.write_text(make_doc(10), encoding="utf-8")
    assert main(["summarize", str(bad), str(doc)]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_head_weights_of_another_shape_are_one_line_errors(tiny_dir, tmp_path):
    import json as _json

    from safetensors.torch import save_file

    bad = _copy_model(tiny_dir, tmp_path / "bad")
    save_file({"mu": torch.zeros(3), "sigma": torch.ones(3)}, str(bad / "salience.safetensors"))
    with pytest.raises(SummarizerError, match="does not match"):
        load_summarizer(bad)
    meta = _json.loads((tiny_dir / "salience.json").read_text())
    del meta["hidden"]
    (bad / "salience.json").write_text(_json.dumps(meta))
    with pytest.raises(SummarizerError, match="missing key 'hidden'"):
        load_summarizer(bad)


def test_a_head_saved_before_a_feature_was_added_reads_the_features_it_names(tiny_dir, tmp_path):
    import json as _json

    from safetensors.torch import load_file, save_file

    from strandline.tasks.summarize.features import FEATURES

    old = _copy_model(tiny_dir, tmp_path / "old")
    meta = _json.loads((old / "salience.json").read_text())
    keep = [i for i, name in enumerate(FEATURES) if name != "list_item"]  # as saved before that feature existed
    weights = load_file(str(old / "salience.safetensors"))
    first = next(k for k, v in weights.items() if k.endswith("weight") and v.shape[-1] == len(FEATURES))
    weights = {k: v[..., keep].contiguous() if k in ("mu", "sigma", first) else v for k, v in weights.items()}
    save_file(weights, str(old / "salience.safetensors"))
    meta |= {"features": [FEATURES[i] for i in keep], "dim": len(keep)}
    (old / "salience.json").write_text(_json.dumps(meta))
    new, older = load_summarizer(tiny_dir), load_summarizer(old)
    feats = torch.randn(5, len(FEATURES))
    feats[:, FEATURES.index("in_lead")] = 0.0  # no lead bonus
    with torch.no_grad():
        assert older.scores(feats) == pytest.approx(older.head(feats[:, keep]).tolist(), abs=1e-6)
        assert older.scores(feats) != pytest.approx(new.scores(feats), abs=1e-3) or not new.head(feats).std()
    assert older.summarize(make_doc(12), budget=40).summary  # summarizes with this version's features


def test_binary_input_is_a_one_line_error(tiny_dir, tmp_path, capsys):
    doc = tmp_path / "doc.bin"
    doc.write_bytes(b"Some text.\x00\x01\x02 more")
    assert main(["summarize", str(tiny_dir), str(doc)]) == 2
    err = capsys.readouterr().err.strip()
    assert "binary" in err and len(err.splitlines()) == 1


def test_jsonl_on_stdout_stays_clean_with_running_updates(tiny_dir, tmp_path, capsys):
    doc = tmp_path / "doc.txt"
    doc.write_text(make_doc(40, seed=4), encoding="utf-8")
    assert main(["summarize", str(tiny_dir), str(doc), "-o", "-", "--every", "10"]) == 0
    captured = capsys.readouterr()
    rows = [json.loads(line) for line in captured.out.splitlines()]  # every stdout line is JSON
    assert rows and captured.err.count("--- after") == 4
    assert main(["summarize", str(tiny_dir), str(tmp_path / "missing.txt")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_a_repeated_sentence_is_chosen_once():
    """Release notes repeat boilerplate: the same words (any case, punctuation or spacing) are said once, and a
    near-repeat (word cosine above NEAR_DUPLICATE) too, even with the redundancy cut off (1.0)."""
    from strandline.tasks.summarize import NEAR_DUPLICATE, normalized_text
    from strandline.tasks.summarize.features import bow_cosine

    texts = ["Refer to the platform support page for the list of targets.",
             "The new allocator halves peak memory on large inputs.",
             "refer to the  Platform Support page, for the list of targets",
             "Refer to the platform support page for the list of targets!"]  # fmt: skip
    buf = SummaryBuffer(budget=100, min_words=1, redundancy=1.0)
    for i, t in enumerate(texts):
        buf.offer(Sentence(t, 100 * i, 100 * i + len(t), i, 0), 1.0 - 0.1 * (i == 1), {hash(w) % 97: 1.0 for w in
                  normalized_text(t).split()})  # fmt: skip
    kept = [c.sentence.index for c in buf.sentences()]
    assert kept == [0, 1]
    near = {1: 1.0, 2: 1.0, 3: 1.0, 4: 1.0, 5: 1.0, 6: 1.0, 7: 1.0, 8: 1.0, 9: 1.0, 10: 1.0}
    near_b = {**near, 11: 1.0}  # one word more: cosine 0.95
    assert bow_cosine(near, near_b) > NEAR_DUPLICATE
    buf = SummaryBuffer(budget=100, min_words=1)
    buf.offer(Sentence("a b c d", 0, 7, 0, 0), 1.0, near)
    buf.offer(Sentence("a b c d e", 10, 19, 1, 0), 0.9, near_b)
    assert [c.sentence.index for c in buf.sentences()] == [0]


def test_sentences_of_one_template_are_said_once():
    """Release notes write one template again and again: the same words but for names and numbers are a repeat."""
    from strandline.tasks.summarize import template_text

    texts = ["Support for CPython 3.9.5 has been added.",
             "Support for Miniforge3 4.10.1-1 has been added.",
             "The build now caches downloaded archives between runs.",
             "Support for GraalPython 21.1.0 has been added.",
             "Python is fast.", "Rust is fast.",  # too short to call them one: both kept
             "Alice wrote the new parser.", "Bob wrote the new parser."]  # fmt: skip
    assert template_text(texts[0]) == template_text(texts[1]) == template_text(texts[3]) is not None
    assert template_text(texts[4]) is None and template_text(texts[6]) != template_text(texts[7])
    buf = SummaryBuffer(budget=100, min_words=1, redundancy=1.0)
    for i, t in enumerate(texts):
        buf.offer(Sentence(t, 100 * i, 100 * i + len(t), i, 0), 1.0 - 0.01 * i)
    assert [c.sentence.index for c in buf.sentences()] == [0, 2, 4, 5, 6, 7]


def test_length_by_ratio_of_the_words_read_or_by_sentences():
    def fill(buf):
        for i in range(10):
            text = f"{'abcdefghij'[i] * 3} two three four five"  # distinct sentences of 5 words (a repeat is said once)
            buf.offer(Sentence(text, 100 * i, 100 * i + len(text), i, 0), 1.0 - i / 100)
            buf.words_read += 5
        return [c.sentence.index for c in buf.sentences()]

    assert fill(SummaryBuffer(budget=1, min_words=1, max_sentences=3)) == [0, 1, 2]  # any length, 3 sentences
    ratio = SummaryBuffer(budget=1, min_words=1, ratio=0.2)  # 20% of 50 words read: 10 words, two sentences
    assert fill(ratio) == [0, 1] and ratio.word_limit() == 10
    ratio.words_read += 50  # the running summary grows with the document
    assert [c.sentence.index for c in ratio.sentences()] == [0, 1, 2, 3]


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--budget", "40", "--ratio", "0.1"], "--budget and --ratio both set the summary's length"),
        (["--ratio", "0.1", "--sentences", "3"], "--ratio and --sentences both set"),
        (["--ratio", "0"], "0 < R <= 1"),
        (["--sentences", "65"], "from 1 to 64"),
    ],
)
def test_contradicting_or_bad_length_options_are_one_line(argv, words, capsys):
    from strandline.app.cli import main

    doc = str(Path(__file__).resolve().parents[1] / "data" / "documents" / "2022.acl-long.286.txt")
    assert main(["summarize", "summarizer", doc, *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and words in err


def test_a_live_stdin_stream_gets_running_summaries_before_it_ends(tiny_dir):
    """``summarize MODEL - --every N`` follows a pipe that is still being written: a running summary of what
    has arrived is printed (and flushed) while the writer keeps the pipe open, not only at its end."""
    import os
    import select
    import subprocess
    import sys
    import time

    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [
        sys.executable,
        "-m",
        "strandline.app.cli",
        "summarize",
        str(tiny_dir),
        "-",
        "--every",
        "3",
        "--budget",
        "30",
    ]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        proc.stdin.write((make_doc(12) + "\n\nAnd one more sentence begins here.").encode())
        proc.stdin.flush()  # the pipe stays open: 12 sentences (and the start of a 13th) have arrived
        seen, deadline = b"", time.monotonic() + 120
        while b"--- after 12 sentences" not in seen and time.monotonic() < deadline:
            ready, _, _ = select.select([proc.stdout], [], [], 1.0)
            if ready:
                seen += os.read(proc.stdout.fileno(), 65536)
            assert proc.poll() is None, proc.stderr.read().decode()
        assert b"--- after 3 sentences" in seen and b"--- after 12 sentences" in seen, seen.decode()
        proc.stdin.write(b" It ends now.\n")
        proc.stdin.close()
        rest = proc.stdout.read()
        assert proc.wait(timeout=120) == 0 and b"of 14 sentences" in rest  # the final summary, at the end
        assert b"--- after 13 sentences" not in seen  # the 13th was summarized only once it was complete
    finally:
        proc.kill()


def test_mmr_takes_a_sentence_that_adds_something_over_one_that_repeats():
    """Maximal marginal relevance: with ``mmr`` the second pick pays for its overlap with the first."""
    a = Sentence("Linear attention keeps a constant state.", 0, 40, 0, 0)
    b = Sentence("Linear attention keeps a constant state for every genome it reads.", 41, 107, 1, 0)
    c = Sentence("Genomes are scanned base by base.", 108, 141, 2, 0)
    bows = {s.index: _bow(words_of(s.text)) for s in (a, b, c)}
    overlap = bow_cosine(bows[0], bows[1])
    assert bow_cosine(bows[0], bows[2]) == 0.0 and overlap > 0.5
    for mmr, kept in ((0.0, [0, 1]), (0.5, [0, 1]), (2.0, [0, 2])):  # b wins while 2.0 - mmr * overlap > 1.5
        buf = SummaryBuffer(budget=18, mmr=mmr)  # room for two of the three sentences (6 + 11 or 6 + 6 words)
        for s, score in ((a, 3.0), (b, 2.0), (c, 1.5)):
            buf.offer(s, score, bows[s.index])
        assert [x.sentence.index for x in buf.sentences()] == kept, mmr
    assert (2.0 - 0.5 * overlap > 1.5) and (2.0 - 2.0 * overlap < 1.5)  # the arithmetic behind the cases


def test_centrality_weight_grows_with_the_summary_length():
    """With ``centrality_words`` the centrality weight is proportional to the summary's length, so the same
    document's long summary follows its central words and its one-line summary the head's scores."""
    assert SummaryBuffer(budget=25, centrality=8.0).centrality_weight() == 8.0  # constant without centrality_words
    assert SummaryBuffer(budget=25, centrality=8.0, centrality_words=100).centrality_weight() == 2.0
    assert SummaryBuffer(budget=150, centrality=8.0, centrality_words=100).centrality_weight() == 12.0
    by_ratio = SummaryBuffer(budget=1, centrality=8.0, centrality_words=100, ratio=0.1, min_words=1)
    by_ratio.words_read = 500  # a 10% summary of 500 words read: 50 words
    assert by_ratio.centrality_weight() == 4.0
    by_count = SummaryBuffer(budget=1, centrality=8.0, centrality_words=100, max_sentences=2, min_words=1)
    assert by_count.centrality_weight() == 0.0  # nothing pooled yet
    for i, n in enumerate((10, 30)):
        by_count.offer(_sent(i, n), 1.0)
    assert by_count.centrality_weight() == 8.0 * 2 * 20 / 100  # two sentences of the pool's mean length (20)

    # the scaled weight ranks: a 12-word summary (room for one sentence) takes the salient sentence when the
    # weight is set for 100-word summaries (0.48 here) and the central one when it is set for 10-word ones (4.8)
    central = Sentence("Genomes are scanned base by base with a constant state.", 0, 55, 0, 0)
    salient = Sentence("Strandline is a tool for causal linear transformers.", 56, 108, 1, 0)
    other = Sentence("Genomes are scanned base by base and the state stays constant.", 109, 172, 2, 0)
    bows = {s.index: _bow(words_of(s.text)) for s in (central, salient, other)}
    context = np.zeros(BOW_DIM)
    for b in bows.values():
        for k, v in b.items():
            context[k] += v
    picks = {}
    for words in (100, 10):
        buf = SummaryBuffer(budget=12, centrality=4.0, centrality_words=words)
        for s, score in ((central, 1.0), (salient, 2.0), (other, 0.0)):
            buf.offer(s, score, bows[s.index], context)
        picks[words] = [x.sentence.index for x in buf.sentences()]
    assert picks == {100: [1], 10: [0]}


def test_summarizer_reads_centrality_words_from_its_settings():
    lm = LinearTransformerLM(ModelConfig(vocab_size=260, d_model=16, n_layers=1, n_heads=2))
    head = SalienceHead(N_FEATURES, hidden=0)
    assert Summarizer(lm, head, {"centrality": 4.0}).buffer(50).centrality_weight() == 4.0  # an older summarizer
    assert Summarizer(lm, head, {"centrality": 4.0, "centrality_words": 100}).buffer(50).centrality_weight() == 2.0


def test_candidate_centrality_is_agreement_among_the_pooled_sentences():
    """``centrality_kind="candidates"``: a pooled sentence's centrality is its mean word cosine with the other
    candidates, relative to the most central one (LexRank's degree over the pool), and it ranks the summary."""
    texts = [
        "Strandline is a tool for causal linear transformers.",  # salient, shares nothing with the others
        "Genomes are scanned base by base with a constant state.",
        "Genomes are scanned base by base and the state stays constant.",
        "A constant state scans genomes of any length.",
    ]
    sents, start = [], 0
    for i, t in enumerate(texts):
        sents.append(Sentence(t, start, start + len(t), i, i))
        start += len(t) + 1
    bows = [_bow(words_of(t)) for t in texts]
    buf = SummaryBuffer(budget=12, centrality=4.0, centrality_kind="candidates")
    assert buf.centralities() == []  # nothing pooled
    buf.offer(sents[0], 2.0, bows[0])
    assert buf.centralities() == [0.0]  # one candidate: nothing to agree with
    for s, score in zip(sents[1:], (1.0, 0.0, 0.5), strict=True):
        buf.offer(s, score, bows[s.index])
    cent = dict(zip([c.sentence.index for c in buf._pool], buf.centralities(), strict=True))
    expected = [np.mean([bow_cosine(bows[i], bows[j]) for j in range(4) if j != i]) for i in range(4)]
    assert cent[0] == 0.0 and max(cent.values()) == pytest.approx(1.0)
    for i in range(4):
        assert cent[i] == pytest.approx(expected[i] / max(expected), abs=1e-12)
    # room for one sentence: the candidates' favourite (score 1 + 4 x 1) over the highest score (2 + 0)
    assert [x.sentence.index for x in buf.sentences()] == [1]
    plain = SummaryBuffer(budget=12, centrality=0.0, centrality_kind="candidates")
    for s, score in zip(sents, (2.0, 1.0, 0.0, 0.5), strict=True):
        plain.offer(s, score, bows[s.index])
    assert [x.sentence.index for x in plain.sentences()] == [0]  # weight 0: the scores alone
    document = SummaryBuffer(budget=12, centrality=4.0)  # the default kind: the document's words (no context yet)
    assert document.centrality_kind == "document" and document.centralities() == []
    with pytest.raises(ValueError, match="centrality_kind must be one of candidates, document"):
        SummaryBuffer(budget=12, centrality_kind="graph")


def test_summarizer_reads_centrality_kind_from_its_settings():
    lm = LinearTransformerLM(ModelConfig(vocab_size=260, d_model=16, n_layers=1, n_heads=2))
    head = SalienceHead(N_FEATURES, hidden=0)
    assert Summarizer(lm, head, {}).buffer(50).centrality_kind == "document"  # saved before candidates existed
    assert Summarizer(lm, head, {"centrality_kind": "candidates"}).buffer(50).centrality_kind == "candidates"
    with pytest.raises(SummarizerError, match="centrality_kind must be one of"):
        Summarizer(lm, head, {"centrality_kind": "graph"})


def test_a_stop_fill_ends_the_summary_where_the_next_ranked_sentence_does_not_fit():
    """``fill="skip"`` spends the words left on a lower-ranked sentence that fits; ``"stop"`` ends the summary at
    the first sentence in rank order that does not fit, so it is the best sentences and never a filler. A sentence
    longer than the whole budget is no candidate under either rule."""
    ranked = [(0, 10, 4.0), (1, 25, 3.0), (2, 12, 2.0), (3, 6, 1.0)]  # (index, words, score)
    picks = {}
    for fill in ("skip", "stop"):
        buf = SummaryBuffer(budget=30, min_words=1, fill=fill)
        for i, n, score in ranked:
            buf.offer(_sent(i, n), score)
        picks[fill] = [x.sentence.index for x in buf.sentences()]
    assert picks == {"skip": [0, 2, 3], "stop": [0]}  # 25 words (rank 2) do not fit the 20 left
    by_ratio = SummaryBuffer(budget=1, min_words=1, ratio=0.3, fill="stop")  # 30% of the words read so far
    for i, n, score in [(0, 40, 9.0), *ranked]:
        by_ratio.offer(_sent(i + 10 * (i == 0 and n == 40), n), score)
    by_ratio.words_read = 100  # 30 words: the 40-word sentence pooled earlier is no candidate, not a stop
    assert [x.sentence.index for x in by_ratio.sentences()] == [0]
    repeat = SummaryBuffer(budget=25, min_words=1, fill="stop")  # a repeat that does not fit ends nothing
    for i, n, score in [(0, 10, 4.0), (1, 9, 3.5), (3, 5, 2.0)]:
        repeat.offer(_sent(i, n), score)
    repeat.offer(Sentence(_sent(0, 10).text.upper(), 200, 219, 2, 0), 3.0)  # sentence 0 again, ranked third
    assert [x.sentence.index for x in repeat.sentences()] == [0, 1, 3]  # 10 + 9 + 5: the repeat is passed over
    fits = SummaryBuffer(budget=30, min_words=1, fill="stop")
    for i, n, score in [(0, 10, 4.0), (1, 12, 3.0), (2, 9, 2.0), (3, 6, 1.0)]:
        fits.offer(_sent(i, n), score)
    assert [x.sentence.index for x in fits.sentences()] == [0, 1]  # 10 + 12; the 9 words of rank 3 would overflow
    lm = LinearTransformerLM(ModelConfig(vocab_size=260, d_model=16, n_layers=1, n_heads=2))
    head = SalienceHead(N_FEATURES, hidden=0)
    assert Summarizer(lm, head, {}).buffer(50).fill == "skip"  # a summarizer saved before the rule was a setting
    assert Summarizer(lm, head, {"fill": "stop"}).buffer(50).fill == "stop"
    with pytest.raises(SummarizerError, match="fill must be one of skip, stop"):
        Summarizer(lm, head, {"fill": "truncate"})
    with pytest.raises(ValueError, match="fill must be one of skip, stop"):
        SummaryBuffer(budget=12, fill="truncate")


def test_a_stop_fill_with_mmr_ends_where_the_best_marginal_sentence_does_not_fit():
    a = Sentence("Linear attention keeps a constant state.", 0, 40, 0, 0)
    b = Sentence("Linear attention keeps a constant state for every genome it reads.", 41, 107, 1, 0)
    c = Sentence("Genomes are scanned base by base.", 108, 141, 2, 0)
    bows = {s.index: _bow(words_of(s.text)) for s in (a, b, c)}
    for fill, kept in (("skip", [0, 2]), ("stop", [0])):  # b is second by rank and MMR (mmr 0.1) but 11 > 8 words
        buf = SummaryBuffer(budget=14, mmr=0.1, fill=fill)
        for s, score in ((a, 3.0), (b, 2.0), (c, 1.5)):
            buf.offer(s, score, bows[s.index])
        assert [x.sentence.index for x in buf.sentences()] == kept, fill


def test_a_floor_keeps_sentences_the_head_rates_unlikely_out_after_the_first():
    """With ``floor``, the first sentence comes in whatever its rank; after it, only sentences ranked at least the
    floor (under either fill, with MMR too); ``max_sentences`` asks for that many, so the floor is off there."""
    ranked = [(0, 8, 1.0), (1, 6, 0.5), (2, 5, -0.2), (3, 4, -1.0)]  # (index, words, score)

    def picks(**kw):
        buf = SummaryBuffer(budget=30, min_words=1, **kw)
        for i, n, score in ranked:
            buf.offer(_sent(i, n), score, _bow([f"w{i}", "shared"]))
        return [x.sentence.index for x in buf.sentences()]

    assert picks() == [0, 1, 2, 3]
    for fill in ("skip", "stop"):
        assert picks(fill=fill, floor=0.0) == [0, 1] and picks(fill=fill, floor=-0.5) == [0, 1, 2]
        assert picks(fill=fill, floor=5.0) == [0]  # the first always comes in: a summary is never empty
    assert picks(floor=0.0, mmr=0.3) == [0, 1]
    assert picks(floor=5.0, max_sentences=3) == [0, 1, 2]
    lm = LinearTransformerLM(ModelConfig(vocab_size=260, d_model=16, n_layers=1, n_heads=2))
    head = SalienceHead(N_FEATURES, hidden=0)
    assert Summarizer(lm, head, {}).buffer(50).floor is None  # a summarizer saved before the floor: off
    assert Summarizer(lm, head, {"floor": 2.5}).buffer(50).floor == 2.5
    for bad in ("high", True, float("nan"), [1.0]):
        with pytest.raises(SummarizerError, match="floor must be a number or null"):
            Summarizer(lm, head, {"floor": bad})


def test_a_floor_slack_lets_the_floor_act_only_on_the_last_words_of_the_limit():
    """With ``floor_slack``, sentences come in by rank as without a floor until the summary holds the word limit
    less the slack; only then does the floor keep the ones the head rates unlikely out. A slack at least the limit
    is the plain floor (after the first sentence); none (None) is the plain floor too."""
    ranked = [(0, 8, 1.0), (1, 6, 0.5), (2, 5, -0.2), (3, 4, -1.0)]  # (index, words, score): 8, 14, 19, 23 words

    def picks(**kw):
        buf = SummaryBuffer(budget=30, min_words=1, **kw)
        for i, n, score in ranked:
            buf.offer(_sent(i, n), score, _bow([f"w{i}", "shared"]))
        return [x.sentence.index for x in buf.sentences()]

    for fill in ("skip", "stop"):
        assert picks(fill=fill, floor=5.0, floor_slack=None) == [0]
        assert picks(fill=fill, floor=5.0, floor_slack=30) == [0]  # the floor from the first sentence on
        assert picks(fill=fill, floor=5.0, floor_slack=20) == [0, 1]  # acts at 10 words held: after 8 + 6
        assert picks(fill=fill, floor=5.0, floor_slack=12) == [0, 1, 2]  # acts at 18 words: after 8 + 6 + 5
        assert picks(fill=fill, floor=0.0, floor_slack=12) == [0, 1, 2]  # rank -0.2 came in before the floor acted
        assert picks(fill=fill, floor=5.0, floor_slack=0) == [0, 1, 2, 3]  # never reached: 23 < 30 words
    assert picks(floor=5.0, floor_slack=20, mmr=0.3) == [0, 1]
    assert picks(floor=5.0, floor_slack=30, max_sentences=3) == [0, 1, 2]  # the floor is off with --sentences
    lm = LinearTransformerLM(ModelConfig(vocab_size=260, d_model=16, n_layers=1, n_heads=2))
    head = SalienceHead(N_FEATURES, hidden=0)
    assert Summarizer(lm, head, {"floor": 2.5}).buffer(50).floor_slack is None  # saved before the slack
    assert Summarizer(lm, head, {"floor": 2.5, "floor_slack": 25}).buffer(50).floor_slack == 25
    for bad in ("some", -1, float("inf"), False):
        with pytest.raises(SummarizerError, match="floor_slack must be a number of words >= 0 or null"):
            Summarizer(lm, head, {"floor_slack": bad})


def test_structure_features_follow_the_headings():
    from strandline.tasks.summarize.features import FEATURES, FeatureState, heading_text

    assert heading_text("2.1 Getting started") == "Getting started"
    assert heading_text("Overview\n========") == "Overview" and heading_text("## Install ##") == "Install"
    assert heading_text("This is a sentence.") is None and heading_text("x = y + 1") is None
    doc = (
        "Frob manual\n\nIntroduction\n\nThe frob tool scans a log file once. It keeps a small state.\n\n"
        "Memory limits\n\nMemory stays flat for any log size. The state never grows."
    )
    sents = split_sentences(doc)
    state = FeatureState(4)
    rows = list(state.read(sents, torch.zeros(len(sents), 4), torch.ones(len(sents))))
    col = {name: [float(f[FEATURES.index(name)]) for _, f, _ in rows] for name in FEATURES}
    assert [sents[j].text for j, _, _ in rows][0].startswith("The frob tool")
    assert col["intro_section"] == [1.0, 1.0, 0.0, 0.0]  # under "Introduction", then under "Memory limits"
    assert col["first_in_section"] == [1.0, 0.0, 1.0, 0.0]
    assert col["log_section"][0] < col["log_section"][2]  # title + Introduction, then a third heading
    assert col["cos_words_heading"][2] > 0 and col["cos_words_heading"][0] == 0.0  # "Memory" in its heading
    assert col["cos_words_headings"][0] > 0  # "frob" is in the title, a heading read before it
    assert col["definition"] == [0.0, 0.0, 0.0, 0.0]
    row = next(state.read(split_sentences("Frob is a tool that scans logs."), torch.zeros(1, 4), torch.ones(1)))
    assert float(row[1][FEATURES.index("definition")]) == 1.0  # says what something is, in its first words


def test_list_items_are_a_feature_and_never_headings():
    from strandline.data.markup import render_text
    from strandline.tasks.summarize.features import FEATURES, FeatureState, heading_text

    assert heading_text("- Getting started") is None and heading_text("Getting started") == "Getting started"
    doc = render_text(
        "# Frob\n\nEach run does three things:\n\n1. It reads the log file once.\n2. It keeps a small state.\n"
        "   The state never grows.\n- Fast\n\nMemory stays flat for any log size.\n",
        "markdown",
    )
    sents = split_sentences(doc)
    rows = list(FeatureState(4).read(sents, torch.zeros(len(sents), 4), torch.ones(len(sents))))
    prose = [sents[j].text for j, _, _ in rows]
    assert prose == ["- It reads the log file once.", "- It keeps a small state.", "The state never grows.",
                         "Memory stays flat for any log size."]  # fmt: skip
    col = {name: [float(f[FEATURES.index(name)]) for _, f, _ in rows] for name in FEATURES}
    assert col["list_item"] == [1.0, 1.0, 1.0, 0.0]  # the item's second sentence too
    assert col["log_section"][-1] == col["log_section"][0]  # "- Fast" is an item of the list, no new section
    plain = split_sentences(
        "Each run:\n\n- It reads the log file once.\n\n* It keeps a state.\n\nIt ends after one pass."
    )
    rows = list(FeatureState(4).read(plain, torch.zeros(len(plain), 4), torch.ones(len(plain))))
    assert [float(f[FEATURES.index("list_item")]) for _, f, _ in rows] == [1.0, 1.0, 0.0]  # plain text's bullets


def test_listwise_objective_is_each_documents_softmax_cross_entropy_and_its_optimum_ranks():
    x, y = _toy_labels(2)
    head = fit_head(x, y, l2=0.01, weights=[1.0, 2.0, 0.5], objective="listwise")
    with torch.no_grad():
        for f, lab in zip(x, y, strict=True):
            s = head(f)
            assert (s[lab.bool()][:, None] > s[~lab.bool()][None, :]).float().mean() > 0.9  # ranks within a document
    # the objective by hand: per document, -mean over its chosen sentences of log softmax, weighted by document
    xd, yd = torch.cat(x).double(), torch.cat(y).double()
    doc = torch.cat([torch.full((200,), i) for i in range(3)])
    w = torch.cat([torch.full((200,), v) for v in (1.0, 2.0, 0.5)]).double()
    w = w / w.mean()
    h = copy.deepcopy(head).double()
    with torch.no_grad():
        by_hand = 0.0
        for i in range(3):
            logp = torch.log_softmax(h(xd[doc == i]), 0)
            by_hand += float(w[doc == i][0]) * float(-(logp * yd[doc == i]).sum() / yd[doc == i].sum())
        by_hand = by_hand / float(sum(w[doc == i][0] for i in range(3)))
        by_hand += 0.5 * 0.01 * float(h.net[0].weight.square().sum())
        got = float(head_objective(h, xd, yd, w, 0.01, "listwise", doc))
    assert abs(got - by_hand) < 1e-9
    loss = head_objective(h, xd, yd, w, 0.01, "listwise", doc)
    grads = torch.autograd.grad(loss, [h.net[0].weight])
    assert float(grads[0].abs().max()) < 1e-5  # fit_head stopped at the optimum
    with pytest.raises(ValueError, match="objective must be one of"):
        fit_head(x, y, objective="ranking")


def test_graded_labels_are_each_sentences_rouge_scaled_to_the_best():
    from strandline.tasks.summarize.oracle import rouge_labels, rouge_tokens

    ref = rouge_tokens("Linear attention keeps a constant state while it reads a genome.")
    sents = [rouge_tokens(t) for t in ("Bananas are yellow.", "Linear attention keeps a constant state.",
                                       "The state is constant.", "It reads a genome.")]  # fmt: skip
    y = rouge_labels(sents, ref)
    assert y[0] == 0.0 and y[1] == 1.0 and 0 < y[2] < 1 and 0 < y[3] < 1  # no overlap, the best, partial ones
    assert torch.equal(rouge_labels(sents[:1], ref), torch.zeros(1))  # nothing shared: all zero, no division
    assert len(rouge_labels([], ref)) == 0


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
@pytest.mark.parametrize("packed", [False, True], ids=["text", "gzip"])
def test_a_named_pipe_is_summarized_whole(tmp_path, capsys, packed):
    """A pipe given as a path (``<(cmd)``, a FIFO) is read once: nothing probes its first bytes beforehand, so the
    summary reads every sentence, as from the file itself (compressed data is recognized by a peek)."""
    import gzip
    import threading

    from strandline.app.cli import main
    from strandline.data.documents import compression_of, is_pdf, is_regular_file

    doc = Path(__file__).resolve().parents[1] / "data" / "documents" / "2022.acl-long.286.txt"
    data = doc.read_bytes()
    fifo = tmp_path / "doc.fifo"
    os.mkfifo(fifo)

    def write():
        with open(fifo, "wb") as f:
            f.write(gzip.compress(data) if packed else data)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    assert not is_regular_file(fifo) and compression_of(fifo) is None and not is_pdf(fifo)  # no probe opened it
    assert main(["summarize", str(SHIPPED), str(fifo), "--budget", "40", "--markup", "text"]) == 0
    writer.join(timeout=60)
    piped = capsys.readouterr().out
    plain = tmp_path / "doc.txt"
    plain.write_bytes(data)
    assert main(["summarize", str(SHIPPED), str(plain), "--budget", "40", "--markup", "text"]) == 0
    assert piped == capsys.readouterr().out and "sentences) ===" in piped
