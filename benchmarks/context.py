"""Does a model use its context? The context curve and the repeat probe, for any model directory or checkpoint.

(a) ``curve``: held-out bits/token against position in the window (as HyenaDNA plots it). Windows of ``--window``
    tokens are cut from the input; each is read from the zero state; the loss at positions 1-2, 3-4, 5-8, ...
    is averaged over windows. A model that uses long context keeps going down to the right.
(b) ``repeat``: a real segment A (300 and 2,000 bases) reappears after d = 1k, 10k, 100k bases of other real
    sequence: ``P A F A`` with a 1,000-base real prefix P (so both copies of A are read with a warm state) and
    a filler F of d bases from elsewhere in the same genome. "gain" = bits/base on the first copy of A minus bits
    on the second; a model that remembers what it read d bases ago gains, one that does not gains 0.
    Linear models read the whole stream (state carried); a softmax model reads it with a sliding window of
    ``--softmax-window`` tokens (its training context): every scored token sees between half and all of the
    window, so nothing older than the window can help it. A model with ``window: W`` in its config (softmax
    with a constant-size KV buffer, or the window + linear hybrid) streams like an RNN: its window is its own.

(c) ``implant``: the repeat probe at genome scale. ``--copies`` real segments of the last ``--segments`` length
    are copied over a real sequence d bases after their own end, for every ``--distances`` d at once (up to
    10 Mb on a human chromosome), and the sequence is read once, as a scan reads it. "gain" as in (b); the
    state's size in bytes is printed beside it: it does not grow with the stream.

(d) ``copy``: in-window copying, the probe's in-distribution twin: held-out windows (the config's val and test
    spans) each get one synthetic repeat exactly as training windows do with ``repeat_prob``
    (``strandline.data.dna.insert_repeat``: a segment copied later into the same window, lightly mutated); "gain" = mean
    bits/base on the rest of the window minus on the copied bases (after the first ``--skip`` of each copy,
    which a copier needs to find its place). A model that learned to copy from its training repeats gains
    here even if it cannot reach across the probe's 1k-100k distances; one that did not gains ~0.

    python -m strandline.data.fetch_genomes      # GRCh37 chr20: a genome the shipped (bacterial) models never saw
    python benchmarks/context.py repeat --model data/models/dna-corpus-tbptt --fasta data/cache/genomes/GRCh37-chr20.fa.gz
    python benchmarks/context.py curve --model data/models/dna-corpus-tbptt --whole data/cache/corpus/s_aureus_N315.fa.gz --window 131072
    python benchmarks/context.py curve --model data/models/summarizer --text data/documents/2022.acl-long.286.txt
    python benchmarks/context.py implant --model data/models/dna-corpus-tbptt \\
        --fasta data/cache/corpus/GRCh37-chr20.test.fa.gz --distances 1000 100000 1000000 10000000
    python benchmarks/context.py copy --model data/models/dna-corpus-tbptt --config configs/dna/tiny-cpu.yaml
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from strandline.data.tokenizers import A, N  # noqa: E402

LOG2 = math.log(2.0)


@torch.no_grad()
def token_bits(model, ids: np.ndarray, piece: int = 65536) -> np.ndarray:
    """Bits of token i+1 given tokens 0..i, for a whole sequence read as one stream: [len(ids) - 1] float64."""
    model.eval()
    x = torch.as_tensor(np.asarray(ids, dtype=np.int64))[None]
    out, state = [], None
    for a in range(0, x.shape[1] - 1, piece):
        y = x[:, a + 1 : a + piece + 1]
        logits, state = model(x[:, a : a + y.shape[1]], state, donate=True)
        lp = torch.log_softmax(logits.double(), -1)
        out.append((-lp.gather(-1, y[..., None])[0, :, 0] / LOG2).numpy())
    return np.concatenate(out)


@torch.no_grad()
def token_bits_sliding(model, ids: np.ndarray, window: int) -> np.ndarray:
    """Like ``token_bits`` but every token sees at most ``window`` tokens: blocks of window/2 are scored after a
    fresh read of the window/2 tokens before them (so each scored token sees window/2 .. window tokens)."""
    model.eval()
    half = max(1, window // 2)
    x = torch.as_tensor(np.asarray(ids, dtype=np.int64))[None]
    out = []
    for a in range(0, x.shape[1] - 1, half):
        lo, hi = max(0, a - half), min(a + half, x.shape[1] - 1)
        logits, _ = model(x[:, lo:hi])
        lp = torch.log_softmax(logits[:, a - lo :].double(), -1)
        y = x[:, a + 1 : hi + 1]
        out.append((-lp.gather(-1, y[..., None])[0, :, 0] / LOG2).numpy())
    return np.concatenate(out)


def bits_for(model, ids: np.ndarray, softmax_window: int) -> np.ndarray:
    """Per-token bits as the model would stream them: whole stream for RNNs and for models with a ``window`` of
    their own (a constant-size KV buffer: the sliding window is in the model), a sliding read of
    ``softmax_window`` tokens for plain softmax (its KV cache would grow with the stream)."""
    if model.config.attention == "softmax" and not getattr(model.config, "window", 0):
        return token_bits_sliding(model, ids, softmax_window)
    return token_bits(model, ids)


def non_bases_before(ids: np.ndarray) -> np.ndarray:
    """[len(ids) + 1] int32: how many non-A/C/G/T tokens precede each position (computed once per genome)."""
    return np.concatenate([[0], np.cumsum((ids < A) | (ids > A + 3), dtype=np.int32)])


def clean_starts(ids: np.ndarray, length: int, candidates: np.ndarray | None = None, bad=None) -> np.ndarray:
    """Start positions s (among ``candidates``, default all) with ids[s : s+length] all A/C/G/T."""
    bad = non_bases_before(ids) if bad is None else bad
    starts = np.arange(0, len(ids) - length + 1) if candidates is None else candidates
    return starts[bad[starts + length] == bad[starts]]


def repeat_probe(
    model, ids: np.ndarray, seg: int, d: int, trials: int, softmax_window: int, seed: int = 0, bad=None
) -> dict:
    """Mean bits/base on the first and the second copy of a repeated segment; see the module docstring."""
    rng = np.random.default_rng([seed, seg, d])
    prefix = 1000
    need = prefix + seg + d
    candidates = np.sort(rng.choice(len(ids) - need + 1, min(len(ids) - need + 1, 100 * trials), replace=False))
    starts = clean_starts(ids, need, candidates, bad)
    if len(starts) < trials:
        raise ValueError(f"the sequence has too few {need:,}-base N-free regions for this probe")
    first, second = [], []
    for s in rng.choice(starts, trials, replace=False):
        p, a, f = ids[s : s + prefix], ids[s + prefix : s + prefix + seg], ids[s + prefix + seg : s + need]
        bits = bits_for(model, np.concatenate([p, a, f, a]), softmax_window)  # bits[i] is about token i+1
        first.append(bits[prefix - 1 : prefix - 1 + seg].mean())
        second.append(bits[need - 1 : need - 1 + seg].mean())
    b1, b2 = float(np.mean(first)), float(np.mean(second))
    return {"first": b1, "second": b2, "gain": b1 - b2}


def place_implants(
    ids: np.ndarray, seg: int, distances: list[int], copies: int, rng: np.random.Generator, bad=None
) -> list[tuple[int, int, int]]:
    """(distance, source, copy) starts: ``copies`` segments of ``seg`` bases per distance, each copied ``distance``
    bases after its own end, every interval (sources and copies) disjoint from the others and N-free at the source."""
    bad = non_bases_before(ids) if bad is None else bad
    taken = np.zeros(len(ids) + 1, bool)  # a base already used by a placed source or copy
    out = []
    for d in sorted(distances, reverse=True):  # the longest distances have the fewest places: place them first
        need = 2 * seg + d
        if need > len(ids):
            raise ValueError(f"the sequence ({len(ids):,} bases) is too short for a {d:,}-base distance")
        cands = clean_starts(ids, seg, rng.permutation(len(ids) - need + 1)[: 200 * copies], bad)
        placed = 0
        for s in cands:
            c = s + seg + d
            if taken[s : s + seg].any() or taken[c : c + seg].any():
                continue
            taken[s : s + seg] = taken[c : c + seg] = True
            out.append((d, int(s), int(c)))
            placed += 1
            if placed == copies:
                break
        if placed < copies:
            raise ValueError(f"found room for only {placed} of {copies} {seg:,}-base copies at distance {d:,}")
    return out


def implant_probe(
    model, ids: np.ndarray, seg: int, distances: list[int], copies: int, skip: int = 32, seed: int = 0
) -> dict[int, dict]:
    """The repeat probe at genome scale, in one stream: real segments are copied over the real sequence
    ``d`` bases after their own end, for every d at once, and the whole sequence is read as ``strandline scan``
    reads it (one state, chunked pieces). Per distance: mean bits on the sources, on their copies (after the
    first ``skip`` bases of each, where a copier finds its place) and the gain. Each copy is unique in the
    stream at its distance, and the sequence between is the genome's own."""
    rng = np.random.default_rng([seed, seg, copies])
    bad = non_bases_before(ids)
    places = place_implants(ids, seg, distances, copies, rng, bad)
    x = ids.copy()
    for _, s, c in places:
        x[c : c + seg] = ids[s : s + seg]
    bits = token_bits(model, x)  # bits[i] is about token i+1
    res = {}
    for d in sorted(distances):
        first = [bits[s - 1 + skip : s - 1 + seg] for dd, s, _ in places if dd == d]
        second = [bits[c - 1 + skip : c - 1 + seg] for dd, _, c in places if dd == d]
        b1, b2 = float(np.mean(np.concatenate(first))), float(np.mean(np.concatenate(second)))
        res[d] = {"first": b1, "second": b2, "gain": b1 - b2}
    return res


