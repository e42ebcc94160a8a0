"""Byte LMs on whole held-out long documents: bits/byte streamed from each document's start, by source and by
position, beside a universal compressor and the byte unigram.

    python -m strandline.data.fetch_summaries && python -m strandline.data.fetch_longtext   # the documents
    OMP_NUM_THREADS=1 python benchmarks/text_long.py --model runs/models/text-long-131k --model ... [--save]

Every document of ``--val`` (default ``data/cache/longtext/long-val.jsonl``: three whole manuals no recipe trains
on, and the ACLSum val papers) is read as one stream (``BOS bytes``) with the state carried from its start, as the
summarizer reads a document; bits are scored on every byte after the first. Reported per model:

- bits/byte on the manuals and on the papers (pooled over bytes), and the same read in independent
  ``--window``-byte tiles from a fresh state (as a short-window recipe trains);
- the context curve: bits/byte by position in the document (what reading further into a document buys).

Baselines on the same bytes: xz (LZMA preset 9e, each document compressed alone: a universal compressor that
learns the document as it reads it) and the byte unigram counted on ``--train``.
"""

from __future__ import annotations

import argparse
import json
import lzma
import math
import sys
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.context import token_bits  # noqa: E402
from strandline.models import load  # noqa: E402

BUCKETS = (0, 512, 4096, 32768, 131072, 1 << 40)  # position ranges of the context curve
SPANS = tuple(zip(BUCKETS[:-1], BUCKETS[1:], strict=True))


def bucket_name(a: int, b: int) -> str:
    def k(n: int) -> str:
        return f"{n // 1024}k" if n >= 1024 else str(n)

    return f"{k(a)}+" if b >= 1 << 40 else f"{k(a)}-{k(b)}"


def load_docs(path: Path) -> list[dict]:
    if not path.is_file():
        raise SystemExit(f"{path} is missing: run `python -m strandline.data.fetch_longtext` first")
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def kind_of(doc: dict) -> str:
    return "papers" if doc["source"] == "aclsum" else "manuals"


def ids_of(text: str) -> np.ndarray:
    from strandline.data.tokenizers import ByteTokenizer

    tok = ByteTokenizer()
    return np.concatenate([[tok.bos_id], tok.encode(text)]).astype(np.int64)


@torch.no_grad()
def windowed_bits(model, ids: np.ndarray, window: int) -> np.ndarray:
    """Bits of token i+1 read in independent ``window``-token tiles from a fresh state: [len(ids) - 1]."""
    out = np.empty(len(ids) - 1)
    x = torch.as_tensor(ids)
    for a in range(0, len(ids) - 1, window * 64):  # 64 tiles a forward
        b = min(a + window * 64, len(ids) - 1)
        starts = list(range(a, b, window))
        full = [s for s in starts if s + window <= len(ids) - 1]
        if full:
            tiles = torch.stack([x[s : s + window + 1] for s in full])
            lp = torch.log_softmax(model(tiles[:, :-1])[0].double(), -1)
            bits = (-lp.gather(-1, tiles[:, 1:, None])[..., 0] / math.log(2)).numpy()
            for s, row in zip(full, bits, strict=True):
                out[s : s + window] = row
        for s in starts[len(full) :]:  # the short last tile
            t = x[s:][None]
            lp = torch.log_softmax(model(t[:, :-1])[0].double(), -1)
            out[s:] = (-lp.gather(-1, t[:, 1:, None])[..., 0] / math.log(2))[0].numpy()
    return out


def unigram_logp(train: list[dict]) -> np.ndarray:
    counts = np.ones(256)
    for d in train:
        counts += np.bincount(np.frombuffer(d["text"].encode(), np.uint8), minlength=256)
    return np.log2(counts / counts.sum())


def xz_bits(text: str) -> float:
    """Bits per byte of ``text`` compressed alone by xz (LZMA2, preset 9e, raw: no container overhead)."""
    raw = text.encode()
    packed = lzma.compress(
        raw, format=lzma.FORMAT_RAW, filters=[{"id": lzma.FILTER_LZMA2, "preset": 9 | lzma.PRESET_EXTREME}]
    )
    return 8 * len(packed) / len(raw)


