"""Softmax -> RNN conversion: quality recovered per token spent, and the RNN's flat step cost.

For each domain (DNA: configs/dna/tiny-cpu.yaml; text: configs/text/tiny-cpu.yaml) a softmax model trained
with the project's own recipe (``--model.model.attention softmax``) is converted with each method at several
token budgets (fractions of the softmax model's training tokens; configs/convert/*-tiny.yaml otherwise), and
compared with a linear model trained from scratch with the recipe for the same TOTAL budget (softmax tokens +
the largest conversion budget). Columns: held-out bits/token, and the fraction of the softmax model's gain over
the baseline (best k-mer Markov model for DNA, chosen on val as benchmarks/dna_quality.py does; byte unigram
for text) that each model recovers: (baseline - model) / (baseline - softmax). Held-out = the DNA test split
(every 256-base tile) or the first ``--text-eval-batches`` validation batches of text. Then the per-token
``step`` latency (benchmarks/attention.py's timer) and the state bytes at positions 1k, 100k and 1M of the
converted model against the softmax model's KV cache (filled with random keys/values of that length, as in
benchmarks/attention.py), and a PNG of recovery against tokens spent.

    python benchmarks/convert.py --out runs/convert-bench       # trains what is missing (teachers, scratch)
    python benchmarks/convert.py --domains dna --budgets 0.05 0.1 --methods hedgehog
    python benchmarks/convert.py --budgets 0.25 0.5 --skip-scratch --positions --previous runs/convert-bench/results.json
    python benchmarks/convert.py --methods lolcats lolcats:128 hedgehog:64 --budgets 0 0.025 0.05 0.1   # hybrids

A method may name the hybrid student's softmax window (``lolcats:128``; ``lolcats`` alone is W = 64, the others
W = 0); budget 0 is the weight copy alone. Each row also gives the student's state bytes at position 0 (S, z, the
conv buffer and, for the hybrid, its W-token key/value buffer).

Models are cached in ``--out`` (a rerun reuses them and says so). Single-threaded by default
(``--threads``): the numbers are from a loaded shared machine unless stated otherwise.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.attention import _time_steps  # noqa: E402
from benchmarks.dna_quality import choose_markov, span_seqs  # noqa: E402
from strandline.models import load  # noqa: E402
from strandline.models.convert.maps import to_linear  # noqa: E402
from strandline.models.layers import KVState  # noqa: E402
from strandline.tasks.convert import METHODS, ConvertArgs, run_conversion  # noqa: E402
from strandline.tasks.lm import nll_sum  # noqa: E402

DOMAINS = {
    "dna": {"train": "configs/dna/tiny-cpu.yaml", "convert": "configs/convert/dna-tiny.yaml"},
    "text": {"train": "configs/text/tiny-cpu.yaml", "convert": "configs/convert/text-tiny.yaml"},
}
TASK_KEYS = ("distill_len", "lr", "distill_lr", "warmup_steps", "lora_rank", "decay", "long_context")


def _yaml(path: str) -> dict:
    return yaml.safe_load((ROOT / path).read_text())


OVERRIDES: dict[str, object] = {}  # --set KEY=VALUE: dotted keys of the convert config, changed for this run


def convert_cfg(domain: str) -> dict:
    """The domain's convert config with ``OVERRIDES`` applied (``data.init_args.sequential`` reaches inside)."""
    cfg = _yaml(DOMAINS[domain]["convert"])
    for key, value in OVERRIDES.items():
        *path, last = key.split(".")
        node = cfg
        for part in path:
            node = node.setdefault(part, {})
        node[last] = value
    return cfg


def parse_set(item: str) -> tuple[str, object]:
    """'decay=null' -> ('decay', None): the value read as YAML."""
    key, sep, value = item.partition("=")
    if not sep or not key:
        raise SystemExit(f"--set wants KEY=VALUE, got {item!r}")
    return key, yaml.safe_load(value)


def make_data(domain: str, eval_all: bool = False):
    """The data module of the domain's convert config (the same data and split as its training recipe)."""
    spec = convert_cfg(domain)["data"]
    module, _, name = spec["class_path"].rpartition(".")
    args = dict(spec["init_args"])
    if eval_all and "max_eval_windows" in args:
        args["max_eval_windows"] = None  # every tile of the held-out split
    if "paths" in args:
        args["paths"] = [str(ROOT / p) for p in args["paths"]]
    return getattr(importlib.import_module(module), name)(**args)


