"""ACLSum benchmark of incremental extractive summarization, and the build of the shipped summarizer.

Documents are the S2ORC bodies of the 250 ACLSum papers (installed ``aclsum`` package, offline), references
their abstracts; official split 100/50/100. The salience head is trained on train (greedy-oracle labels),
its epoch and width are selected on validation by ROUGE-2, and test reports ROUGE-1/2/Lsum F1 (rouge-score,
Porter stemmer, sentences split by newline, no NLTK) side by side with, under the same word budget:
Lead (leading sentences), TextRank (PageRank over word-overlap similarity), a fixed-summary floor (the
training abstract most similar to the other training abstracts, the same for every document) and the oracle.
Then peak memory (RSS) and wall time of ``strandline summarize`` against input size, from 10 kB to 2 MB.

    python benchmarks/summarize.py --lm runs/text-tiny/checkpoints/last.ckpt --save data/models/summarizer
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from rouge_score import rouge_scorer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from data.documents import load_aclsum  # noqa: E402
from data.segment import split_sentences  # noqa: E402
from models import load  # noqa: E402
from tasks.summarize import (  # noqa: E402
    N_POSITION_FEATURES,
    SentenceFeaturizer,
    Summarizer,
    SummaryBuffer,
    _f1,
    _ngrams,
    greedy_oracle,
    oracle_labels,
    rouge_tokens,
    train_head,
)

METRICS = ("rouge1", "rouge2", "rougeLsum")


def prepare(split: str, budget: int, limit: int | None = None) -> list[dict]:
    """Sentences and oracle labels of every paper of a split."""
    docs = load_aclsum(split)[:limit]
    for d in docs:
        d["sentences"] = split_sentences(d["text"])
        d["labels"] = oracle_labels([s.clean for s in d["sentences"]], d["abstract"], budget)
    return docs


def featurize(docs: list[dict], lm_path: str, split: str, cache: Path) -> None:
    """LM features of every sentence (cached per LM file and split: the LM pass is the slow part)."""
    key = hashlib.sha1(f"{Path(lm_path).resolve()}:{os.path.getmtime(lm_path)}".encode()).hexdigest()[:10]
    path = cache / f"features-{split}{len(docs)}-{key}.pt"
    if path.exists():
        for d, f in zip(docs, torch.load(path), strict=True):
            d["features"] = f
        return
    featurizer = SentenceFeaturizer(load(lm_path))
    t0 = time.time()
    for i, d in enumerate(docs):
        featurizer.reset()
        d["features"] = featurizer(d["sentences"])
        print(f"  features {split}: {i + 1}/{len(docs)} ({time.time() - t0:.0f} s)", end="\r", file=sys.stderr)
    print(file=sys.stderr)
    cache.mkdir(parents=True, exist_ok=True)
    torch.save([d["features"] for d in docs], path)


def fill(sentences, order, budget: int, min_words: int = 4) -> list:
    """Sentences taken in ``order`` while they fit the word budget, returned in document order. Sentences under
    ``min_words`` (headings, fragments) are skipped, as the summarizer's buffer does, so every system is equal."""
    chosen, used = [], 0
    for i in order:
        if min_words <= sentences[i].n_words and used + sentences[i].n_words <= budget:
            chosen.append(i)
            used += sentences[i].n_words
    return [sentences[i] for i in sorted(chosen)]


def textrank(sentences, budget: int, damping: float = 0.85) -> list:
    """TextRank (Mihalcea & Tarau 2004): PageRank over overlap / (log|Si| + log|Sj|) similarities."""
    sets = [set(rouge_tokens(s.clean)) for s in sentences]
    vocab = {w: k for k, w in enumerate(set().union(*sets))} if sets else {}
    X = np.zeros((len(sets), max(1, len(vocab))))
    for i, ws in enumerate(sets):
        X[i, [vocab[w] for w in ws]] = 1.0
    n = X.sum(1)
    norm = np.log(np.maximum(n, 2))[:, None] + np.log(np.maximum(n, 2))[None, :]
    W = (X @ X.T) / norm
    np.fill_diagonal(W, 0.0)
    W = W / np.maximum(W.sum(1, keepdims=True), 1e-12)
    r = np.full(len(sets), 1.0 / max(1, len(sets)))
    for _ in range(50):
        r = (1 - damping) / len(sets) + damping * W.T @ r
    return fill(sentences, np.argsort(-r, kind="stable"), budget)


