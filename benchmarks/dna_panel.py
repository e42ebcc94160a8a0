"""Bits per base on the held-out genome panel of the multi-genome corpus: Markov-k, uniform and trained models.

Every ``test`` genome of the manifest (``data/corpus.json``; ``--val`` adds the ``val`` ones) is scored WHOLE:

- the Markov model of ``benchmarks/dna_quality.py`` (add-alpha over orders 0..k, a context cut by an N backing off
  to its longest N-free part) counted on the corpus' ``train`` genomes, with k and alpha chosen on ``val``;
- uniform (2 bits/base);
- each ``--model`` directory, streamed over each record as ``strandline scan`` reads it: one chunked pass per
  piece of ``--piece`` bases with the state carried across the whole record.

All of them score the same positions: every A/C/G/T base of a record but its first. The "natural repeats"
columns split those positions by whether the 32 bases before them also occur, starting at least 500 bases
earlier, in the same genome (any record): there a model with a long memory can copy; elsewhere it cannot.

    python -m strandline.data.fetch_corpus                         # the corpus, once
    python benchmarks/dna_panel.py                                 # the shipped default model
    python benchmarks/dna_panel.py --model runs/x/model --model data/models/dna-corpus-tbptt --split both
    python benchmarks/dna_panel.py --quick 200000                  # smoke test: first 200 kb of every genome
    python benchmarks/dna_panel.py --save                          # also write benchmarks/results/dna_panel.json
"""

from __future__ import annotations

import argparse
import gzip
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.dna_quality import MAX_K, MarkovModel, _context_index  # noqa: E402
from strandline.data.tokenizers import BOS, DNA_LUT, INVALID, N  # noqa: E402

DEFAULT_MANIFEST = ROOT / "data" / "corpus.json"
DEFAULT_CORPUS = ROOT / "data" / "cache" / "corpus"
DEFAULT_MODEL = ROOT / "data" / "models" / "dna-corpus-tbptt"
ALPHAS = (0.01, 0.1, 0.5, 1.0)
REPEAT_K, REPEAT_GAP = 32, 500


# ------------------------------------------------------------------------------------------------- genomes


def read_genome(path: Path, limit: int | None = None) -> list[np.ndarray]:
    """The records of a FASTA(.gz) as uint8 DNA ids (other letters as N); ``limit``: the genome's first bases."""
    data = Path(path).read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    records, left = [], limit
    for chunk in data.lstrip()[1:].split(b"\n>"):
        body = chunk.partition(b"\n")[2]
        ids = DNA_LUT[np.frombuffer(b"".join(body.split()), np.uint8)]
        ids[ids == INVALID] = N
        if left is not None:
            ids, left = ids[:left], left - min(left, len(ids))
        if len(ids):
            records.append(ids)
        if left == 0:
            break
    return records


def scored_mask(records: list[np.ndarray]) -> np.ndarray:
    """Positions every model scores, over the concatenated records: a base (not N) that is not a record's first."""
    parts = []
    for r in records:
        m = (r >= 4) & (r <= 7)
        m[:1] = False
        parts.append(m)
    return np.concatenate(parts) if parts else np.zeros(0, bool)