def recipe_tokens(domain: str) -> tuple[int, int]:
    """(optimizer steps, tokens per step) of the domain's training recipe."""
    cfg = _yaml(DOMAINS[domain]["train"])
    init = cfg["data"]["init_args"]
    return cfg["trainer"]["max_steps"], init["batch_size"] * init.get("window", init.get("seq_len"))


@torch.no_grad()
def heldout_bits(model, dm, domain: str, text_batches: int) -> float:
    """Bits per scored token on the held-out windows (DNA test split, text validation)."""
    model.eval()
    loader = dm.test_dataloader() if domain == "dna" else dm.val_dataloader()
    total, n = 0.0, 0
    for i, batch in enumerate(loader):
        if domain == "text" and i >= text_batches:
            break
        s, c = nll_sum(model(batch["input"])[0], batch["target"])
        total, n = total + float(s), n + int(c)
    return total / n / math.log(2)


def baseline_bits(domain: str, dm, text_batches: int) -> tuple[str, float]:
    """The reference a model's gain is measured from: Markov-k (DNA) or byte unigram (text)."""
    if domain == "dna":
        train, val, test = (span_seqs(dm, s) for s in ("train", "val", "test"))
        markov, alpha, _ = choose_markov(train, val, range(0, 11), [0.01, 0.1, 0.5, 1.0])
        b, n = markov.nll_bits(test, alpha)
        return f"Markov k={markov.k}", b / n
    logp = byte_unigram_logp(dm)
    total, n = 0.0, 0
    for i, batch in enumerate(dm.val_dataloader()):
        if i >= text_batches:
            break
        t = batch["target"][batch["target"] >= 0].numpy()
        total, n = total - float(logp[t].sum()), n + t.size
    return "byte unigram", total / n