def state_bytes(model) -> int:
    """Bytes of the model's scan state for one sequence (every tensor of ``init_state(1)``), whatever its length."""
    return sum(t.numel() * t.element_size() for t in _tensors(model.init_state(1)))


def _tensors(value) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    return []


def context_curve(model, seqs: list[np.ndarray], window: int, max_windows: int = 16) -> list[tuple[int, int, float]]:
    """(lo, hi, mean bits) over target positions lo..hi of each window (1-based, powers of two)."""
    wins = [s[a : a + window + 1] for s in seqs for a in range(0, len(s) - window, window)]
    if not wins:
        raise ValueError(f"no held-out sequence is longer than the window ({window})")
    keep = np.linspace(0, len(wins) - 1, min(max_windows, len(wins))).round().astype(int)
    total, count = np.zeros(window), np.zeros(window)
    for i in keep:
        w = wins[i]
        bits = token_bits(model, w)  # bits[j]: target at position j+1 given j+1 tokens
        ok = (w[1:] >= A) & (w[1:] <= A + 3) if model.meta.get("tokenizer") == "dna" else np.ones(len(bits), bool)
        total[: len(bits)] += np.where(ok, bits, 0)
        count[: len(bits)] += ok
    rows, lo = [], 1
    while lo <= window:
        hi = min(window, 2 * lo - 1)
        n = count[lo - 1 : hi].sum()
        rows.append((lo, hi, float(total[lo - 1 : hi].sum() / max(n, 1))))
        lo *= 2
    return rows