def online_markov_bits(records: list[np.ndarray], k: int, alpha: float) -> np.ndarray:
    """Bits of every position (concatenated records) under an order-k Markov model whose counts are those of the
    genome itself read so far, records in file order: the adaptive context model of DNA compressors (XM, GeCo),
    trained on nothing. A position's prediction uses only the bases before it. Counts come from one stable sort
    by context (ranks inside equal contexts are counts of earlier occurrences), so no 4^k table is held.
    Scored positions without k valid bases before them in their record get 2 bits; unscored ones NaN."""
    keys, where, offset = [], [], 0
    for r in records:
        c = r.astype(np.int64) - 4
        c[(c < 0) | (c > 3)] = -1
        idx, ok = _context_index(c, k)
        pos = np.flatnonzero(ok) + k
        keys.append(idx[ok])
        where.append(pos + offset)
        offset += len(r)
    out = np.full(offset, np.nan)
    out[scored_mask(records)] = 2.0
    key = np.concatenate(keys) if keys else np.zeros(0, np.int64)
    at = np.concatenate(where) if where else np.zeros(0, np.int64)
    if not len(key):
        return out

    def earlier(values: np.ndarray) -> np.ndarray:  # occurrences of each value before each position (time order)
        order = np.argsort(values, kind="stable")
        v = values[order]
        start = np.flatnonzero(np.r_[True, v[1:] != v[:-1]])
        rank = np.arange(len(v)) - np.repeat(start, np.diff(np.r_[start, len(v)]))
        out = np.empty(len(v), np.int64)
        out[order] = rank
        return out

    n_ctx, n_sym = earlier(key // 4), earlier(key)
    out[at] = -np.log2((n_sym + alpha) / (n_ctx + 4 * alpha))
    return out


def repeat_mask(records: list[np.ndarray], k: int = REPEAT_K, gap: int = REPEAT_GAP) -> np.ndarray:
    """True at position i when the k bases before i (no N, same record) also occur starting >= ``gap`` bases
    earlier in the genome (the records concatenated in file order)."""
    total = sum(len(r) for r in records)
    out = np.zeros(total, bool)
    keys, starts = [], []
    offset = 0
    for r in records:
        c = r.astype(np.int64) - 4
        n = len(c) - k + 1
        if n > 0:
            key = np.zeros(n, np.uint64)
            ok = np.ones(n, bool)
            for j in range(k):
                x = c[j : j + n]
                ok &= (x >= 0) & (x <= 3)
                key = (key << np.uint64(2)) | np.maximum(x, 0).astype(np.uint64)
            keys.append(key[ok])
            starts.append(np.flatnonzero(ok) + offset)
        offset += len(r)
    if not keys:
        return out
    key, start = np.concatenate(keys), np.concatenate(starts)
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    earliest = start[first][inverse]
    hit = earliest <= start - gap
    target = start[hit] + k  # the position after the k-mer
    # a k-mer ending at a record's last base has no target in that record
    ends = np.cumsum([len(r) for r in records])
    inside = ~np.isin(target, ends) & (target < total)
    out[target[inside]] = True
    return out


# ------------------------------------------------------------------------------------------------- models


@torch.inference_mode()
def model_position_bits(model, records: list[np.ndarray], piece: int = 65536) -> np.ndarray:
    """Bits of every position (concatenated records) of a DNA model reading each record whole, as ``strandline
    scan`` does: from BOS, ``piece`` bases per chunked call, the state carried across the record."""
    from strandline.tasks.scan.job import score_chunk

    model.eval()
    out = []
    for r in records:
        state, carry = None, BOS
        for a in range(0, len(r), piece):
            s, state, carry = score_chunk(model, r[a : a + piece], state, carry)
            out.append(-s[:, 0].astype(np.float64))  # log2 P -> bits; NaN at N
    return np.concatenate(out) if out else np.zeros(0)


def load_model(path: str):
    from strandline.api import load

    return load(path)


def model_key(path: str, piece: int) -> str:
    """What a model's bits on a genome depend on: its files' bytes and the piece size (sha256, 16 hex digits)."""
    import hashlib

    h = hashlib.sha256(f"piece={piece}".encode())
    folder = Path(path)
    files = [folder / "config.json", folder / "model.safetensors"] if folder.is_dir() else [folder]
    for f in files:
        h.update(f.name.encode() + (f.read_bytes() if f.is_file() else b""))
    return h.hexdigest()[:16]


class ScoreCache:
    """Per-position bits of (model, genome), kept as float32 ``.npy`` files under ``folder`` (``--cache``), keyed
    by the model's bytes and piece size and the genome file's sha256: a model scored once is not streamed again
    when a later run compares it with new ones. Bits are rounded to float32 (sums differ from a fresh run by
    ~1e-7 relative)."""

    def __init__(self, folder: Path | None):
        self.folder = folder

    def path(self, mkey: str, genome_sha: str) -> Path | None:
        return None if self.folder is None else self.folder / f"{mkey}-{genome_sha[:16]}.npy"

    def get(self, mkey: str, genome_sha: str) -> np.ndarray | None:
        p = self.path(mkey, genome_sha)
        return np.load(p).astype(np.float64) if p is not None and p.is_file() else None

    def put(self, mkey: str, genome_sha: str, bits: np.ndarray) -> None:
        p = self.path(mkey, genome_sha)
        if p is None:
            return
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_suffix(".tmp.npy")
        np.save(tmp, bits.astype(np.float32))
        tmp.replace(p)


# ------------------------------------------------------------------------------------------------- the run


def fit_markov(
    manifest: dict, corpus: Path, max_k: int, limit: int | None, log, cache: Path | None = None
) -> tuple[MarkovModel, float, int, str]:
    """Counts on every ``train`` genome (streamed, one genome in memory at a time), (k, alpha) on ``val``.
    With ``cache``, the counts are kept there (keyed by the train genomes' sha256, ``max_k`` and ``limit``) and a
    later run reads them instead of counting again."""
    entries = manifest["genomes"]
    train = [e for e in entries if e["split"] == "train"]
    val = [e for e in entries if e["split"] == "val"]
    t0 = time.time()
    n_train = [0]

    def seqs():
        for e in train:
            for r in read_genome(corpus / e["file"], limit):
                n_train[0] += len(r)
                yield r

    markov = _cached_counts(cache, train, max_k, limit, n_train) if cache else None
    if markov is None:
        markov = MarkovModel.fit(seqs(), max_k)
        if cache:
            _save_counts(cache, train, max_k, limit, markov, n_train[0])
    fit_s = time.time() - t0
    if val:
        chosen_on = "val"
        val_seqs = [r for e in val for r in read_genome(corpus / e["file"], limit)]
    else:  # a corpus without val genomes: choose on the training genomes (said in the output)
        chosen_on = "train (no val genomes)"
        val_seqs = [r for e in train for r in read_genome(corpus / e["file"], limit)]
    grid = markov.grid_bits(val_seqs, ALPHAS)
    (k, alpha), (b, n) = min(grid.items(), key=lambda kv: kv[1][0] / max(kv[1][1], 1))
    markov.k = k
    # the same choice made per kind of genome, on the val genomes of that kind (bacteria prefer a lower order
    # than the human span that holds most val bases); a kind with no val genome keeps the global choice
    markov.by_kind = {}
    for kind in sorted({e["kind"] for e in val}):
        kseqs = [r for e in val if e["kind"] == kind for r in read_genome(corpus / e["file"], limit)]
        (kk, ka), (kb, kn) = min(markov.grid_bits(kseqs, ALPHAS).items(), key=lambda kv: kv[1][0] / max(kv[1][1], 1))
        markov.by_kind[kind] = (kk, ka)
        log(
            f"# Markov for {kind}: chosen on {len(kseqs)} val record(s) of that kind: k={kk} alpha={ka} ({kb / kn:.4f})"
        )
    log(
        f"# Markov: counts of orders 0..{max_k} on {len(train)} train genomes ({n_train[0]:,} bases) in {fit_s:.0f}s; "
        f"chosen on {chosen_on}: k={k} alpha={alpha} ({b / n:.4f} bits/base; grid {time.time() - t0 - fit_s:.0f}s)"
    )
    log(
        "# val bits/base by k (best alpha): "
        + ", ".join(
            f"{kk}:{min(v[0] / max(v[1], 1) for (k2, _), v in grid.items() if k2 == kk):.4f}" for kk in range(max_k + 1)
        )
    )
    return markov, alpha, n_train[0], chosen_on


def _counts_path(cache: Path, train: list[dict], max_k: int, limit: int | None) -> Path:
    import hashlib

    key = hashlib.sha256(f"{max_k} {limit} ".encode() + " ".join(e["sha256"] for e in train).encode())
    return cache / f"markov-{key.hexdigest()[:16]}.npz"


def _cached_counts(cache: Path, train: list[dict], max_k: int, limit: int | None, n_train: list[int]):
    path = _counts_path(cache, train, max_k, limit)
    if not path.is_file():
        return None
    with np.load(path) as z:
        markov = MarkovModel.__new__(MarkovModel)
        markov.k, markov.counts = max_k, [z[f"order{o}"] for o in range(max_k + 1)]
        n_train[0] = int(z["train_bases"])
    return markov


def _save_counts(cache: Path, train: list[dict], max_k: int, limit: int | None, markov, n: int) -> None:
    path = _counts_path(cache, train, max_k, limit)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.npz")
    np.savez(tmp, train_bases=n, **{f"order{o}": c for o, c in enumerate(markov.counts)})
    tmp.replace(path)


ONLINE_KS, ONLINE_ALPHAS = (2, 3, 4, 5, 6, 8, 10, 12), (0.5, 1.0)


def choose_online(manifest: dict, corpus: Path, limit: int | None, log) -> dict[str, tuple[int, float]]:
    """(k, alpha) of the online Markov model per kind, chosen on the val genomes of that kind ('*': on all)."""
    val = [e for e in manifest["genomes"] if e["split"] == "val"] or [
        e for e in manifest["genomes"] if e["split"] == "train"
    ]
    genomes = {e["name"]: (e["kind"], read_genome(corpus / e["file"], limit)) for e in val}
    sums: dict[tuple[str, int, float], list[float]] = {}
    for kind, recs in genomes.values():
        m = scored_mask(recs)
        for k in ONLINE_KS:
            for a in ONLINE_ALPHAS:
                b = online_markov_bits(recs, k, a)[m]
                for key in ((kind, k, a), ("*", k, a)):
                    acc = sums.setdefault(key, [0.0, 0])
                    acc[0], acc[1] = acc[0] + float(b.sum()), acc[1] + len(b)
    chosen = {}
    for kind in sorted({key[0] for key in sums}):
        (_, k, a), (b, n) = min(
            ((key, v) for key, v in sums.items() if key[0] == kind), key=lambda kv: kv[1][0] / kv[1][1]
        )
        chosen[kind] = (k, a)
        log(f"# online Markov for {kind}: k={k} alpha={a} ({b / n:.4f} bits/base on its val genomes)")
    return chosen


def run(args, log=print) -> dict:
    import json

    t_start = time.time()
    manifest = json.loads(Path(args.manifest).read_text(encoding="utf-8"))
    corpus = Path(args.corpus)
    splits = {"test": ("test",), "val": ("val",), "both": ("test", "val")}[getattr(args, "split", None) or "test"]
    if args.val:
        splits = ("test", "val")
    panel = [e for e in manifest["genomes"] if e["split"] in splits]
    if getattr(args, "genomes", None):  # a part of the panel: e.g. to fill the cache from two processes
        unknown = sorted(set(args.genomes) - {e["name"] for e in panel})
        if unknown:
            raise SystemExit(f"dna_panel: {', '.join(unknown)}: not a genome of this split")
        panel = [e for e in panel if e["name"] in args.genomes]
    missing = [e["file"] for e in manifest["genomes"] if not (corpus / e["file"]).is_file()]
    if missing:
        raise SystemExit(
            f"dna_panel: {len(missing)} corpus file(s) missing in {corpus} (first: {missing[0]}); "
            "run python -m strandline.data.fetch_corpus"
        )
    cache_dir = None if args.quick or args.cache is None else Path(args.cache)
    markov, alpha, n_train, chosen_on = fit_markov(manifest, corpus, args.max_k, args.quick, log, cache_dir)
    names_given = [Path(m).name for m in args.model]
    if len(set(names_given)) < len(names_given):  # columns are named by folder: two of one name would merge
        dup = next(n for n in names_given if names_given.count(n) > 1)
        raise SystemExit(f"dna_panel: two models are folders named {dup!r}; give each model folder its own name")
    models = [(Path(m).name, load_model(m), model_key(m, args.piece)) for m in args.model]
    cache = ScoreCache(None if args.quick else args.cache)
    online = choose_online(manifest, corpus, args.quick, log)
    names = [f"Markov k={markov.k}", "Markov k by kind", "online Markov", "uniform", *(n for n, _, _ in models)]
    rows = []
    for e in panel:
        t0 = time.time()
        recs = read_genome(corpus / e["file"], args.quick)
        mask = scored_mask(recs)
        rep = repeat_mask(recs) & mask
        bits = {names[0]: np.concatenate([markov.position_bits(r, alpha) for r in recs]), names[3]: None}
        ok_, oa_ = online.get(e["kind"], online["*"])
        bits[names[2]] = online_markov_bits(recs, ok_, oa_)
        kind_k, kind_alpha = markov.by_kind.get(e["kind"], (markov.k, alpha))
        bits[names[1]] = np.concatenate([markov.position_bits(r, kind_alpha, kind_k) for r in recs])
        times = {}
        for name, m, mkey in models:
            t1 = time.time()
            bits[name] = cache.get(mkey, e["sha256"])
            if bits[name] is None:
                bits[name] = model_position_bits(m, recs, args.piece)
                cache.put(mkey, e["sha256"], bits[name])
            times[name] = time.time() - t1
        n = int(mask.sum())
        row = {
            "genome": e["name"],
            "kind": e["kind"],
            "split": e["split"],
            "gc": e.get("gc"),
            "bases": int(sum(len(r) for r in recs)),
            "scored": n,
            "repeat_fraction": float(rep.sum() / max(n, 1)),
            "repeat_positions": int(rep.sum()),
            "bits": {},
            "repeat_bits": {},
            "other_bits": {},
            "model_seconds": times,
        }
        other = mask & ~rep
        for name in names:
            b = bits[name]
            if b is None:
                row["bits"][name] = row["repeat_bits"][name] = row["other_bits"][name] = 2.0
                continue
            if np.isnan(b[mask]).any():
                raise RuntimeError(f"{name} left a scored position of {e['name']} unscored")
            row["bits"][name] = float(b[mask].sum() / max(n, 1))
            row["repeat_bits"][name] = float(b[rep].sum() / rep.sum()) if rep.any() else math.nan
            row["other_bits"][name] = float(b[other].sum() / other.sum()) if other.any() else math.nan
        row["best"] = min(row["bits"], key=row["bits"].get)
        rows.append(row)
        log(
            f"# {e['name']}: {row['bases']:,} bases in {time.time() - t0:.0f}s"
            + "".join(f"; {k} {v:.0f}s ({row['bases'] / max(v, 1e-9) / 1e3:.0f} kb/s)" for k, v in times.items())
        )
    return {
        "names": names,
        "rows": rows,
        "online": {kind: {"k": k, "alpha": a} for kind, (k, a) in online.items()},
        "markov": {
            "k": markov.k,
            "alpha": alpha,
            "max_k": args.max_k,
            "train_bases": n_train,
            "chosen_on": chosen_on,
            "by_kind": {kind: {"k": kk, "alpha": ka} for kind, (kk, ka) in markov.by_kind.items()},
        },  # fmt: skip
        "seconds": time.time() - t_start,
        "quick": args.quick,
    }


def _f(x: float) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.4f}"


