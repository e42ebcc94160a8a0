"""The summarizer's data builders: the LM's long-text corpus (Info / plain-text manuals), the What's New pairs, and the
benchmark's per-document LM cache. No package is downloaded: the inputs are built in tmp_path."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import torch

from strandline.data.fetch_longtext import Source, build, clean_lines, info_text, pieces, plain_text, split_of

INFO = (
    "This is demo.info, produced by makeinfo.\n\nCopyright (C) 2022 Free Software Foundation, Inc.\n"
    "INFO-DIR-SECTION Basics\nSTART-INFO-DIR-ENTRY\n* Demo: (demo).  A demo.\nEND-INFO-DIR-ENTRY\n\n"
    "\x1f\nFile: demo.info,  Node: Top,  Next: Usage,  Up: (dir)\n\nDemo Manual\n***********\n\n"
    "Demo prints text.  It is described in *note Usage:: and in\n*note Invoking Demo: Invoking.\n\n"
    "* Menu:\n\n* Usage::\t\tHow to use it.\n* Invoking::\t\tThe options of the\n\t\t\tcommand.\n\n"
    "\x1f\nFile: demo.info,  Node: Usage,  Prev: Top,  Up: Top\n\n1 Usage\n=======\n\n"
    "Run it with one argument.\n\n+------+------+\n| a    | b    |\n+------+------+\n\n"
    "\x1f\nFile: demo.info,  Node: GNU Free Documentation License,  Up: Top\n\nEveryone is permitted to copy.\n"
    "\x1f\nFile: demo.info,  Node: Concept Index,  Up: Top\n\n* argument:   Usage.   (line 3)\n"
    "\x1f\nTag Table:\nNode: Top123\n\x1f\nEnd Tag Table\n"
)


def test_info_manual_becomes_plain_prose():
    text = info_text(INFO)
    assert text.startswith("Demo Manual\n\nDemo prints text.")  # the preamble and node headers are gone
    assert "It is described in see Usage and in\nsee Invoking Demo." in text  # cross-references read as text
    assert "Run it with one argument." in text and "| a    | b    |" in text  # a table's cells stay, its rules go
    for markup in ("File: demo.info", "* Menu:", "Usage::", "\tcommand.", "*******", "=======", "+------+", "\x1f"):
        assert markup not in text
    for dropped in ("Everyone is permitted", "(line 3)", "Tag Table", "INFO-DIR-SECTION", "Copyright"):
        assert dropped not in text  # licence and index nodes, tag tables and the dir entry are not prose


def test_plain_text_manual_drops_underlines_and_the_licence_appendix():
    raw = "Policy\n******\n\n1. Scope\n========\n\nThis manual describes policy.\n\n\n\n\nMore text.\n"
    raw += "\nGNU General Public License\n==========================\n\nThe licence text.\n"
    assert plain_text(raw) == "Policy\n\n1. Scope\n\nThis manual describes policy.\n\nMore text."
    assert clean_lines("a\n-----\nb") == "a\nb"


def test_pieces_cut_at_paragraphs_and_keep_everything():
    text = "\n\n".join(f"Paragraph {i} " + "x" * 50 for i in range(100))
    parts = list(pieces(text, size=500))
    assert "\n\n".join(parts) == text and len(parts) > 5
    assert all(len(p) >= 500 for p in parts[:-1]) and all(not p.startswith("\n") for p in parts)
    assert {split_of(f"m#{i}") for i in range(200)} == {"train", "val"}
    assert sum(split_of(f"m#{i}") == "val" for i in range(2000)) < 200  # about 5%


def _build_from(tmp_path, monkeypatch, manuals: dict[str, str]) -> dict[str, list[dict]]:
    """``build`` over fake Info manuals {name: text} and one train/val/test document per summarization domain;
    returns the rows of every file written."""
    import strandline.data.fetch_longtext as fl

    root = tmp_path / "deb"
    (root / "usr/share/info").mkdir(parents=True)
    sources = []
    for name, text in manuals.items():
        (root / f"usr/share/info/{name}.info.gz").write_bytes(gzip.compress(text.encode()))
        sources.append(Source(name, f"{name}-doc", (f"usr/share/info/{name}.info.gz",), "info", "x"))
    monkeypatch.setattr(fl, "SOURCES", tuple(sources))
    monkeypatch.setattr(fl, "unpack", lambda package, debs, tmp: root)
    summaries = tmp_path / "summaries"
    summaries.mkdir()
    for domain in fl.DOMAINS:
        rows = [{"id": f"{domain}-{s}", "domain": domain, "split": s, "title": "", "text": f"{domain} {s} text.",
                 "summary": "s"} for s in ("train", "val", "test")]  # fmt: skip
        (summaries / f"{domain}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    counts = build(tmp_path / "out", summaries=summaries)
    return {n: [json.loads(x) for x in (tmp_path / "out" / n).read_text().splitlines()] for n in counts}


def test_lm_files_hold_long_text_and_train_or_val_documents_never_test(tmp_path, monkeypatch):
    import strandline.data.fetch_longtext as fl

    read = _build_from(tmp_path, monkeypatch, {"demo": INFO})
    assert [r["source"] for r in read["longtext.jsonl"]] == ["demo"]
    texts = {n: " ".join(r["text"] for r in rows) for n, rows in read.items()}
    assert "test text" not in texts["lm-train.jsonl"] + texts["lm-val.jsonl"]  # the benchmark's test split
    assert all(f"{d} train text." in texts["lm-train.jsonl"] for d in fl.DOMAINS)
    assert all(f"{d} val text." in texts["lm-val.jsonl"] for d in fl.DOMAINS)
    assert "Demo prints text." in texts[f"lm-{split_of('demo#0')}.jsonl"]


def test_long_files_hold_whole_manuals_split_by_manual(tmp_path, monkeypatch):
    import strandline.data.fetch_longtext as fl

    long_manual = "\n\n".join(f"Paragraph {i} of a long manual." for i in range(3000))  # ~100 kB: many pieces
    held = fl.HELD_OUT_MANUALS[0]
    read = _build_from(
        tmp_path, monkeypatch, {"demo": INFO, held: f"\x1f\nFile: long.info,  Node: Top\n\n{long_manual}\n"}
    )
    assert sum(r["source"] == held for r in read["longtext.jsonl"]) > 3  # cut into pieces there
    assert [r["source"] for r in read["long-train.jsonl"]] == ["demo", "aclsum"]
    assert [r["source"] for r in read["long-val.jsonl"]] == [held, "aclsum"]
    val = read["long-val.jsonl"][0]["text"]  # uncut, in order
    assert val.startswith("Paragraph 0 of") and val.endswith("Paragraph 2999 of a long manual.")
    assert read["long-val.jsonl"][1]["text"] == "aclsum val text." and "test text" not in json.dumps(read)


def test_whatsnew_highlights_found_in_either_capitalization():
    from strandline.data.fetch_summaries import whatsnew_pair

    for title in ("Summary -- Release highlights", "Summary -- Release Highlights"):
        page = f"What's New\n==========\n\n{title}\n{'=' * len(title)}\n\n* fast\n\nNew\n===\n\nText.\n"
        assert whatsnew_pair(page) == ("What's New\n==========\n\nNew\n===\n\nText.", "* fast")


def test_lm_cache_is_keyed_by_document_not_position(tmp_path, monkeypatch):
    from strandline.data.segment import split_sentences
    from strandline.tasks.summarize import build

    docs = [{"id": f"d{i}", "split": "test", "text": f"Document {i} has one sentence here.", "summary": "A summary."}
            for i in range(3)]  # fmt: skip
    calls = []

    class Reader:
        def __init__(self, lm):
            pass

        def reset(self):
            pass

        def __call__(self, sentences):
            calls.append(sentences[0].text)
            return torch.full((len(sentences), 4), float(len(calls))), torch.ones(len(sentences))

    lm = type("LM", (), {"config": type("C", (), {"d_model": 4})()})()
    monkeypatch.setattr(build, "LMReader", Reader)
    monkeypatch.setattr(build, "load_pairs", lambda domain, root: [dict(d) for d in docs])
    recipe = build.read_recipe(Path(__file__).resolve().parents[1] / "configs" / "summarize" / "summarizer.json")
    first = {d["id"]: d["hidden"][0, 0].item() for d in build.prepare("x", lm, tmp_path, "k", recipe)}
    assert len(calls) == 3
    docs.reverse()  # re-ordered, and one document changed: only that one is read again
    docs[0] = {**docs[0], "text": "Document 2 changed its only sentence."}
    again = {d["id"]: d["hidden"][0, 0].item() for d in build.prepare("x", lm, tmp_path, "k", recipe)}
    assert len(calls) == 4 and calls[-1] == split_sentences(docs[0]["text"])[0].text
    assert again["d0"] == first["d0"] and again["d1"] == first["d1"] and again["d2"] == 4.0
    # the same text cut into other sentences (a changed segmenter): read again, never misread per sentence
    monkeypatch.setattr(build, "split_sentences", lambda text: split_sentences(text.replace(" has ", ". Has ")))
    cut = {d["id"]: d for d in build.prepare("x", lm, tmp_path, "k", recipe)}
    assert (
        len(calls) == 6 and len(cut["d0"]["sentences"]) == 2 and cut["d2"]["hidden"][0, 0].item() == 4.0
    )  # d2 unchanged


def test_pypi_readmes_come_from_the_pinned_list_only(capsys):
    import importlib.metadata

    from strandline.data.fetch_summaries import PYPI_PINS, pypi_readmes

    tqdm = f"tqdm=={importlib.metadata.version('tqdm')}"  # a pin that matches what is installed
    rows = list(pypi_readmes((tqdm, "tqdm-not-a-package==1.0", "numpy==0.0.1")))
    assert [r["id"] for r in rows] == [tqdm.replace("==", "-")]  # not numpy at another version, not the absent one
    assert rows[0]["summary"] and len(rows[0]["text"]) >= 2000
    err = capsys.readouterr().err
    assert "2 pinned distributions" in err and "numpy==0.0.1" in err and "tqdm-not-a-package==1.0" in err
    assert all(p.count("==") == 1 for p in PYPI_PINS) and len(set(PYPI_PINS)) == len(PYPI_PINS)
    assert not any(p.startswith(("einops==", "fla-core==", "pytorch-fast-transformers==")) for p in PYPI_PINS)


def test_leave_one_out_setting_is_selected_without_the_held_out_domain(monkeypatch):
    pytest.importorskip("rouge_score")
    import benchmarks.summarize as bench

    domains = ["a", "b", "c", "held"]
    A, B = (0.1, 0.0, 1.0, 0.0), (1.0, 1.0, 0.5, 2.0)  # settings: (l2, lead_bonus, redundancy, centrality)
    calls = []

    def fake_grid(lm, data, train, val, grid):
        calls.append((sorted(train), sorted(val)))
        # B is best wherever the score is the held-out domain's val split or its documents trained the head
        return {A: {v: 1.0 for v in val}, B: {v: 5.0 if "held" in (*train, v) else 0.0 for v in val}}, {}

    monkeypatch.setattr(bench, "grid_scores", fake_grid)
    pairs = bench.pair_tables(None, {}, domains)
    assert len(calls) == 6 and all(len(t) == 2 and not set(t) & set(v) for t, v in calls)
    assert bench.select_held_out(pairs, "held", domains) == A  # no fold of "held" trained on or scored it
    # the other folds' selection may use "held" as an ordinary training domain: there B wins
    assert bench.select_held_out(pairs, "a", domains) == B


def test_scores_give_each_summary_words_as_a_share_of_its_budget():
    pytest.importorskip("rouge_score")
    from rouge_score import rouge_scorer

    import benchmarks.summarize as bench
    from strandline.data.segment import split_sentences

    sents = split_sentences("Cats chase small mice. Dogs bark at the moon at night.")  # 4 and 7 words
    docs = [{"summary": "Cats chase mice.", "budget": 20}, {"summary": "Dogs bark.", "budget": 14}]
    scorer = rouge_scorer.RougeScorer(list(bench.METRICS), use_stemmer=True, split_summaries=False)
    out = bench.scores(docs, lambda d: sents[:1] if d["budget"] == 20 else sents, scorer)
    assert out["budget_use"].tolist() == pytest.approx([20.0, 11 / 14 * 100])
    assert out["rouge2"][0] > 0 and set(out) == {*bench.METRICS, "budget_use"}


def test_mean_table_pairs_every_system_given_with_the_baselines(capsys):
    pytest.importorskip("rouge_score")
    import numpy as np

    import benchmarks.summarize as bench

    rng = np.random.default_rng(1)
    names = ("Lead", "TextRank", "LexRank", "Strandline (leave-one-out)", "Strandline (shipped)")
    results = {dom: {n: {"rouge2": rng.uniform(0, 10, size)} for n in names} for dom, size in (("a", 5), ("b", 9))}
    bench.print_mean(results, ("Strandline (shipped)",))
    out = capsys.readouterr().out
    for ours in names[3:]:
        block = out.split(f"paired difference of {ours} minus")[1].splitlines()
        lead = np.mean([results[d][ours]["rouge2"].mean() - results[d]["Lead"]["rouge2"].mean() for d in "ab"])
        assert block[1].split()[:3] == ["-", "Lead", f"{lead:+.2f}"]
        lo, hi = (float(x) for x in block[1].split("[")[1].rstrip("]").split(","))
        assert lo <= lead <= hi


def test_target_table_counts_each_target_per_domain(capsys):
    pytest.importorskip("rouge_score")
    import numpy as np

    import benchmarks.summarize as bench

    lead = np.array([4.0, 5.0, 6.0, 5.0])
    rows = {
        "Lead": {"rouge2": lead, "rougeLsum": np.full(4, 20.0)},
        "TextRank": {"rouge2": lead - 1, "rougeLsum": np.full(4, 18.0)},
        "LexRank": {"rouge2": lead - 2, "rougeLsum": np.full(4, 18.0)},
        "ours": {"rouge2": lead * 1.2, "rougeLsum": np.full(4, 21.0)},  # every target met: 1.2 x Lead everywhere
        "close": {"rouge2": lead + np.array([3.0, -2.5, 2.0, -2.1]), "rougeLsum": np.full(4, 19.0)},
    }
    bench.print_targets({"d": rows}, ("ours", "close"))
    out = capsys.readouterr().out
    ours, close = (line.split() for line in out.splitlines() if line.startswith("d "))
    assert ours[2] == "1.20" and ours[-1] == "5/5"
    assert close[2] == "1.02" and close[3] == "-1.00" and close[-1] == "2/5"  # above TextRank and LexRank only
    rows["Lead, other fill"] = {"rouge2": lead - 1, "rougeLsum": np.full(4, 21.5)}  # the other fill: better R-Lsum
    bench.print_targets({"d": rows}, ("ours",))
    ours = next(line.split() for line in capsys.readouterr().out.splitlines() if line.startswith("d "))
    assert ours[2] == "1.20" and ours[3] == "-0.50" and ours[-1] == "4/5"  # R-Lsum against the better fill's


def test_stability_of_running_summaries(capsys):
    pytest.importorskip("rouge_score")
    from benchmarks.summarize_extra import stability
    from strandline.data.segment import split_sentences

    text = " ".join(f"Sentence number {k} says something new." for k in range(20))
    sents = split_sentences(text)
    doc = {"sentences": sents, "prose": sents}
    data = {"d": {"test": [doc]}}
    first = lambda d, summ, upto=None: d["prose"][:1] if upto else []  # noqa: E731
    latest = lambda d, summ, upto=None: d["prose"][upto - 1 : upto] if upto else []  # noqa: E731
    stability(data, None, ["d"], first)
    stability(data, None, ["d"], latest)
    kept, moved = (line.split() for line in capsys.readouterr().out.splitlines() if line.startswith("d "))
    assert kept[1:] == ["1.00", "0.00", "1.00", "1.00", "1.00"]  # the same sentence from the first step on
    assert moved[1:] == ["0.00", "1.00", "0.00", "0.00", "0.00"]  # a new sentence at every step, none stays


def test_incremental_lead_takes_the_stronger_fill_on_each_prefix(capsys):
    pytest.importorskip("rouge_score")
    from types import SimpleNamespace

    from benchmarks.summarize_extra import incremental
    from strandline.data.segment import split_sentences

    # one 10-word sentence, then 12 words, then the reference's 4-word sentence; budget 20: a prefix (stop) ends
    # after the first, skip passes over the 12 and takes the reference sentence once it has been read
    text = "Alpha beta gamma delta epsilon zeta eta theta iota kappa. " + "Lambda " * 11 + "mu. Cats chase small mice."
    sents = split_sentences(text)
    doc = {"sentences": sents, "prose": sents, "budget": 20, "summary": "Cats chase small mice."}
    first = lambda d, summ, upto=None: d["prose"][:1] if upto else []  # noqa: E731
    for fill in ("stop", "skip"):  # the summarizer's own rule does not set the baseline's
        incremental({"d": {"test": [doc]}}, SimpleNamespace(fill=fill), ["d"], first)
    for line in (ln for ln in capsys.readouterr().out.splitlines() if "Lead:" in ln):
        assert line.endswith("Lead: skip,skip,skip,skip")  # a tie (at 25 and 50%: nothing fits better) is the first
        cells = line.split()[1:5]
        assert cells[:2] == ["0.00/0.00"] * 2  # one or two sentences read: the 10 words, by either rule
        assert all(float(c.split("/")[1]) > 30 for c in cells[2:])  # all read: skip takes the reference sentence


def test_paired_dev_compares_two_recipes_per_document(capsys, monkeypatch):
    pytest.importorskip("rouge_score")
    import benchmarks.summarize_extra as extra

    # each document's score is what the system "chooses": Lead 10, A 12, B 12 + a document-dependent gain
    monkeypatch.setattr(extra, "stronger_lead", lambda docs, r2: ("stop", [r2(d, 10.0) for d in docs]))
    docs = {dom: {"train": [{"prose": k, "budget": 0, "gain": g * (k % 2)} for k in range(8)], "val": []}
            for dom, g in (("same", 0.0), ("better", 2.0))}  # fmt: skip
    ours = lambda d, head: 12.0 + d["gain"] * (head == "b")  # noqa: E731
    r2 = lambda d, chosen: chosen / 100  # noqa: E731
    out = extra.paired_dev(
        docs, {"same": "a", "better": "a"}, {"same": "b", "better": "b"}, ["same", "better"], ours, r2
    )
    same, better = out["domains"]["same"], out["domains"]["better"]
    assert same["ci"] == (0.0, 0.0) and (same["a"], same["b"]) == (12.0, 12.0)
    assert better["b"] == 13.0 and 0.0 < better["ci"][0] < 1.0 < better["ci"][1] <= 2.0
    assert out["ratio"] == pytest.approx((1.2, 1.25)) and 0.0 < out["ci"][0] < out["ci"][1]
    printed = capsys.readouterr().out
    assert "B - A +0.050" in printed and "better" in printed


def test_paired_dev_scores_the_same_summaries_by_rouge_lsum_as_a_margin_over_lead(capsys, monkeypatch):
    pytest.importorskip("rouge_score")
    from rouge_score import rouge_scorer

    import benchmarks.summarize_extra as extra
    from strandline.data.segment import split_sentences

    made = []  # each system's summary of each document is made once, whatever the number of metrics
    monkeypatch.setattr(extra, "stronger_lead", lambda docs, score: ("skip", [score(d, 20.0) for d in docs]))
    docs = {"d": {"train": [{"k": k} for k in range(6)], "val": [{"k": 6}]}}
    ours = lambda d, head: made.append((d["k"], head)) or (24.0 if head == "b" else 18.0)  # noqa: E731
    out = extra.paired_dev(docs, {"d": "a"}, {"d": "b"}, ["d"], ours, lambda d, c: c / 100, lsum=lambda d, c: c / 50)
    assert sorted(made) == sorted((k, h) for k in range(7) for h in "ab")
    assert out["ratio"] == pytest.approx((0.9, 1.2))  # ROUGE-2: 18 and 24 against Lead's 20
    lsum = out["lsum"]
    assert lsum["margin"] == pytest.approx((-4.0, 8.0)) and lsum["ci"] == pytest.approx((12.0, 12.0))
    assert lsum["domains"]["d"]["lead"] == pytest.approx(40.0)
    assert "ROUGE-Lsum" in capsys.readouterr().out
    # the metric itself: the benchmark's ROUGE-Lsum, one sentence a line
    score = extra.lsum_of(rouge_scorer.RougeScorer(["rougeLsum"], use_stemmer=True, split_summaries=False))
    sents = split_sentences("Cats chase small mice. Dogs bark at night.")
    doc = {"summary": "Cats chase small mice. Dogs bark at night."}
    assert score(doc, sents) == pytest.approx(1.0) and 0.0 < score(doc, sents[:1]) < 1.0 and score(doc, []) == 0.0


def test_baselines_fill_the_budget_by_the_summarizers_rule_and_the_stronger_lead_is_kept():
    pytest.importorskip("rouge_score")
    from benchmarks.summarize_baselines import fill, lead, stronger_fill, stronger_lead, textrank, textrank_order
    from strandline.data.segment import split_sentences

    words = (6, 3, 20, 5, 30, 4)  # the 3-word one is a heading (under 4 words), the 30-word one over the budget
    text = " ".join(" ".join([f"w{k}"] * n).capitalize() + "." for k, n in enumerate(words))
    sents = split_sentences(text)
    assert [s.n_words for s in sents] == list(words)
    # 6 + 20 words, and neither the 5 nor the 4 after them fits the 3 left: both rules give the same summary
    assert [s.index for s in lead(sents, 29, "skip")] == [0, 2] == [s.index for s in lead(sents, 29, "stop")]
    assert [s.index for s in lead(sents, 35, "skip")] == [0, 2, 3, 5]  # 6 + 20 + 5 + 4 = 35
    assert [s.index for s in lead(sents, 28, "skip")] == [0, 2]
    assert [s.index for s in lead(sents, 24, "skip")] == [0, 3, 5]  # 20 does not fit the 18 left: skipped
    assert [s.index for s in lead(sents, 24, "stop")] == [0]  # ... or the end of a prefix
    assert [s.index for s in fill(sents, [4, 3, 0], 24, rule="stop")] == [0, 3]  # 30 > 24: no candidate, no stop
    with pytest.raises(ValueError, match="rule must be one of skip, stop"):
        fill(sents, [0], 24, rule="prefix")
    assert len(textrank(sents, 24, "stop")) <= len(textrank(sents, 24, "skip"))
    docs = [{"prose": sents, "budget": 24}]
    score = lambda d, chosen: float(sum(s.n_words for s in chosen))  # noqa: E731  (more words: higher)
    assert stronger_lead(docs, score) == ("skip", [15.0])
    assert stronger_lead(docs, lambda d, chosen: -score(d, chosen)) == ("stop", [-6.0])
    # any baseline's ranking, filled by both rules from one ranking: the stronger fill is its summary's score
    assert stronger_fill(docs, score) == stronger_lead(docs, score)
    for sign in (1, -1):
        rule, per = stronger_fill(docs, lambda d, c, k=sign: k * score(d, c), textrank_order)
        assert per == [sign * score(docs[0], textrank(sents, 24, rule))]
        assert per[0] == max(sign * score(docs[0], textrank(sents, 24, r)) for r in ("skip", "stop"))


@pytest.mark.parametrize(("rule", "score"), [("val", 0.0), ("train+val", 0.75)])
def test_the_selection_rule_names_the_documents_that_rank_the_settings(monkeypatch, rule, score):
    import dataclasses

    from strandline.tasks.summarize import build

    recipe = build.read_recipe(Path(__file__).resolve().parents[1] / "configs" / "summarize" / "summarizer.json")
    recipe = dataclasses.replace(recipe, selection=rule, grid={**recipe.grid, "centrality": (2.0,), "mmr": (0.0,)})
    data = {"a": {"train": [{"split": "train"}] * 3, "val": [{"split": "val"}], "test": [{"split": "test"}]}}
    monkeypatch.setattr(build, "train_heads", lambda *a: iter([(1.0, None)]))
    monkeypatch.setattr(build, "Summarizer", lambda lm, head, settings: None)
    monkeypatch.setattr(build, "ours", lambda d, summ: d)
    monkeypatch.setattr(
        build, "fast_r2", lambda d, chosen: {"train": 1.0, "val": 0.0}[chosen["split"]]
    )  # test: KeyError
    table, _ = build.grid_scores(None, data, ["a"], ["a"], recipe)
    assert table and {t["a"] for t in table.values()} == {score}


def test_shipped_setting_follows_the_recipes_selection_rule(tmp_path):
    import json
    from pathlib import Path

    from strandline.errors import UserInputError
    from strandline.tasks.summarize import build

    domains = ["a", "b", "c"]
    A, B = (0.1, 0.0, 1.0, 4.0), (1.0, 0.0, 1.0, 2.0)  # settings: (l2, lead_bonus, redundancy, centrality)
    # heads trained on every domain: A has the best mean val score; each domain's own held-out fold prefers B
    full = {A: {"a": 9.0, "b": 9.0, "c": 3.0}, B: {"a": 6.0, "b": 6.0, "c": 6.0}}
    lodo = {d: ({A: {v: 1.0 for v in domains}, B: {v: 2.0 if v == d else 0.0 for v in domains}}, {}) for d in domains}
    assert build.shipped_setting("val", full, lodo, domains) == A == build.select(full, domains)
    assert build.shipped_setting("held-out", full, lodo, domains) == B
    with pytest.raises(UserInputError, match="selection must be one of val, train[+]val, held-out"):
        build.shipped_setting("pooled", full, lodo, domains)
    # the shipped recipe names the rule, and a recipe with a bad rule fails when it is read (before any grid)
    shipped = Path(__file__).resolve().parents[1] / "configs" / "summarize" / "summarizer.json"
    assert build.read_recipe(shipped).selection == "train+val"
    bad = tmp_path / "recipe.json"
    bad.write_text(json.dumps({**json.loads(shipped.read_text()), "selection": "test"}))
    with pytest.raises(UserInputError, match="selection must be one of"):
        build.read_recipe(bad)


def test_smoothed_selection_takes_a_broad_optimum_over_a_lone_point():
    from strandline.tasks.summarize import build

    grid = {"l2": (1.0,), "lead_bonus": (0.0,), "redundancy": (1.0,), "centrality": (1.0, 2.0, 4.0, 8.0),
            "mmr": (0.0, 1.0), "floor": (None,)}  # fmt: skip
    # per centrality (rows) and MMR (columns): a lone best point at centrality 1, a broad plateau at 4 and 8
    means = {1.0: (10.5, 7.0), 2.0: (8.0, 8.0), 4.0: (10.2, 10.1), 8.0: (10.0, 9.9)}
    table = {(1.0, 0.0, 1.0, c, m, None): {"a": v - 1.0, "b": v + 1.0} for c, row in means.items()
             for m, v in zip((0.0, 1.0), row, strict=True)}  # fmt: skip
    assert build.select(table, ["a", "b"]) == (1.0, 0.0, 1.0, 1.0, 0.0, None)  # the lone point, unsmoothed
    assert build.select(table, ["a", "b"], grid) == (1.0, 0.0, 1.0, 8.0, 0.0, None)  # the lone point's: 7, 8, 8
    mean = {k: v["a"] / 2 + v["b"] / 2 for k, v in table.items()}
    smoothed = build.smooth(mean, grid)
    assert smoothed[(1.0, 0.0, 1.0, 8.0, 1.0, None)] == pytest.approx((10.2 + 10.1 + 10.0 + 9.9) / 4)  # a corner: 4
    assert smoothed[(1.0, 0.0, 1.0, 2.0, 0.0, None)] == pytest.approx((10.5 + 7.0 + 8.0 + 8.0 + 10.2 + 10.1) / 6)
    assert build.smooth(mean, None) == mean
    # the shipped rule and the held-out rule smooth the same way; the shipped recipe smooths
    lodo = {d: ({k: {d: mean[k]} for k in table}, {}) for d in ("a", "b")}
    assert build.shipped_setting("train+val", table, lodo, ["a", "b"], grid) == (1.0, 0.0, 1.0, 8.0, 0.0, None)
    assert build.shipped_setting("held-out", table, lodo, ["a", "b"], grid) == (1.0, 0.0, 1.0, 8.0, 0.0, None)
    shipped = Path(__file__).resolve().parents[1] / "configs" / "summarize" / "summarizer.json"
    recipe = build.read_recipe(shipped)
    assert recipe.smoothing == "neighbours" and recipe.selection_grid == recipe.grid


def test_relative_selection_weighs_every_domain_the_same_whatever_its_scale():
    from strandline.tasks.summarize import build

    # "big" scores four times "small" (one-line references against long abstracts): X wins the plain mean by its
    # 2 points on "big" (10% of it), Y the relative mean by its 1 point on "small" (20% of it)
    X, Y = (1.0, 0.0, 1.0, 2.0, 0.0, 2.5), (1.0, 0.0, 1.0, 2.0, 0.0, None)
    table = {X: {"big": 20.0, "small": 4.0}, Y: {"big": 18.0, "small": 5.0}}
    assert build.select(table, ["big", "small"]) == X == build.select(table, ["big", "small"], aggregate="mean")
    assert build.select(table, ["big", "small"], aggregate="relative") == Y
    assert build.shipped_setting("train+val", table, {}, ["big", "small"], None, "relative") == Y
    assert build.select(table, ["big"], aggregate="relative") == X  # one domain: the same choice either way
    with pytest.raises(ValueError, match="aggregate must be one of mean, relative"):
        build.select(table, ["big"], aggregate="median")


def test_shipped_summarizer_records_the_recipe_that_built_it():
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    recipe = json.loads((root / "configs/summarize/summarizer.json").read_text())
    meta = json.loads((root / "data/models/summarizer/salience.json").read_text())
    training = meta["salience_training"]
    # a recipe changed without rebuilding the directory (or the reverse) shows here
    assert training["selection"] == recipe["selection"] and training["domains"] == recipe["domains"]
    assert training.get("smoothing", "none") == recipe.get("smoothing", "none")
    assert meta.get("fill", "skip") == recipe.get("fill", "skip")  # absent: built before the rule was a setting
    assert training["head"].startswith("fit_head") and meta["hidden"] == 0
    sel = training["selected"]
    assert sel["l2"] in recipe["grid"]["l2"] and sel["centrality"] in recipe["grid"]["centrality"]
    assert sel["mmr"] in recipe["grid"]["mmr"] and training["unused_features"] == recipe["unused_features"]
    assert sel.get("floor") in recipe["grid"].get("floor", [None]) and meta.get("floor") == sel.get("floor")
    assert (meta["lead_bonus"], meta["redundancy"], meta["centrality"], meta["mmr"]) == (
        sel["lead_bonus"],
        sel["redundancy"],
        sel["centrality"],
        sel["mmr"],
    )
    assert (training["objective"], training["labels"]) == (recipe["objective"], recipe["labels"])
    # the numbers the build printed, as the model card states them: above TextRank on every domain, above Lead on
    # the mean over domains (not on every domain: the manuals are the exception the card names)
    rows = training["test_rouge2"]
    assert all(r["Strandline (all domains)"] > r["TextRank"] for r in rows.values())
    mean = {k: sum(r[k] for r in rows.values()) / len(rows) for k in ("Strandline (all domains)", "Lead")}
    assert mean["Strandline (all domains)"] > mean["Lead"]
    card = (root / "data/models/summarizer/README.md").read_text()
    assert f"**{rows['aclsum']['Strandline (all domains)']:.2f}**" in card  # the card quotes this build


def _wheel(folder, name: str, version: str, summary: str, readme: str):
    import zipfile

    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nSummary: {summary}\n\n{readme}"
    path = folder / f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{name.replace('-', '_')}-{version}.dist-info/METADATA", meta)
        z.writestr(f"{name.replace('-', '_')}/__init__.py", "")
    return path


def test_wheel_readmes_are_read_from_a_folder_without_installing(tmp_path, capsys, monkeypatch):
    import subprocess

    from strandline.data.fetch_summaries import PYPI_PINS, PYPI_WHEEL_PINS, wheel_readmes

    readme = "The frobnicator reads genomes in constant memory. " * 60
    _wheel(tmp_path, "Frob-Nicator", "1.2.0", "Read genomes in constant memory", readme)
    _wheel(tmp_path, "tiny", "0.1", "Too short a readme here", "Short.")  # under MIN_CHARS: no row
    _wheel(tmp_path, "terse", "2.0", "Terse", readme)  # a one-word summary: no row
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: None)  # nothing is downloaded in the test
    rows = list(wheel_readmes(("frob-nicator==1.2.0", "tiny==0.1", "terse==2.0", "absent==9.9"), tmp_path))
    assert [r["id"] for r in rows] == ["Frob-Nicator-1.2.0"]
    assert rows[0]["summary"] == "Read genomes in constant memory" and rows[0]["text"].startswith("The frobnicator")
    assert rows[0]["domain"] == "pypi-readme" and rows[0]["split"] in ("train", "val", "test")
    assert "no wheel for 1 pins, skipped: absent==9.9" in capsys.readouterr().err
    names = {p.split("==")[0].lower() for p in PYPI_PINS}
    assert len(set(PYPI_WHEEL_PINS)) == len(PYPI_WHEEL_PINS) and not names & {
        p.split("==")[0].lower() for p in PYPI_WHEEL_PINS
    }  # no distribution twice


@pytest.mark.parametrize(
    ("content_type", "body", "want", "gone"),
    [
        ("text/markdown; charset=UTF-8", "# Frob\n\n[![ci](https://x/b.svg)](https://x)\n\nThe `frob` tool reads "
         "[genomes](https://x).\n\n```python\nimport frob\n```\n", "Frob\n\nThe frob tool reads genomes.", "import"),
        ("text/x-rst", "Frob\n====\n\n.. image:: https://x/b.svg\n\nThe ``frob`` tool reads `genomes "
         "<https://x>`_.\n\n::\n\n    import frob\n", "Frob\n\nThe frob tool reads genomes.", "import"),
        (None, "Frob\n====\n\nThe ``frob`` tool reads genomes.\n", "Frob\n\nThe frob tool reads genomes.", "``"),
        ("text/plain", "The ``frob`` tool reads genomes.\n", "The ``frob`` tool reads genomes.", "Frob"),
    ],
)  # fmt: skip
def test_a_readme_is_read_as_its_content_type_renders(content_type, body, want, gone):
    from email.message import Message

    from strandline.data import fetch_summaries as fs

    md = Message()
    md["Name"], md["Version"], md["Summary"] = "frob", "1.0", "Read genomes in constant memory"
    if content_type:
        md["Description-Content-Type"] = content_type
    md.set_payload(body + "More prose about frob follows here. " * 60)  # long enough for a row
    text = fs.readme_row(md)["text"]
    assert "\n".join(x for x in text.splitlines() if x.strip()).startswith(want.replace("\n\n", "\n"))
    assert gone not in text


def test_a_pin_not_installed_at_its_version_is_read_from_its_wheel(tmp_path, capsys, monkeypatch):
    import importlib.metadata
    import subprocess

    from strandline.data.fetch_summaries import readme_rows

    readme = "The frobnicator reads genomes in constant memory. " * 60
    _wheel(tmp_path, "tqdm", "0.0.1", "A pinned release that is not the installed one", readme)
    _wheel(tmp_path, "Frob-Nicator", "1.2.0", "Read genomes in constant memory", readme)
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: None)  # nothing is downloaded in the test
    installed = f"tqdm=={importlib.metadata.version('tqdm')}"
    rows = readme_rows(
        pins=(installed, "tqdm==0.0.1", "absent==9.9"), wheel_pins=("frob-nicator==1.2.0",), wheels=tmp_path
    )
    ids = [r["id"] for r in rows]
    assert ids == [installed.replace("==", "-"), "Frob-Nicator-1.2.0", "tqdm-0.0.1"]  # wheels in name order
    assert rows[2]["summary"] == "A pinned release that is not the installed one"  # the wheel's, not the venv's
    err = capsys.readouterr().err
    assert "not installed at their version" not in err and "no wheel for 1 pins, skipped: absent==9.9" in err


@pytest.mark.parametrize(
    "argv",
    [
        ["--recipe", "missing.json", "--dev-only"],
        ["--dev-only", "--against", "missing.json"],
        ["--against", "x.json"],
        ["--dev-only", "--unseen", "nope"],
        ["--dev-only", "--unseen", "aclsum"],  # a domain the recipe trains on is not unseen
    ],
)
def test_the_benchmark_refuses_a_bad_recipe_or_comparison_in_one_line(argv, capsys, tmp_path, monkeypatch):
    pytest.importorskip("rouge_score")
    import benchmarks.summarize as bench

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        bench.main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and ": error: " in err[-1] and "Traceback" not in "".join(err)


def test_against_takes_a_recipe_with_more_domains_never_fewer(capsys, tmp_path, monkeypatch):
    pytest.importorskip("rouge_score")
    import benchmarks.summarize as bench

    shipped = Path(__file__).resolve().parents[1] / "configs/summarize/summarizer.json"
    recipe = json.loads(shipped.read_text())
    fewer = tmp_path / "fewer.json"
    fewer.write_text(json.dumps({**recipe, "domains": recipe["domains"][:-1]}))
    with pytest.raises(SystemExit) as e:
        bench.main(["--recipe", str(shipped), "--dev-only", "--against", str(fewer)])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and "must have every domain of the first" in err[-1]
    more = tmp_path / "more.json"
    more.write_text(json.dumps({**recipe, "domains": [*recipe["domains"], "debian-readme"]}))
    monkeypatch.setattr(bench, "load", lambda path: (_ for _ in ()).throw(RuntimeError("past the check")))
    with pytest.raises(RuntimeError, match="past the check"):  # the comparison is accepted: the LM is loaded next
        bench.main(["--recipe", str(shipped), "--dev-only", "--against", str(more)])


def test_the_benchmark_names_a_missing_domain_file_in_one_line(capsys, tmp_path, monkeypatch):
    pytest.importorskip("rouge_score")
    import benchmarks.summarize as bench

    monkeypatch.setattr(bench, "load", lambda path: None)
    monkeypatch.setattr(bench, "DEFAULT_OUT", tmp_path)  # no domain file built
    with pytest.raises(SystemExit) as e:
        bench.main(["--dev-only"])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert e.value.code == 2 and "aclsum.jsonl is missing" in err and "fetch_summaries" in err
    assert "--unseen alone" not in err  # a domain the recipe trains on: no use leaving out the unseen ones
    for dom in bench.use_recipe(bench.RECIPE).domains:
        (tmp_path / f"{dom}.jsonl").write_text("")
    with pytest.raises(SystemExit):
        bench.main(["--dev-only"])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "debian-readme.jsonl is missing" in err and "--unseen alone" in err