def copied_and_rest(bits: np.ndarray, dst: int, length: int, skip: int) -> tuple[np.ndarray, np.ndarray]:
    """Split a window's per-token bits (``bits[i]`` is about token i+1) into the copied bases dst+skip ..
    dst+length-1 and all the others."""
    mask = np.zeros(len(bits), bool)
    mask[max(0, dst + skip - 1) : dst + length - 1] = True
    return bits[mask], bits[~mask]


def window_copy_gain(
    model, seqs: list[np.ndarray], window: int, n: int, min_len: int, max_len: int, mutation: float, skip: int,
    seed: int = 0,
) -> dict:  # fmt: skip
    """Bits/base on the copied bases vs the rest over ``n`` held-out windows with one synthetic repeat each."""
    from strandline.data.dna import insert_repeat

    rng = np.random.default_rng(seed)
    pool = [s for s in seqs if len(s) > window]
    if not pool:
        raise ValueError(f"no held-out sequence is longer than the window ({window})")
    copied, rest = [], []
    for _ in range(n):
        s = pool[int(rng.integers(len(pool)))]
        a = int(rng.integers(0, len(s) - window))
        ids, where = insert_repeat(s[a : a + window], rng, min_len, max_len, mutation)
        if where is None:
            raise ValueError(f"a {window}-token window cannot hold two copies of {min_len} tokens")
        c, r = copied_and_rest(token_bits(model, ids), where[1], where[2], skip)
        copied.append(c)
        rest.append(r)
    c, r = np.concatenate(copied), np.concatenate(rest)
    return {"copied": float(c.mean()), "rest": float(r.mean()), "gain": float(r.mean() - c.mean()), "bases": len(c)}