def fixed_floor(train: list[dict], budget: int) -> str:
    """The training abstract with the highest mean ROUGE-1/2 F1 against the other training abstracts, cut to the
    budget: one summary for every document, showing what style alone scores."""
    toks = [rouge_tokens(d["abstract"]) for d in train]
    grams = [(_ngrams(t, 1), _ngrams(t, 2)) for t in toks]

    def centrality(i: int) -> float:
        return sum((_f1(grams[i][0], g[0]) + _f1(grams[i][1], g[1])) / 2 for j, g in enumerate(grams) if j != i)

    best = max(range(len(train)), key=centrality)
    return "\n".join(s.clean for s in split_sentences(" ".join(train[best]["abstract"].split()[:budget])))


def ours(d: dict, head, budget: int, key: str = "features") -> list:
    """The streaming path's decision: each sentence offered to the bounded buffer in reading order."""
    buf = SummaryBuffer(budget)
    with torch.no_grad():
        scores = head(d[key]).tolist()
    for s, score in zip(d["sentences"], scores, strict=True):
        buf.offer(s, score)
    return [c.sentence for c in buf.sentences()]


def evaluate(docs: list[dict], system, scorer) -> dict[str, float]:
    """Mean ROUGE F1 (x100) of ``system(doc) -> list[Sentence] | str`` against each abstract."""
    totals = dict.fromkeys(METRICS, 0.0)
    for d in docs:
        out = system(d)
        pred = out if isinstance(out, str) else "\n".join(s.clean for s in out)
        ref = "\n".join(s.clean for s in split_sentences(d["abstract"]))
        for m, v in scorer.score(ref, pred).items():
            totals[m] += 100 * v.fmeasure
    return {m: v / len(docs) for m, v in totals.items()}


def select_head(train: list[dict], val: list[dict], budget: int, scorer, epochs: int, key: str = "features"):
    """Train heads of a few widths; keep the (width, epoch) with the best validation ROUGE-2."""
    best = (-1.0, None, None)
    for hidden in (32, 128):
        for epoch, head in train_head([d[key] for d in train], [d["labels"] for d in train], epochs, hidden):
            if epoch % 2:
                continue
            r2 = evaluate(val, lambda d, h=head: ours(d, h, budget, key), scorer)["rouge2"]
            print(f"  head hidden={hidden} epoch={epoch}: val ROUGE-2 {r2:.2f}", file=sys.stderr)
            if r2 > best[0]:
                best = (r2, {k: v.clone() for k, v in head.state_dict().items()}, (hidden, epoch))
    r2, state, (hidden, epoch) = best
    head = type(head)(head.dim, hidden)
    head.load_state_dict(state)
    return head.eval(), {"hidden": hidden, "epoch": epoch, "val_rouge2": round(r2, 3)}