def train_recipe(domain: str, attention: str, steps: int, out: Path, window: int = 0) -> Path:
    """Train with the domain's recipe through ``strandline fit`` (cached in ``out``); returns the model dir.

    ``window`` W > 0 (with ``attention`` linear) trains the hybrid from scratch: the recipe with
    ``window: W`` and ``position: rope``, the converted hybrid's architecture.
    """
    model_dir = out / "model"
    if model_dir.is_dir():
        print(f"# reusing {model_dir}")
        return model_dir
    cfg = DOMAINS[domain]["train"]
    run = [sys.executable, "-m", "strandline.app.cli", "fit", "--config", cfg, "--model.model.attention", attention,
           "--trainer.max_steps", str(steps), "--trainer.enable_progress_bar", "false",
           "--trainer.logger", "lightning.pytorch.loggers.CSVLogger", "--trainer.logger.save_dir", str(out / "logs"),
           "--checkpoint.dirpath", str(out / "checkpoints")]  # fmt: skip
    if window:
        run += ["--model.model.window", str(window), "--model.model.position", "rope"]
    env = {**os.environ, "WANDB_MODE": "disabled"}
    t0 = time.time()
    with open(out.with_suffix(".log"), "w") as log:
        subprocess.run(run, cwd=ROOT, env=env, check=True, stdout=log, stderr=subprocess.STDOUT)
        subprocess.run([sys.executable, "-m", "strandline.app.cli", "export", str(out / "checkpoints" / "last.ckpt"),
                        str(model_dir)], cwd=ROOT, env=env, check=True, stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
    print(f"# trained {model_dir} ({attention}, {steps} steps) in {time.time() - t0:.0f} s")
    return model_dir


def parse_method(spec: str) -> tuple[str, int]:
    """'lolcats' -> (lolcats, its default window); 'hedgehog:64' -> (hedgehog, 64): the student's window W."""
    name, _, window = spec.partition(":")
    if name not in METHODS:
        raise SystemExit(f"unknown method {name!r}; choose one of {sorted(METHODS)}")
    return name, int(window) if window else METHODS[name]["window"]


def label(method: str, window: int) -> str:
    """The row name: the method, plus its softmax window when the student is the hybrid."""
    return f"{method} W={window}" if window else method


def convert_once(domain: str, teacher: Path, method: str, window: int, steps: int, out: Path, distill_frac: float):
    """One conversion with the domain's convert config at ``steps`` steps; returns (model, seconds).

    ``steps`` 0 is the weight copy alone (no training): the student as ``to_linear`` builds it.
    """
    cfg = convert_cfg(domain)
    if steps == 0:
        return to_linear(load(teacher), METHODS[method]["feature_map"], decay=cfg.get("decay"), window=window), 0.0
    distill = 0 if method == "t2r" else round(steps * distill_frac)
    args = ConvertArgs(str(teacher), str(out), **{k: cfg[k] for k in TASK_KEYS if k in cfg}, method=method,
                       distill_steps=distill, window=window, steps=steps, val_every=10**9, limit_val_batches=0,
                       log_every=10, accelerator="cpu", progress=False, run_dir=str(out), ckpt_every=10**9)  # fmt: skip
    t0 = time.time()
    model = run_conversion(args, make_data(domain))
    return model, time.time() - t0


STREAM_SPANS = (10_000, 100_000, 1_000_000)  # drift also reported over the stream's first 10 kb, 100 kb, 1 Mb


def stream_of(dm, min_len: int) -> tuple[np.ndarray, np.ndarray]:
    """The longest record of the conversion data, whole, as one stream (ids), and the mask of its held-out
    positions (the val and test spans: never trained on); a record shorter than ``min_len`` is refused."""
    lengths = dm.genome.lengths
    record = max(lengths, key=lengths.get)
    if lengths[record] < min_len:
        raise SystemExit(f"{record}: {lengths[record]:,} bases, fewer than the {min_len:,} the streamed measure reads")
    ids = np.asarray(dm.genome.fetch(record, 0, lengths[record]))
    held = np.zeros(len(ids), bool)
    for split in ("val", "test"):
        for sp in dm.spans[split]:
            if sp.record == record:
                held[sp.start : sp.end] = True
    return ids, held


@torch.no_grad()
def tile_and_stream_bits(model, ids: np.ndarray, window: int) -> tuple[np.ndarray, np.ndarray, int]:
    """(win, streamed, n): per-token bits of ids[1:n+1] read in independent ``window``-token tiles from a fresh
    state (win[p], NaN at each tile's first token) and as one stream from the start (streamed[p]); n is the
    length cut to whole tiles. A softmax model without a window streams with its sliding window
    (``bound_memory``, as the CLI runs it)."""
    from benchmarks.context import token_bits
    from strandline.models.streaming import bound_memory

    model = model.eval()
    n = (len(ids) - 1) // window * window
    tiles = torch.as_tensor(ids[:n].astype(np.int64)).view(-1, window)
    win = np.full(n, np.nan)  # win[p]: bits of token p from its tile alone
    for a in range(0, tiles.shape[0], 256):
        x = tiles[a : a + 256]
        lp = torch.log_softmax(model(x)[0][:, :-1].double(), -1)
        bits = -lp.gather(-1, x[:, 1:, None])[..., 0] / math.log(2)
        win.reshape(-1, window)[a : a + 256, 1:] = bits.numpy()
    if model.config.attention == "softmax" and not model.config.window:
        import copy

        model = copy.deepcopy(model)
        bound_memory(model, window)
    streamed = np.concatenate([[np.nan], token_bits(model, ids[: n + 1])])[:n]
    return win, streamed, n


def windowed_and_streamed(
    model, ids: np.ndarray, held: np.ndarray, window: int, skip: int, spans=STREAM_SPANS, scored=(4, 7)
) -> dict:
    """Bits per base of the same positions read two ways: in independent ``window``-base tiles (as the
    conversion trained and the windowed benchmark scores) and as one stream with the state carried from the
    record's start (as a scan reads a genome), by ``tile_and_stream_bits``. Scored: positions
    ``skip``..window-1 of every tile whose target is a base.

    Returns both means on the held-out positions (``held``), and on all positions of the stream's first
    ``spans`` bases (drift against the distance read, training positions included). ``scored``: the token ids
    (lowest, highest) whose targets count (DNA: A, C, G, T; text: the 256 bytes).
    """
    win, streamed, n = tile_and_stream_bits(model, ids, window)
    keep = (np.arange(n) % window >= skip) & (ids[:n] >= scored[0]) & (ids[:n] <= scored[1]) & np.isfinite(win)
    h = keep & held[:n]
    out = {"windowed": float(win[h].mean()), "streamed": float(streamed[h].mean()), "bases": int(h.sum()),
           "stream_bases": n}  # fmt: skip
    out["spans"] = [
        {"span": s, "windowed": float(win[:s][keep[:s]].mean()), "streamed": float(streamed[:s][keep[:s]].mean())}
        for s in spans
        if s <= n
    ]
    return out


TEXT_SPANS = (10_000, 100_000, 1_000_000)  # text drift pooled by position in the document: [0, 10k), [10k, 100k), ...


def text_windowed_and_streamed(model, docs: list[np.ndarray], window: int, skip: int) -> dict:
    """``windowed_and_streamed`` over whole documents (each ``BOS bytes`` from a fresh state), pooled over bytes;
    ``spans`` pools them by position in the document (positions before 10k, 10k-100k, 100k-1M), so drift is seen
    by the distance read."""
    sums = np.zeros((len(TEXT_SPANS) + 1, 3))  # rows: all, then each position range; cols: win, streamed, n
    edges = (0, *TEXT_SPANS)
    for ids in docs:
        win, streamed, n = tile_and_stream_bits(model, ids, window)
        pos = np.arange(n)
        keep = (pos % window >= skip) & (ids[:n] >= 4) & (ids[:n] <= 259) & np.isfinite(win)
        sums[0] += (win[keep].sum(), streamed[keep].sum(), keep.sum())
        for i, (a, b) in enumerate(zip(edges[:-1], edges[1:], strict=True)):
            k = keep & (pos >= a) & (pos < b)
            sums[i + 1] += (win[k].sum(), streamed[k].sum(), k.sum())
    return {
        "windowed": sums[0, 0] / sums[0, 2],
        "streamed": sums[0, 1] / sums[0, 2],
        "bases": int(sums[0, 2]),
        "stream_bases": int(sum(map(len, docs))),
        "spans": [
            {"span": b, "from": a, "windowed": w / c, "streamed": st / c, "bases": int(c)}
            for (a, b), (w, st, c) in zip(zip(edges[:-1], edges[1:], strict=True), sums[1:], strict=True)
            if c
        ],
    }


def text_stream_docs(source: str | None, count: int, min_bytes: int) -> list[np.ndarray]:
    """The first ``count`` documents with at least ``min_bytes`` bytes, as ``BOS bytes`` ids: of the aclsum val
    papers (``source`` None) or of a jsonl file of ``{"text"}`` rows (e.g. the held-out whole manuals of
    ``data/cache/longtext/long-val.jsonl``)."""
    from strandline.data.documents import load_aclsum
    from strandline.data.tokenizers import ByteTokenizer

    tok = ByteTokenizer()
    if source is None:
        texts = [d["text"] for d in load_aclsum("val")]
    else:
        texts = [json.loads(line)["text"] for line in Path(source).read_text(encoding="utf-8").splitlines()]
    docs = [np.concatenate([[tok.bos_id], tok.encode(t)]) for t in texts]
    return [d for d in docs if len(d) >= min_bytes][:count]


def byte_unigram_logp(dm) -> np.ndarray:
    """log2 P of every token id [260] under the byte unigram, add-one, counted on the train split."""
    counts = np.ones(260)  # add-one over every id
    for batch in dm.train_dataloader():
        t = batch["target"][batch["target"] >= 0].numpy()
        counts += np.bincount(t, minlength=260)
    return np.log2(counts / counts.sum())


def unigram_stream_bits(dm, docs: list[np.ndarray], window: int, skip: int) -> tuple[str, float]:
    """The byte unigram (``byte_unigram_logp``) on the positions the text stream scores."""
    logp = byte_unigram_logp(dm)
    total = n = 0
    for ids in docs:
        m = (len(ids) - 1) // window * window
        keep = (np.arange(m) % window >= skip) & (ids[:m] >= 4)
        keep[0] = False
        total, n = total - float(logp[ids[:m][keep]].sum()), n + int(keep.sum())
    return "byte unigram", total / n


def markov_stream_bits(dm, ids: np.ndarray, held: np.ndarray, window: int, skip: int) -> tuple[str, float]:
    """The Markov-k baseline (chosen on the val split, counted on the train split) on the held-out positions
    ``windowed_and_streamed`` scores."""
    train, val = (span_seqs(dm, s) for s in ("train", "val"))
    markov, alpha, _ = choose_markov(train, val, range(0, 11), [0.01, 0.1, 0.5, 1.0])
    n = (len(ids) - 1) // window * window
    bits = markov.position_bits(ids[:n], alpha)
    keep = (np.arange(n) % window >= skip) & np.isfinite(bits) & held[:n]
    return f"Markov k={markov.k}", float(bits[keep].mean())


def step_rows(student, teacher, positions: list[int]) -> list[dict]:
    """Step latency (ms) and state bytes at each position: the converted RNN vs the softmax KV cache."""
    rows, state, done = [], None, 0
    g = torch.Generator().manual_seed(0)
    cfg = teacher.config
    with torch.inference_mode():
        for pos in positions:
            while done < pos:  # a real prefill of the RNN, in 64k pieces: constant memory
                n = min(1 << 16, pos - done)
                _, state = student.hidden(torch.randint(4, 8, (1, n), generator=g), state)
                done += n
            conv = torch.zeros(1, cfg.conv_width - 1, 3 * cfg.d_model) if cfg.conv_width > 1 else None
            kv = tuple(
                KVState(torch.randn(1, cfg.n_heads, pos, cfg.head_dim), torch.randn(1, cfg.n_heads, pos, cfg.head_dim), conv)
                for _ in range(cfg.n_layers)
            )  # fmt: skip
            rows.append({
                "position": pos, "rnn_ms": _time_steps(student, state) * 1e3, "rnn_bytes": student.state_nbytes(state),
                "kv_ms": _time_steps(teacher, kv) * 1e3, "kv_bytes": teacher.state_nbytes(kv),
            })  # fmt: skip
            del kv
    return rows


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(5.5 * len(results), 4), squeeze=False)
    for ax, (domain, r) in zip(axes[0], results.items(), strict=True):
        for method in sorted({c["method"] for c in r["conversions"]}):
            pts = sorted((c["tokens"], 100 * c["recovery"]) for c in r["conversions"] if c["method"] == method)
            ax.plot(*zip(*pts, strict=True), marker="o", label=method)
        for key, marker in (("scratch", "x"), ("scratch_hybrid", "+")):
            if r.get(key):
                s = r[key]
                name = f"{label('hybrid', s['window']) if s.get('window') else 'linear'} from scratch"
                ax.scatter([s["tokens"]], [100 * s["recovery"]], marker=marker, color="k", label=name)
        ax.axhline(90, ls="--", color="grey", lw=0.8)
        ax.axvline(0.1 * r["softmax"]["tokens"], ls=":", color="grey", lw=0.8)
        ax.set(xscale="log", xlabel="tokens spent", ylabel="% of softmax gain recovered", title=domain)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def run_domain(domain: str, args) -> dict:
    out = Path(args.out) / domain
    out.mkdir(parents=True, exist_ok=True)
    t_steps, per_step = recipe_tokens(domain)
    teacher_dir = Path(getattr(args, f"{domain}_teacher") or train_recipe(domain, "softmax", t_steps, out / "softmax"))
    teacher = load(teacher_dir)
    dm = make_data(domain, eval_all=True)
    dm.setup("fit")
    base_name, base = baseline_bits(domain, dm, args.text_eval_batches)
    soft = heldout_bits(teacher, dm, domain, args.text_eval_batches)
    gain = base - soft

    def rec(bits: float) -> float:
        return (base - bits) / gain

    r = {"baseline": {"name": base_name, "bits": base}, "softmax": {"bits": soft, "tokens": t_steps * per_step}}
    stream = None
    if domain == "dna" and args.stream_min:  # conversion measured as it is used: one state over a whole record
        window = convert_cfg(domain)["data"]["init_args"]["window"]
        ids, held = stream_of(dm, args.stream_min)
        name, sbase = markov_stream_bits(dm, ids, held, window, args.stream_skip)
        steach = windowed_and_streamed(teacher, ids, held, window, args.stream_skip)
        r["stream"] = {"bases": len(ids), "window": window, "skip": args.stream_skip,
                       "baseline": {"name": name, "bits": sbase}, "softmax": steach}  # fmt: skip
        stream = (ids, held, window)
        print(f"# {domain} stream of {len(ids):,} bases: {name} {sbase:.4f}, softmax (sliding window {window}) "
              f"{steach['streamed']:.4f}, in tiles {steach['windowed']:.4f}", flush=True)  # fmt: skip

    if domain == "text" and args.text_stream_docs:  # the same over whole long documents, each its own stream
        window = convert_cfg(domain)["data"]["init_args"]["seq_len"]
        docs = text_stream_docs(args.text_stream, args.text_stream_docs, args.text_stream_min)
        name, sbase = unigram_stream_bits(dm, docs, window, args.stream_skip)
        steach = text_windowed_and_streamed(teacher, docs, window, args.stream_skip)
        r["stream"] = {"bases": sum(map(len, docs)), "documents": len(docs), "window": window, "skip": args.stream_skip,
                       "baseline": {"name": name, "bits": sbase}, "softmax": steach}  # fmt: skip
        stream = (docs, None, window)
        print(f"# {domain} stream of {len(docs)} documents ({r['stream']['bases']:,} bytes): {name} {sbase:.4f}, "
              f"softmax (sliding window {window}) {steach['streamed']:.4f}, in tiles {steach['windowed']:.4f}",
              flush=True)  # fmt: skip

    def add_stream(row: dict, model) -> None:
        if stream is None:
            return
        ids, held, window = stream
        if held is None:  # text: documents
            row["stream"] = text_windowed_and_streamed(model, ids, window, args.stream_skip)
        else:
            row["stream"] = windowed_and_streamed(model, ids, held, window, args.stream_skip)

    r["conversions"], best = [], None
    for spec in args.methods:
        method, window = parse_method(spec)
        name = label(method, window) + (f" ({args.label})" if args.label else "")
        for frac in args.budgets:
            steps = 0 if frac == 0 else max(2, round(frac * t_steps))
            run_dir = out / (f"{method}-{steps}" if not window else f"{method}-w{window}-{steps}")
            model, secs = convert_once(domain, teacher_dir, method, window, steps, run_dir, args.distill_fraction)
            bits = heldout_bits(model, dm, domain, args.text_eval_batches)
            row = {"method": name, "softmax_window": window, "steps": steps, "tokens": steps * per_step, "bits": bits,
                   "recovery": rec(bits), "seconds": secs, "state_bytes": model.state_nbytes(model.init_state(1))}  # fmt: skip
            add_stream(row, model)
            r["conversions"].append(row)
            drift = f", streamed {row['stream']['streamed']:.4f} (drift {row['stream']['streamed'] - row['stream']['windowed']:+.4f})" if "stream" in row else ""  # fmt: skip
            print(
                f"# {domain} {name} {steps} steps: {bits:.4f} bits, {100 * rec(bits):.1f}%{drift} ({secs:.0f} s)",
                flush=True,
            )
            if frac == max(args.budgets) and (best is None or bits < best[1]):
                best = (model, bits, name)
    total = t_steps + round(max(args.budgets) * t_steps)  # equal TOTAL budget: softmax + the largest conversion
    for key, window, run in (
        ("scratch", 0, not args.skip_scratch),
        ("scratch_hybrid", args.scratch_window, args.scratch_window),
    ):
        if run:
            name = f"linear-{total}" if not window else f"hybrid-w{window}-{total}"
            scratch = load(train_recipe(domain, "linear", total, out / name, window))
            bits = heldout_bits(scratch, dm, domain, args.text_eval_batches)
            r[key] = {"steps": total, "tokens": total * per_step, "bits": bits, "recovery": rec(bits), "window": window}
            add_stream(r[key], scratch)
    if args.positions and best is not None:
        r["step"] = {"method": best[2], "rows": step_rows(best[0].eval(), teacher, args.positions)}
    return r