def tables(res: dict) -> tuple[list[str], list[list[str]], list[str], list[list[str]]]:
    """(columns, rows) of the bits table and of the repeats table."""
    names, rows = res["names"], res["rows"]
    cols = ["genome", "kind", "GC%", "bases", *names, "best"]
    body = [
        [r["genome"], r["kind"], f"{r['gc']:.1f}", f"{r['bases']:,}", *(_f(r["bits"][n]) for n in names), r["best"]]
        for r in rows
    ]
    bact = [r for r in rows if r["kind"] == "bacterium"]
    if bact:
        means = {n: float(np.mean([r["bits"][n] for r in bact])) for n in names}
        body.append(
            [
                f"mean over {len(bact)} bacteria",
                "",
                "",
                f"{sum(r['bases'] for r in bact):,}",
                *(_f(means[n]) for n in names),
                min(means, key=means.get),
            ]
        )
    models = names[4:]
    rcols = ["genome", "repeat positions"]
    for m in models:
        rcols += [f"{m} on repeats", f"{m} gain on repeats", f"{m} gain elsewhere"]
    rcols += [f"{names[1]} on repeats"]
    rbody = []
    for r in rows:
        cells = [r["genome"], f"{r['repeat_positions']:,} ({100 * r['repeat_fraction']:.2f}%)"]
        for m in models:
            cells += [
                _f(r["repeat_bits"][m]),
                _f(r["repeat_bits"][names[1]] - r["repeat_bits"][m]),
                _f(r["other_bits"][names[1]] - r["other_bits"][m]),
            ]
        cells.append(_f(r["repeat_bits"][names[1]]))
        rbody.append(cells)
    return cols, body, rcols, rbody