def measure(model, docs: list[dict], window: int) -> dict:
    """{kind: {"streamed", "windowed", "bytes"}} pooled over bytes, and the context curve sums per bucket."""
    sums: dict[str, list[float]] = {}
    curve = np.zeros((len(BUCKETS) - 1, 2))
    for d in docs:
        ids = ids_of(d["text"])
        s = token_bits(model, ids)
        w = windowed_bits(model, ids, window)
        k = sums.setdefault(kind_of(d), [0.0, 0.0, 0])
        k[0], k[1], k[2] = k[0] + float(s.sum()), k[1] + float(w.sum()), k[2] + len(s)
        if kind_of(d) == "manuals":
            for i, (a, b) in enumerate(SPANS):
                part = s[a:b]
                curve[i] += (float(part.sum()), len(part))
    out = {kind: {"streamed": v[0] / v[2], "windowed": v[1] / v[2], "bytes": v[2]} for kind, v in sums.items()}
    out["curve"] = [c[0] / c[1] if c[1] else None for c in curve]
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", action="append", required=True, help="an exported model directory (repeatable)")
    ap.add_argument("--label", action="append", help="a row name per --model (default: the folder name)")
    ap.add_argument("--val", default=str(ROOT / "data/cache/longtext/long-val.jsonl"))
    ap.add_argument("--train", default=str(ROOT / "data/cache/longtext/long-train.jsonl"))
    ap.add_argument("--window", type=int, default=512, help="tile of the windowed read (the short recipe's window)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--save", action="store_true", help="write the tables to benchmarks/results")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    docs, train = load_docs(Path(args.val)), load_docs(Path(args.train))
    kinds = sorted({kind_of(d) for d in docs})
    logp = unigram_logp(train)
    base: dict[str, dict] = {}
    for kind in kinds:
        mine = [d for d in docs if kind_of(d) == kind]
        n = sum(len(d["text"].encode()) for d in mine)
        uni = -sum(float(logp[np.frombuffer(d["text"].encode(), np.uint8)].sum()) for d in mine) / n
        xz = sum(xz_bits(d["text"]) * len(d["text"].encode()) for d in mine) / n
        base[kind] = {"unigram": uni, "xz": xz, "docs": len(mine), "bytes": n}
        print(f"# {kind}: {len(mine)} documents, {n:,} bytes; xz {xz:.4f}, byte unigram {uni:.4f}", flush=True)
    labels = args.label or [Path(m).name for m in args.model]
    if len(labels) != len(args.model):
        raise SystemExit("give one --label per --model")
    rows = {}
    for label, path in zip(labels, args.model, strict=True):
        model = load(path).eval()
        rows[label] = measure(model, docs, args.window)
        cells = "  ".join(
            f"{k} {rows[label][k]['streamed']:.4f} (tiles {rows[label][k]['windowed']:.4f})" for k in kinds
        )
        print(f"{label}: {cells}", flush=True)
    cols = ["model"] + [f"{k}: streamed" for k in kinds] + [f"{k}: {args.window}-byte tiles" for k in kinds]
    table = [[lab] + [f"{r[k]['streamed']:.4f}" for k in kinds] + [f"{r[k]['windowed']:.4f}" for k in kinds]
             for lab, r in rows.items()]  # fmt: skip
    table.append(["xz -9e (each document alone)"] + [f"{base[k]['xz']:.4f}" for k in kinds] + ["-"] * len(kinds))
    table.append(["byte unigram (train counts)"] + [f"{base[k]['unigram']:.4f}" for k in kinds] + ["-"] * len(kinds))
    ccols = ["model"] + [bucket_name(a, b) for a, b in SPANS]
    ctable = [[lab] + ["-" if v is None else f"{v:.4f}" for v in r["curve"]] for lab, r in rows.items()]
    print("\n" + " | ".join(cols))
    for t in table:
        print(" | ".join(t))
    print("\nbits/byte by position in the held-out manuals (streamed)\n" + " | ".join(ccols))
    for t in ctable:
        print(" | ".join(t))
    if args.save:
        from benchmarks.results import record

        cmd = "OMP_NUM_THREADS=1 python benchmarks/text_long.py " + " ".join(sys.argv[1:] if argv is None else argv)
        what = "; ".join(f"{k}: {base[k]['docs']} documents, {base[k]['bytes']:,} bytes" for k in kinds)
        machine = "The project's build VM (2 CPU cores, shared); 1 thread."
        record("text-long", "Byte LMs on whole held-out long documents (bits/byte)", cmd, cols, table, machine=machine,
               caveats=[f"held out ({Path(args.val).name}): {what}; never trained on.",
                        "streamed: each document read whole with the state carried from its start (as the summarizer "
                        f"reads it); tiles: the same bytes in independent {args.window}-byte windows from a fresh state.",
                        "xz: each document compressed alone (LZMA2 preset 9e, raw stream); byte unigram: counted on "
                        f"{Path(args.train).name}."])  # fmt: skip
        record("text-long-curve", "Byte LMs: bits/byte by position in held-out manuals", cmd, ccols, ctable,
               machine=machine, caveats=["streamed from each manual's start; a column pools the bytes at those "
                                         "positions of every held-out manual."])  # fmt: skip


if __name__ == "__main__":
    main()