def print_tables(results: dict) -> None:
    for domain, r in results.items():
        soft = r["softmax"]
        print(f"\n## {domain}: softmax {soft['bits']:.4f} bits/token ({soft['tokens']:,} training tokens), "
              f"{r['baseline']['name']} {r['baseline']['bits']:.4f}")  # fmt: skip
        print(f"{'model':<28} {'tokens':>11} {'% of softmax':>12} {'bits/token':>10} {'recovered':>10} {'state':>9}")
        for c in r["conversions"]:
            name = f"{c['method']} ({c['steps']} steps)"
            state = f"{c['state_bytes'] / 1024:.1f} KB" if "state_bytes" in c else "-"
            print(
                f"{name:<28} {c['tokens']:>11,} {100 * c['tokens'] / soft['tokens']:>11.1f}% {c['bits']:>10.4f} {100 * c['recovery']:>9.1f}% {state:>9}"
            )
        for s in (r[key] for key in ("scratch", "scratch_hybrid") if r.get(key)):
            name = f"{label('hybrid', s['window']) if s.get('window') else 'linear'} from scratch ({s['steps']})"
            print(
                f"{name:<28} {s['tokens']:>11,} {100 * s['tokens'] / soft['tokens']:>11.1f}% {s['bits']:>10.4f} {100 * s['recovery']:>9.1f}%"
            )
        if r.get("stream"):
            what = (f"{r['stream']['documents']} whole val documents ({r['stream']['bases']:,} bytes)"
                    if "documents" in r["stream"] else
                    f"a whole record ({r['stream']['bases']:,} bases), held-out end scored")  # fmt: skip
            print(f"\nstreamed over {what}; {r['stream']['baseline']['name']} {r['stream']['baseline']['bits']:.4f}")
            for cells in stream_rows(r):
                print("  ".join(f"{c:>14}" for c in cells))
        if r.get("step"):
            print(f"\nstep latency / state ({r['step']['method']} RNN vs softmax KV cache)")
            print(f"{'position':>10} {'RNN ms':>8} {'RNN state':>12} {'KV ms':>8} {'KV cache':>14}")
            for row in r["step"]["rows"]:
                print(f"{row['position']:>10,} {row['rnn_ms']:>8.3f} {row['rnn_bytes']:>12,} {row['kv_ms']:>8.3f} {row['kv_bytes']:>14,}")  # fmt: skip