def markdown(cols: list[str], body: list[list[str]]) -> str:
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    lines += ["| " + " | ".join(c) + " |" for c in body]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--manifest", type=Path, default=DEFAULT_MANIFEST, help="corpus manifest (data/corpus.json)")
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS, help="folder of the fetched .fa.gz files")
    ap.add_argument(
        "--model",
        action="append",
        help="model directory (repeatable; default: the shipped data/models/dna-corpus-tbptt)",
    )
    ap.add_argument("--val", action="store_true", help="also score the val genomes (as --split both)")
    ap.add_argument("--split", choices=["test", "val", "both"], default="test",
                    help="which genomes to score: the test panel (default), or the val genomes (for selection)")  # fmt: skip
    ap.add_argument("--genomes", nargs="+", help="score only these genomes of the split (by manifest name)")
    ap.add_argument("--max-k", type=int, default=MAX_K, help=f"highest Markov order counted (default {MAX_K})")
    ap.add_argument("--piece", type=int, default=65536, help="bases per chunked model call (state carried)")
    ap.add_argument("--quick", type=int, metavar="N", help="smoke test: only the first N bases of every genome")
    ap.add_argument("--save", action="store_true", help="write benchmarks/results/dna_panel.json")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    ap.add_argument("--cache", type=Path, default=ROOT / "runs" / "panel-cache",
                    help="per-position bits of models already scored (default runs/panel-cache; not with --quick)")  # fmt: skip
    args = ap.parse_args(argv)
    given = args.model or []
    args.model = given or [str(DEFAULT_MODEL)]
    torch.set_num_threads(args.threads)
    res = run(args)
    cols, body, rcols, rbody = tables(res)
    print()
    print(markdown(cols, body))
    print()
    print(
        f"Natural repeats: positions whose {REPEAT_K} preceding bases occur >= {REPEAT_GAP} bases earlier in the "
        f"same genome; gain = {res['names'][1]} bits minus the model's (positive: the model is better)."
    )
    print()
    print(markdown(rcols, rbody))
    print(f"\n# total {res['seconds']:.0f}s" + (f" (--quick {args.quick})" if args.quick else ""))
    if args.save:
        from benchmarks.results import record

        m = res["markov"]
        cmd = "python benchmarks/dna_panel.py --save" + "".join(f" --model {p}" for p in given)
        if args.val or args.split != "test":
            cmd += " --split " + ("both" if args.val else args.split)
        if args.quick:
            cmd += f" --quick {args.quick}"
        rep = {r["genome"]: r for r in res["rows"]}
        extra_cols = ["repeat positions"] + [f"{n} gain on repeats / elsewhere" for n in res["names"][4:]]
        rows = []
        for cells, r in zip(body, [*res["rows"], None], strict=False):
            if r is None:
                rows.append([*cells, "", *("" for _ in res["names"][4:])])
                continue
            r = rep[r["genome"]]
            gains = [
                f"{_f(r['repeat_bits'][res['names'][1]] - r['repeat_bits'][n])} / "
                f"{_f(r['other_bits'][res['names'][1]] - r['other_bits'][n])}"
                for n in res["names"][4:]
            ]
            rows.append([*cells, f"{r['repeat_positions']:,} ({100 * r['repeat_fraction']:.2f}%)", *gains])
        path = record(
            "dna_panel",
            "DNA models on the held-out genome panel (bits/base, whole genomes)",
            cmd,
            cols + extra_cols,
            rows,
            machine=(
                f"The project's build VM: 2 CPU cores shared with other jobs; {args.threads} thread(s). "
                f"Total {res['seconds']:.0f}s."
            ),
            caveats=[
                f"Markov: add-alpha orders 0..k counted on the corpus' train split ({m['train_bases']:,} bases), "
                f"k={m['k']} and alpha={m['alpha']} chosen on {m['chosen_on']} (orders up to {m['max_k']} tried); "
                "'Markov k by kind': the same counts, k and alpha chosen on the val genomes of the genome's own kind ("
                + ", ".join(f"{kind} k={c['k']} alpha={c['alpha']}" for kind, c in m["by_kind"].items())
                + "; a kind with no val genome keeps the global choice).",
                "'online Markov': an order-k model counted on the genome itself as it is read (no training), the "
                "adaptive context model of DNA compressors; k and alpha chosen on the val genomes of the same kind ("
                + ", ".join(f"{kind} k={c['k']} alpha={c['alpha']}" for kind, c in res["online"].items() if kind != "*")
                + "; other kinds: the choice on all val genomes).",
                "Each genome is read whole; every A/C/G/T base but a record's first is scored, by every column.",
                f"Repeat positions: the {REPEAT_K} bases before them occur >= {REPEAT_GAP} bases earlier in the same "
                "genome; gain = 'Markov k by kind' bits minus the model's there / on the other positions.",
                "Model columns are model directories: their cards list what they were trained on.",
            ],
        )
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