def memory_curve(model_dir: str, docs: list[dict], sizes_kb: list[int]) -> list[tuple[int, float, float]]:
    """(size kB, peak RSS MiB, seconds) of ``strandline summarize`` in a fresh process per input size (Linux)."""
    corpus = "\n\n".join(d["text"] for d in docs)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for kb in sizes_kb:
            text = (corpus * (1 + kb * 1000 // len(corpus)))[: kb * 1000]
            doc = Path(tmp) / f"doc{kb}.txt"
            doc.write_text(text, encoding="utf-8")
            # VmHWM (peak RSS of this process image): unlike ru_maxrss it does not inherit the parent's peak
            code = (
                "import time; from app.cli import main; t = time.time(); "
                f"rc = main(['summarize', {model_dir!r}, {str(doc)!r}, '-o', {str(doc) + '.jsonl'!r}]); "
                "hwm = next(ln for ln in open('/proc/self/status') if ln.startswith('VmHWM')).split()[1]; "
                "print('RESULT', rc, hwm, time.time() - t)"
            )
            env = {**os.environ, "TQDM_DISABLE": "1"}
            out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
            _, rc, rss, secs = next(ln for ln in out.stdout.splitlines() if ln.startswith("RESULT")).split()
            rows.append((kb, int(rss) / 1024, float(secs)))
            print(f"  {kb:>5} kB: peak RSS {int(rss) / 1024:.1f} MiB, {float(secs):.1f} s", file=sys.stderr)
    return rows


def print_memory(model_dir: str, docs: list[dict], sizes: list[int]) -> None:
    if not sizes:
        return
    print("\npeak memory of `strandline summarize` vs input size (fresh process each)")
    rows = memory_curve(model_dir, docs, sizes)
    print(f"{'input kB':>9} {'peak RSS MiB':>13} {'seconds':>8}")
    for kb, rss, secs in rows:
        print(f"{kb:>9} {rss:>13.1f} {secs:>8.1f}")
    print(f"peak RSS at {rows[-1][0]} kB / at {rows[0][0]} kB: {rows[-1][1] / rows[0][1]:.3f}")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lm", required=True, help="byte-level LM: a model directory or Lightning .ckpt")
    p.add_argument("--budget", type=int, default=120, help="summary words (the median ACLSum abstract is ~120)")
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--save", default=None, help="write the selected summarizer here (e.g. data/models/summarizer)")
    p.add_argument("--cache", default="runs/summarize", help="feature cache directory")
    p.add_argument(
        "--limit", type=int, default=None, help="first N papers per split (a quick check, not the benchmark)"
    )
    p.add_argument("--ablation", action="store_true", help="also a head on position/length features alone")
    p.add_argument("--memory-only", action="store_true", help="only the memory curve of the summarizer in --save")
    p.add_argument("--memory-sizes", default="10,100,400,1000,2000", help="input sizes in kB ('' to skip)")
    args = p.parse_args(argv)
    torch.set_num_threads(1)  # measured faster than 2 threads on the shared 2-core machine
    torch.manual_seed(0)
    if args.memory_only:
        return print_memory(args.save, load_aclsum("test"), [int(s) for s in args.memory_sizes.split(",") if s])
    t0 = time.time()
    splits = {s: prepare(s, args.budget, args.limit) for s in ("train", "val", "test")}
    print(f"oracle labels: {time.time() - t0:.0f} s", file=sys.stderr)
    for name, docs in splits.items():
        featurize(docs, args.lm, name, Path(args.cache))
    scorer = rouge_scorer.RougeScorer(list(METRICS), use_stemmer=True, split_summaries=False)
    head, chosen = select_head(splits["train"], splits["val"], args.budget, scorer, args.epochs)
    if args.ablation:  # the same head on position/length features alone: what the LM's features add
        for docs in splits.values():
            for d in docs:
                d["position"] = d["features"].clone()
                d["position"][:, :-N_POSITION_FEATURES] = 0.0
        pos_head, _ = select_head(splits["train"], splits["val"], args.budget, scorer, args.epochs, "position")
    floor = fixed_floor(splits["train"], args.budget)
    b, test = args.budget, splits["test"]
    systems = {
        "Fixed summary (floor)": lambda d: floor,
        "Lead": lambda d: fill(d["sentences"], range(len(d["sentences"])), b),
        "TextRank": lambda d: textrank(d["sentences"], b),
        "Ours: LM state + salience head": lambda d: ours(d, head, b),
        **({"Ablation: position-only head": lambda d: ours(d, pos_head, b, "position")} if args.ablation else {}),
        "Oracle (upper bound)": lambda d: fill(
            d["sentences"], greedy_oracle([s.clean for s in d["sentences"]], d["abstract"], b), b
        ),
    }
    print(f"\nACLSum test ({len(test)} papers, body -> abstract), budget {b} words, ROUGE F1 x100")
    print(f"{'system':<34} {'R-1':>6} {'R-2':>6} {'R-Lsum':>7}")
    results = {}
    for name, fn in systems.items():
        r = results[name] = evaluate(test, fn, scorer)
        print(f"{name:<34} {r['rouge1']:6.2f} {r['rouge2']:6.2f} {r['rougeLsum']:7.2f}")
    print(f"selected on validation: {chosen}")
    if args.save:
        training = {"budget": b, "selected": chosen, "lm": str(args.lm), "test_rouge": results}
        model = load(args.lm)
        model.meta.setdefault("training", {})
        Summarizer(model, head).save(args.save, training={"salience_training": training})
        print(f"saved the summarizer to {args.save}")
    if args.save:
        print_memory(args.save, test, [int(s) for s in args.memory_sizes.split(",") if s])
    print(json.dumps({"results": results, "selected": chosen}))


if __name__ == "__main__":
    main()