STREAM_COLUMNS = ["model", "tokens", "windowed", "streamed", "streamed - windowed", "largest |drift| by 1 Mb",
                  "recovered (streamed)"]  # fmt: skip


def stream_rows(r: dict) -> list[list[str]]:
    """One row per model of a domain's results: its held-out bits read in windows and streamed whole, the drift
    (also the largest over the stream's first 10 kb, 100 kb and 1 Mb) and the recovered gain on streamed bits."""
    st = r["stream"]
    base, soft = st["baseline"]["bits"], st["softmax"]["streamed"]

    def row(name: str, tokens: str, m: dict) -> list[str]:
        worst = max((abs(p["streamed"] - p["windowed"]) for p in m["spans"]), default=None)
        rec = (base - m["streamed"]) / (base - soft)
        return [name, tokens, f"{m['windowed']:.4f}", f"{m['streamed']:.4f}", f"{m['streamed'] - m['windowed']:+.4f}",
                "-" if worst is None else f"{worst:.4f}", f"{100 * rec:.0f}%"]  # fmt: skip

    rows = [row("softmax teacher (sliding window)", f"{r['softmax']['tokens']:,}", st["softmax"])]
    for c in r["conversions"]:
        if "stream" in c:
            name = f"{c['method']}, " + (f"{c['steps']} steps" if c["steps"] else "weight copy only")
            rows.append(row(name, f"{c['tokens']:,}", c["stream"]))
    for key in ("scratch", "scratch_hybrid"):
        s = r.get(key)
        if s and "stream" in s:
            name = f"{label('hybrid', s['window']) if s.get('window') else 'linear'} from scratch, {s['steps']} steps"
            rows.append(row(name, f"{s['tokens']:,}", s["stream"]))
    return rows