def _dna_ids(fasta: str) -> np.ndarray:
    """All records of a FASTA concatenated with N between them (probe segments never cross an N)."""
    from strandline.data.dna import Genome

    g = Genome([fasta])
    parts = []
    for name, length in g.lengths.items():
        parts += [np.asarray(g.fetch(name, 0, length)), np.array([N], np.uint8)]
    return np.concatenate(parts)


def save_implant_record(args, n: int, seg: int, rows: list[list[str]]) -> None:
    from benchmarks.results import record

    cmd = (f"python benchmarks/context.py implant --save --fasta {args.fasta} --segments {seg} --copies {args.copies}"
           f" --distances {' '.join(map(str, args.distances))}" + (f" --limit {args.limit}" if args.limit else "")
           + " --model " + " ".join(args.model))  # fmt: skip
    path = record(
        "repeat-probe-genome",
        "Repeat probe at genome scale: bits/base gained on a copy read again d bases later, in one stream",
        cmd,
        ["model", "d (bases)", "1st copy", "2nd copy", "gain", "state bytes"],
        rows,
        machine=f"The project's build VM (2 CPU cores, shared); {args.threads} thread(s).",
        caveats=[
            f"{args.copies} real {seg:,}-base segments per distance, copied over the real sequence d bases after "
            f"their own end, all distances in one stream of {n:,} bases ({args.fasta}); the first 32 bases of "
            "each copy are not scored (a copier first finds its place).",
            "State bytes: every tensor of the model's state for one sequence, in float32 as this probe reads it (`strandline scan` keeps float64 by default: the k-mer counts take twice the bytes); it is the same at any position.",
        ],
    )
    print(f"wrote {path}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("what", choices=["curve", "repeat", "implant", "copy"])
    ap.add_argument("--model", nargs="+", required=True, help="model directories or .ckpt files")
    ap.add_argument("--fasta", help="DNA for the probe (repeat) or the curve (default: the config's held-out spans)")
    ap.add_argument("--config", default="configs/dna/tiny-cpu.yaml", help="curve: the training split to hold out")
    ap.add_argument("--text", help="curve: a UTF-8 text file instead of DNA (byte-level models)")
    ap.add_argument("--window", type=int, default=4096, help="curve: window length")
    ap.add_argument("--max-windows", type=int, default=16, help="curve: windows averaged (evenly spaced)")
    ap.add_argument(
        "--whole", help="curve: a FASTA read whole (a held-out genome) instead of a config's held-out spans"
    )
    ap.add_argument("--segments", type=int, nargs="+", default=[300, 2000])
    ap.add_argument("--distances", type=int, nargs="+", default=[1000, 10_000, 100_000])
    ap.add_argument("--trials", type=int, default=8)
    ap.add_argument("--copies", type=int, default=4, help="implant: segments copied per distance")
    ap.add_argument("--limit", type=int, help="implant: only the first LIMIT bases of the FASTA")
    ap.add_argument("--save", action="store_true", help="implant: write benchmarks/results/repeat-probe-genome.json")
    ap.add_argument("--softmax-window", type=int, default=256, help="a softmax model's training context")
    ap.add_argument("--copy-window", type=int, default=2048, help="copy: window length")
    ap.add_argument("--copy-windows", type=int, default=32, help="copy: how many held-out windows")
    ap.add_argument("--copy-len", type=int, nargs=2, default=[50, 1000], metavar=("MIN", "MAX"),
                    help="copy: repeat length bounds (log-uniform, as data.repeat_min_len / repeat_max_len)")  # fmt: skip
    ap.add_argument("--copy-mutation", type=float, default=0.01, help="copy: per-base substitution in the copy")
    ap.add_argument("--skip", type=int, default=16, help="copy: first bases of each copy not scored")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    from strandline.models import load

    models = {p: load(p) for p in args.model}
    if args.what == "repeat":
        if not args.fasta:
            ap.error("repeat needs --fasta")
        ids = _dna_ids(args.fasta)
        bad = non_bases_before(ids)
        print(f"# repeat probe on {args.fasta} ({len(ids):,} bases), {args.trials} trials per cell; bits/base")
        print(f"{'model':<28} {'segment':>7} {'d':>8} {'1st copy':>9} {'2nd copy':>9} {'gain':>7}")
        for p, m in models.items():
            for seg in args.segments:
                for d in args.distances:
                    r = repeat_probe(m, ids, seg, d, args.trials, args.softmax_window, bad=bad)
                    print(f"{Path(p).name:<28} {seg:>7} {d:>8,} {r['first']:>9.3f} {r['second']:>9.3f} "
                          f"{r['gain']:>7.3f}", flush=True)  # fmt: skip
        return
    if args.what == "implant":
        if not args.fasta:
            ap.error("implant needs --fasta")
        ids = _dna_ids(args.fasta)[: args.limit]
        seg = args.segments[-1]
        print(f"# repeat probe in one stream: {args.fasta} ({len(ids):,} bases), {args.copies} real {seg:,}-base "
              f"segments copied d bases after their own end, for every d; one state over the whole stream; bits/base")  # fmt: skip
        print(f"{'model':<28} {'d':>11} {'1st copy':>9} {'2nd copy':>9} {'gain':>7} {'state bytes':>12}")
        rows = []
        for p, m in models.items():
            res = implant_probe(m, ids, seg, args.distances, args.copies)
            for d, r in res.items():
                print(f"{Path(p).name:<28} {d:>11,} {r['first']:>9.3f} {r['second']:>9.3f} {r['gain']:>7.3f} "
                      f"{state_bytes(m):>12,}", flush=True)  # fmt: skip
                rows.append([Path(p).name, f"{d:,}", f"{r['first']:.3f}", f"{r['second']:.3f}", f"{r['gain']:.3f}",
                             f"{state_bytes(m):,}"])  # fmt: skip
        if args.save:
            save_implant_record(args, len(ids), seg, rows)
        return
    if args.what == "copy":
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from dna_quality import load_split, span_seqs

        dm = load_split(args.config, [args.fasta] if args.fasta else None)
        seqs = span_seqs(dm, "val") + span_seqs(dm, "test")
        lo, hi = args.copy_len
        print(f"# in-window copying: {args.copy_windows} held-out windows of {args.copy_window} bases from "
              f"{args.config}, one repeat each ({lo}-{hi} bases, {args.copy_mutation:g} mutated); bits/base")  # fmt: skip
        print(f"{'model':<28} {'copied':>8} {'rest':>8} {'gain':>7} {'bases':>8}")
        for p, m in models.items():
            r = window_copy_gain(m, seqs, args.copy_window, args.copy_windows, lo, hi, args.copy_mutation, args.skip)
            print(f"{Path(p).name:<28} {r['copied']:>8.3f} {r['rest']:>8.3f} {r['gain']:>7.3f} {r['bases']:>8,}")
        return
    if args.text:
        from strandline.data.tokenizers import ByteTokenizer

        seqs, source = [ByteTokenizer().encode(Path(args.text).read_text(encoding="utf-8"))], args.text
    elif args.whole:  # a genome no model was trained on: every record, whole
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from benchmarks.dna_panel import read_genome

        seqs, source = read_genome(Path(args.whole)), f"every record of {args.whole}"
    else:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from dna_quality import load_split, span_seqs

        dm = load_split(args.config, [args.fasta] if args.fasta else None)
        seqs, source = span_seqs(dm, "val") + span_seqs(dm, "test"), f"held-out spans of {args.config}"
    curves = {p: context_curve(m, seqs, args.window, args.max_windows) for p, m in models.items()}
    print(f"# context curve: bits/token by position in a {args.window}-token window read from the zero state; {source}")
    print(f"{'positions':>13} " + " ".join(f"{Path(p).name[:18]:>18}" for p in curves))
    for i, (lo, hi, _) in enumerate(next(iter(curves.values()))):
        print(f"{f'{lo}-{hi}':>13} " + " ".join(f"{c[i][2]:>18.4f}" for c in curves.values()))


if __name__ == "__main__":
    main()