def save_stream_record(results: dict, argv: list[str], domain: str) -> None:
    from benchmarks.results import record

    r = results[domain]
    st = r["stream"]
    base = st["baseline"]["name"]
    cmd = "OMP_NUM_THREADS=1 python benchmarks/convert.py " + " ".join(argv)
    if domain == "dna":
        record(
            "convert-dna-stream",
            "Softmax to RNN conversion, DNA: windowed and streamed",
            cmd,
            STREAM_COLUMNS,
            stream_rows(r),
            machine=f"The project's build VM (2 CPU cores, shared); 1 thread. Stream: the longest record of the "
            f"conversion data, {st['bases']:,} bases, read whole; {st['softmax']['bases']:,} held-out positions scored "
            f"(its val and test spans, positions {st['skip']}-{st['window'] - 1} of every {st['window']}-base tile).",
            caveats=[
                f"windowed: every {st['window']}-base tile read from a fresh state (as the conversion trains and the "
                "recovered-gain table scores); streamed: one state carried from the record's start, as a scan reads it.",
                f"recovered (streamed) = ({base} - model) / ({base} - teacher), all streamed; {base} "
                f"{st['baseline']['bits']:.4f} bits/base on those positions.",
                "largest |drift| by 1 Mb: over all positions of the stream's first 10 kb, 100 kb and 1 Mb (training "
                "positions included), the largest |streamed - windowed|.",
            ],
        )
        return
    record(
        "convert-text-stream",
        "Softmax to RNN conversion, text: windowed and streamed over whole documents",
        cmd,
        STREAM_COLUMNS,
        stream_rows(r),
        machine=f"The project's build VM (2 CPU cores, shared); 1 thread. Streams: {st['documents']} whole held-out "
        f"documents ({st['bases']:,} bytes), each read from its start; {st['softmax']['bases']:,} bytes scored "
        f"(positions {st['skip']}-{st['window'] - 1} of every {st['window']}-byte tile).",
        caveats=[
            f"windowed: every {st['window']}-byte tile read from a fresh state (as the conversion trains); streamed: "
            "one state carried from the document's start, as the summarizer reads a document.",
            f"recovered (streamed) = ({base} - model) / ({base} - teacher), all streamed; {base} "
            f"{st['baseline']['bits']:.4f} bits/byte on those bytes.",
            "largest |drift| by 1 Mb: the largest |streamed - windowed| over the bytes at positions 0-10k, 10k-100k "
            "and 100k-1M of the documents, pooled.",
        ],
    )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--domains", nargs="+", default=["dna", "text"], choices=sorted(DOMAINS))
    ap.add_argument("--methods", nargs="+", default=["t2r", "hedgehog", "lolcats"],
                    help="METHOD or METHOD:W (W: the hybrid student's softmax window; lolcats defaults to 64)")  # fmt: skip
    ap.add_argument("--distill-fraction", type=float, default=0.5, help="share of each budget spent in stage 1")
    ap.add_argument("--budgets", nargs="+", type=float, default=[0.025, 0.05, 0.1],
                    help="conversion tokens as fractions of the softmax model's training tokens")  # fmt: skip
    ap.add_argument("--dna-teacher", help="a trained softmax DNA model (default: train it into --out)")
    ap.add_argument("--text-teacher", help="a trained softmax text model (default: train it into --out)")
    ap.add_argument("--skip-scratch", action="store_true", help="no linear-from-scratch run")
    ap.add_argument("--scratch-window", type=int, default=0,
                    help="also train the hybrid (this window W) from scratch at the same total budget")  # fmt: skip
    ap.add_argument("--positions", type=int, nargs="*", default=[1_000, 100_000, 1_000_000])
    ap.add_argument("--text-eval-batches", type=int, default=32)
    ap.add_argument("--stream-min", type=int, default=1_000_000,
                    help="DNA: every model is also streamed over the data's longest record, which must have at least "
                         "this many bases (0: no streamed measure)")  # fmt: skip
    ap.add_argument("--stream-skip", type=int, default=64, help="first positions of each tile not scored")
    ap.add_argument("--text-stream-docs", type=int, default=20,
                    help="text: also stream this many whole val documents (0: none)")  # fmt: skip
    ap.add_argument("--text-stream-min", type=int, default=20_000, help="text: shortest document streamed (bytes)")
    ap.add_argument("--text-stream", help="text: a jsonl of documents to stream (default: the aclsum val papers)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default="runs/convert-bench")
    ap.add_argument("--previous", help="an earlier results.json whose rows join this run's table and plot")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="change the convert config for this run (YAML value; dotted keys: data.init_args.sequential)")  # fmt: skip
    ap.add_argument("--label", help="suffix of this run's row names (e.g. the --set it tried)")
    ap.add_argument("--save", action="store_true", help="write the streamed tables to benchmarks/results")
    args = ap.parse_args(argv)
    OVERRIDES.update(parse_set(item) for item in args.set)
    torch.set_num_threads(args.threads)
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))  # for the training subprocesses
    t0 = time.time()
    results = {d: run_domain(d, args) for d in args.domains}
    if args.previous:  # rows of an earlier run (same teachers and data: the same baseline and softmax bits)
        for domain, old in json.loads(Path(args.previous).read_text()).items():
            if domain in results:
                new = results[domain]
                new["conversions"] = sorted(
                    old["conversions"] + new["conversions"], key=lambda c: (c["method"], c["steps"])
                )
                for key in ("scratch", "scratch_hybrid", "step"):
                    new.setdefault(key, old.get(key))
    print_tables(results)
    for domain in ("dna", "text"):
        if args.save and "stream" in results.get(domain, {}):
            save_stream_record(results, sys.argv[1:] if argv is None else argv, domain)
    out = Path(args.out)
    (out / "results.json").write_text(json.dumps(results, indent=1))
    plot(results, out / "recovery.png")
    print(
        f"\n# wrote {out / 'results.json'} and {out / 'recovery.png'} ({time.time() - t0:.0f} s, {args.threads} thread(s))"
    )


if __name__ == "__main__":
    main()
