"""The roofline: the machine's fp32 matmul peak beside what training, scanning and generation reach.

    python benchmarks/roofline.py                     # the whole run, 2 threads
    python benchmarks/roofline.py --quick             # everything tiny: a smoke test in < 2 minutes
    python benchmarks/roofline.py --rev HEAD~1        # every measurement also with the code of HEAD~1, A/B/A/B
    python benchmarks/roofline.py --count configs/dna/recall-cpu.yaml    # the FLOPs per token, by part

Sections, one markdown table each (every row: what, the rate, achieved GFLOP/s, % of the measured peak,
the 1-minute load average when it was measured):

1. **Peak.** fp32 matmul of 2048² (best of a few, at the start and again at the end: every % of peak is of the
   better one) and, alone, the model's own GEMM shapes for each recipe:
   [B*T, D] @ [D, 3D] (qkv), [D, D] (proj), [D, 4D] and [4D, D] (MLP), [D, V] (head), at ``--threads``.
2. **Training.** Tokens/s of each ``configs/dna/*-cpu.yaml`` recipe and ``configs/text/tiny-cpu.yaml``, each
   in its own worker process, run by the Lightning Trainer that ``strandline fit`` builds
   (``strandline.app.train.build_cli`` with ``run=False``, then ``trainer.fit``) for ``--steps`` steps, no
   validation, no checkpoints, no logger; steps after the first ``--warm`` are timed. The phase table splits
   those steps: data (the DataLoader iterator's ``next``), forward (the LM and the loss), backward
   (``torch.autograd.backward``: with activation checkpointing it holds the recomputed forward), optimizer
   (AdamW's step, gradient clipping, ``zero_grad``, the LR schedule), memory/state (the k-mer memory's
   forward and the carried-state reset, ``tasks.lm.reset_state``) and "Lightning and Python overhead", the
   step's wall time minus all of these. The timers wrap those functions inside the worker only (each
   phase counts its own time, less the time of the timed phases it calls).
3. **Scan.** ``strandline scan`` (the real CLI, ``python -m strandline scan`` in a subprocess, file to
   bedGraph, wall time including start-up and model load) with the shipped default model
   (``data/models/dna-corpus-tbptt`` of the tree measured) on >= 10 Mb: the first ``--scan-mb`` Mb of
   ``data/cache/corpus/*`` or ``data/cache/genomes/GRCh37-chr20.fa.gz`` when present, else the shipped
   genomes' records repeated under distinct record names (the table says which).
4. **Generation.** ``LinearTransformerLM.step`` of the default model, ms per token (median of
   ``--generate-steps``), at position ~1k and after a chunked prefill of ``--generate-prefill`` tokens.

FLOPs are counted from the model's config by ``flops_per_token`` (its docstring says what is counted);
training is 3 x forward, a scan is one forward per base (one strand: the count already has 2 FLOPs per
multiply-add), a generation step is the forward in recurrent form. GFLOP/s = FLOPs per token x tokens/s.

A/B (``--rev REV``): REV is exported with ``git archive`` into a temporary folder whose ``pkgroot/strandline``
is symlinks to its app, data, models, tasks, configs folders and to each file of its ``strandline/``;
the worker (this file, ``--_worker SPEC.json``) runs with that ``pkgroot`` first on ``PYTHONPATH`` and its cwd
in the exported tree, so only the library code (and its recipes and shipped models) differs between A and
B. Each round runs every measurement with both trees, the order alternating round by round (``--rounds``);
the best of the rounds is shown side by side with the ratio (> 1: this tree is faster). The temporary tree
is removed at the end.
"""

from __future__ import annotations

import argparse
import glob
import gzip
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_MODEL = "data/models/dna-corpus-tbptt"
TEXT_RECIPE = "configs/text/tiny-cpu.yaml"
PHASES = ("data", "forward", "backward", "optimizer", "memory")
PHASE_NAMES = {"data": "data", "forward": "forward", "backward": "backward", "optimizer": "optimizer",
               "memory": "memory/state", "overhead": "Lightning and Python overhead"}  # fmt: skip


# ---- FLOPs ----------------------------------------------------------------------------------------------
def _user_error(msg: str) -> Exception:
    from strandline.errors import UserInputError

    return UserInputError(msg)


# learned projections of the feature maps: name -> (width per head as a function of head dim, feature_dim)
_PROJECTED_MAPS = {
    "performer": lambda hd, fd: fd or hd,
    "t2r": lambda hd, fd: fd or hd,
    "hedgehog": lambda hd, fd: hd,
    "taylor": lambda hd, fd: fd or 0,  # a projection only when feature_dim is given
}
_ELEMENTWISE_MAPS = ("elu1", "relu", "silu", "identity")


def feature_out_dim(name: str, head_dim: int, feature_dim: int | None) -> int:
    """K, the width of φ(q), φ(k) per head (the state is K x head dim), as ``models/feature_maps.py`` builds it."""
    if name in _ELEMENTWISE_MAPS:
        return head_dim
    if name in ("performer", "t2r"):
        return feature_dim or head_dim
    if name == "hedgehog":
        return 2 * head_dim
    if name == "taylor":
        d = feature_dim or head_dim
        return 1 + d + d * (d + 1) // 2
    raise _user_error(f"cannot count feature_map {name!r}: not one of {[*_ELEMENTWISE_MAPS, *_PROJECTED_MAPS]}")


def flops_per_token(cfg, train: bool, mode: str = "chunked") -> dict[str, float]:
    """FLOPs per token of a ``LinearTransformerLM`` with config ``cfg`` (a ``ModelConfig``), by part.

    Counted (2 FLOPs per multiply-add; D = d_model, L layers, H heads of head dim hd, V = vocab_size):

    - ``qkv``, ``proj``, ``mlp``, ``head``: the linear layers, 2 * in * out each (D -> 3D, D -> D, D -> hid and
      hid -> D per layer; the head D -> V once).
    - ``conv``: the short causal depthwise conv over the 3D qkv channels, 2 * 3D * width per layer.
    - ``attention``: the op per head and token. Chunked form with chunk C, K = φ's width: the intra-chunk
      scores and outputs 2*C*K + 2*C*hd (full C x C blocks, as the op computes them) plus the state read and
      write 2*2*K*hd; recurrent form (``mode="recurrent"``, a generation step): the state read and write only.
      Delta rule (chunked WY form): k kᵀ, q kᵀ (2*2*C*K), the C x C solve and the products with the
      pseudo-values (3*C*hd, about), the state read, the pre-write read and the write (3*2*K*hd). A window W:
      its scores and outputs over the W keys, 2*W*K + 2*W*hd, beside the linear part (linear attention) or
      alone (softmax with a window). The normalizer's sums, decay masks and gates' exponentials are
      elementwise and not counted.
    - ``feature map``: φ's learned projections (performer, t2r, hedgehog, taylor with feature_dim), 2*hd*m
      per head for q and for k; elementwise maps (elu1, relu, silu, identity) count 0.
    - ``gates``: the scalar gate's and the delta rule's β projections, 2 * D * H per layer each.
    - ``norms``: RMSNorm, 4 FLOPs per channel (square, sum, scale, weight): 2 per layer and the final one,
      plus the per-head output norm of ``normalizer: rmsnorm``.
    - ``k-mer memory``: its mixing head only, the gate 2 * D * J (J orders) plus ~6 per order and symbol of the
      alphabet (smoothed log-probabilities, weighting, the sum into the logits). The table reads and writes
      are memory traffic: 0 FLOPs.

    Not counted: the embedding lookup (0 FLOPs), GELU, residual adds, dropout, the loss. Training = 3 x
    forward (backward = 2 x forward); activation checkpointing's recomputed forward is not counted.

    Raises:
        UserInputError: a config whose cost this cannot count (softmax attention without a window grows with
            the position; an unknown attention, update or feature map).
    """
    D, L, H, V, hd = cfg.d_model, cfg.n_layers, cfg.n_heads, cfg.vocab_size, cfg.d_model // cfg.n_heads
    if mode not in ("chunked", "recurrent"):
        raise _user_error(f"cannot count mode {mode!r}: 'chunked' or 'recurrent'")
    if cfg.attention == "softmax" and not cfg.window:
        raise _user_error("cannot count softmax attention without a window: its cost per token grows with the position")
    if cfg.attention not in ("linear", "softmax"):
        raise _user_error(f"cannot count attention {cfg.attention!r}: 'linear' or 'softmax'")
    if cfg.update not in ("additive", "delta"):
        raise _user_error(f"cannot count update {cfg.update!r}: 'additive' or 'delta'")
    hid = int(cfg.mlp_ratio * D)
    C = 0 if mode == "recurrent" else cfg.chunk_size
    W = cfg.window
    parts = {
        "qkv": L * 2 * D * 3 * D,
        "proj": L * 2 * D * D,
        "mlp": L * (2 * D * hid + 2 * hid * D),
        "head": 2 * D * V,
        "conv": L * 2 * 3 * D * cfg.conv_width if cfg.conv_width > 1 else 0,
    }
    if cfg.attention == "softmax":  # with a window (checked above): the W keys each query sees
        per_head, fmap = 2 * W * hd + 2 * W * hd, 0
    else:
        K = feature_out_dim(cfg.feature_map, hd, cfg.feature_dim)
        if cfg.update == "delta":
            per_head = 2 * 2 * C * K + 3 * C * hd + 3 * 2 * K * hd
        else:
            per_head = 2 * C * K + 2 * C * hd + 2 * 2 * K * hd
        if W:
            per_head += 2 * W * K + 2 * W * hd
        proj = _PROJECTED_MAPS.get(cfg.feature_map, lambda hd, fd: 0)(hd, cfg.feature_dim)
        fmap = L * 2 * H * 2 * hd * proj  # q and k
    parts["attention"] = L * H * per_head
    parts["feature map"] = fmap
    linear = cfg.attention == "linear"
    n_gates = int(linear and cfg.gate == "scalar") + int(linear and cfg.update == "delta")
    parts["gates"] = L * n_gates * 2 * D * H
    parts["norms"] = 4 * D * (2 * L + 1) + (L * 4 * D if linear and cfg.normalizer == "rmsnorm" else 0)
    J, A = len(cfg.kmer_orders), len(cfg.kmer_alphabet)
    parts["k-mer memory"] = 2 * D * J + 6 * J * A if J else 0
    scale = 3 if train else 1
    return {k: float(scale * v) for k, v in parts.items()}


def model_config_of(path: str | Path):
    """The ``ModelConfig`` of a recipe YAML (``model: {model: {...}}``) or a model directory (``config.json``)."""
    import yaml

    from strandline.models.config import ModelConfig

    p = Path(path)
    if not p.exists():
        raise _user_error(f"{path}: no such recipe or model directory")
    if p.is_dir():
        if not (p / "config.json").is_file():
            raise _user_error(f"{path}: a model directory holds config.json; this one has none")
        return ModelConfig.from_dict(json.loads((p / "config.json").read_text())["model"])
    cfg = yaml.safe_load(p.read_text())
    model = ((cfg or {}).get("model") or {}).get("model")
    if not isinstance(model, dict):
        raise _user_error(f"{path}: not a training recipe (no model: model: section)")
    return ModelConfig.from_dict(dict(model))


def recipe_tokens(path: Path) -> tuple[int, int]:
    """(batch size, tokens per row) of a recipe's data section: DNA ``window``, text ``seq_len``."""
    import yaml

    init = yaml.safe_load(path.read_text())["data"].get("init_args", {})
    return int(init.get("batch_size", 1)), int(init.get("window") or init.get("seq_len") or 1024)


# ---- peak -----------------------------------------------------------------------------------------------
def time_matmul(m: int, k: int, n: int, reps: int, min_s: float = 0.0) -> float:
    """FLOP/s of [m, k] @ [k, n] in fp32, best of ``reps`` after one warm-up, repeated further (up to 200 in
    all) until ``min_s`` seconds have passed: on a shared machine a long product is rarely undisturbed."""
    import torch

    a, b = torch.randn(m, k), torch.randn(k, n)
    out = torch.empty(m, n)
    torch.mm(a, b, out=out)
    best, i, t0 = float("inf"), 0, time.perf_counter()
    while i < reps or (time.perf_counter() - t0 < min_s and i < 200):
        t = time.perf_counter()
        torch.mm(a, b, out=out)
        best = min(best, time.perf_counter() - t)
        i += 1
    return 2 * m * k * n / best


def gemm_shapes(cfg, rows: int) -> dict[str, tuple[int, int, int]]:
    D, hid, V = cfg.d_model, int(cfg.mlp_ratio * cfg.d_model), cfg.vocab_size
    return {"qkv": (rows, D, 3 * D), "proj": (rows, D, D), "mlp up": (rows, D, hid), "mlp down": (rows, hid, D),
            "head": (rows, D, V)}  # fmt: skip


# ---- the old tree ---------------------------------------------------------------------------------------
def export_tree(rev: str, dest: Path, repo: Path = ROOT) -> Path:
    """The files of ``rev`` (``git archive``) under ``dest``; UserInputError for a revision git does not know."""
    r = subprocess.run(["git", "-C", str(repo), "archive", "--format=tar", rev], capture_output=True)
    if r.returncode:
        msg = r.stderr.decode(errors="replace").strip().splitlines()
        raise _user_error(f"--rev {rev}: {msg[0] if msg else 'git archive failed'}")
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(r.stdout)) as tar:
        tar.extractall(dest, filter="data")
    return dest


def build_pkgroot(tree: Path) -> Path:
    """``tree/pkgroot`` whose ``strandline/`` is symlinks to the tree's package folders and ``strandline/`` files.

    With it first on ``PYTHONPATH``, ``import strandline.models`` resolves to ``tree/models`` (what the
    ``package-dir`` mapping of an install does), whatever strandline is installed.
    """
    pkg = tree / "pkgroot" / "strandline"
    pkg.mkdir(parents=True, exist_ok=False)
    for name in ("app", "data", "models", "tasks", "configs"):
        if (tree / name).is_dir():
            (pkg / name).symlink_to((tree / name).resolve(), target_is_directory=True)
    for f in sorted((tree / "strandline").iterdir()):
        if f.name != "__pycache__":
            (pkg / f.name).symlink_to(f.resolve(), target_is_directory=f.is_dir())
    return tree / "pkgroot"


ISOLATE = (
    "import sys; sys.meta_path[:] = [f for f in sys.meta_path "
    "if not getattr(f, '__module__', '').startswith('__editable__')]; "
)
"""Python that drops an editable install's import finder: run first (with ``python -P``, no cwd on sys.path) it
leaves ``PYTHONPATH`` the only way to ``strandline``, so a module the old tree lacks cannot come from this one."""


class Tree:
    """A tree of the code to measure: this checkout (A) or an exported revision (B)."""

    def __init__(self, name: str, root: Path, pythonpath: Path | None = None):
        self.name, self.root, self.pythonpath = name, root, pythonpath

    def env(self, threads: int) -> dict:
        env = dict(os.environ)
        env.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as strandline.app.threads sets it for `strandline ...`
        env["OMP_NUM_THREADS"] = str(threads)
        env["WANDB_MODE"] = "disabled"
        if self.pythonpath is not None:
            env["PYTHONPATH"] = os.pathsep.join([str(self.pythonpath), *filter(None, [env.get("PYTHONPATH")])])
        return env

    def python(self, *args: str, module: str | None = None) -> list[str]:
        """The command line of ``python -m module args`` (or ``python args``) running this tree's code."""
        if self.pythonpath is None:
            return [sys.executable, "-P", *(["-m", module] if module else []), *args]
        if module:  # as -m does, after the isolation
            run = f"import runpy; runpy.run_module({module!r}, run_name='__main__', alter_sys=True)"
            return [sys.executable, "-P", "-c", ISOLATE + run, *args]
        return [sys.executable, "-P", *args]  # this file's worker isolates itself (worker_main)

    def worker(self, spec: dict, threads: int, tmp: Path, timeout: float) -> dict:
        """Run this file's worker on ``spec`` in this tree; its result, or {"error": ...}."""
        spec_path = Path(tempfile.mkstemp(dir=tmp, suffix=".json")[1])
        out_path = spec_path.with_suffix(".out.json")
        spec = {
            **spec,
            "threads": threads,
            "out": str(out_path),
            "tmp": str(tmp),
            "isolate": self.pythonpath is not None,
        }
        spec_path.write_text(json.dumps(spec))
        cmd = self.python(str(Path(__file__).resolve()), "--_worker", str(spec_path))
        try:
            r = subprocess.run(cmd, cwd=self.root, env=self.env(threads), capture_output=True, text=True,
                               timeout=timeout)  # fmt: skip
        except subprocess.TimeoutExpired:
            return {"error": f"timed out after {timeout:.0f} s"}
        if r.returncode or not out_path.is_file():
            tail = (r.stderr or r.stdout).strip().splitlines()
            return {"error": tail[-1] if tail else f"exit {r.returncode}"}
        return json.loads(out_path.read_text())


# ---- worker (runs in a subprocess, in the tree measured) ------------------------------------------------
class _Phases:
    """Exclusive seconds per phase: a timed function's time less that of the timed functions it calls."""

    def __init__(self):
        self.total: dict[str, float] = {}
        self._stack: list[float] = []

    def wrap(self, phase: str, fn):
        def timed(*args, **kwargs):
            self._stack.append(0.0)
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                dt = time.perf_counter() - t0
                inner = self._stack.pop()
                self.total[phase] = self.total.get(phase, 0.0) + dt - inner
                if self._stack:
                    self._stack[-1] += dt

        timed.__wrapped__ = fn
        return timed


def _train_worker(spec: dict) -> dict:
    import lightning.pytorch as pl
    import torch
    from lightning.pytorch.callbacks import ModelCheckpoint
    from lightning.pytorch.loops.optimization import automatic
    from torch.utils.data import dataloader

    import strandline.tasks.lm as lm_task
    from strandline.app.train import build_cli

    torch.set_num_threads(spec["threads"])
    ph = _Phases()
    warm = spec["warm"]
    tmp = Path(spec["tmp"])
    argv = [
        "--config", spec["recipe"], "--trainer.max_steps", str(spec["steps"]), "--trainer.logger", "false",
        "--trainer.limit_val_batches", "0", "--trainer.num_sanity_val_steps", "0",
        "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false",
        "--trainer.default_root_dir", str(tmp / "runs"), "--checkpoint.dirpath", str(tmp / "ckpt"),
    ]  # fmt: skip
    cli = build_cli(argv, run=False)
    trainer, task, data = cli.trainer, cli.model, cli.datamodule
    trainer.callbacks = [c for c in trainer.callbacks if not isinstance(c, ModelCheckpoint)]  # no checkpoints

    # the timers: this process only
    dataloader._BaseDataLoaderIter.__next__ = ph.wrap("data", dataloader._BaseDataLoaderIter.__next__)
    torch.autograd.backward = ph.wrap("backward", torch.autograd.backward)
    automatic.Closure.closure = ph.wrap("python", automatic.Closure.closure)  # Lightning's, inside opt.step
    task.training_step = ph.wrap("python", task.training_step)
    task.model.forward = ph.wrap("forward", task.model.forward)
    task.clip_gradients = ph.wrap("optimizer", task.clip_gradients)
    if hasattr(lm_task, "nll_sum"):
        lm_task.nll_sum = ph.wrap("forward", lm_task.nll_sum)
    if hasattr(lm_task, "reset_state"):
        lm_task.reset_state = ph.wrap("memory", lm_task.reset_state)
    memory = getattr(task.model, "memory", None) or getattr(task.model, "recall", None)
    if isinstance(memory, torch.nn.Module):
        memory.forward = ph.wrap("memory", memory.forward)

    marks: list[tuple[float, dict, int]] = []

    class Clock(pl.Callback):
        def on_train_start(self, trainer, pl_module):
            for opt in trainer.optimizers:
                opt.step = ph.wrap("optimizer", opt.step)
                opt.zero_grad = ph.wrap("optimizer", opt.zero_grad)
            for conf in trainer.lr_scheduler_configs:
                conf.scheduler.step = ph.wrap("optimizer", conf.scheduler.step)

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            marks.append((time.perf_counter(), dict(ph.total), int(batch["input"].numel())))

    trainer.callbacks.append(Clock())
    trainer.fit(task, datamodule=data)
    if len(marks) <= warm:
        raise RuntimeError(f"only {len(marks)} steps ran; need more than --warm {warm}")
    (t0, p0, _), (t1, p1, _) = marks[warm - 1], marks[-1]
    timed = marks[warm:]
    n, wall = len(timed), t1 - t0
    phases = {k: (p1.get(k, 0.0) - p0.get(k, 0.0)) / n for k in PHASES}
    phases["overhead"] = wall / n - sum(phases.values())
    return {"tokens_per_s": sum(m[2] for m in timed) / wall, "step_s": wall / n, "steps": n,
            "tokens_per_step": timed[-1][2], "phases": phases}  # fmt: skip


def _generate_worker(spec: dict) -> dict:
    import torch

    from strandline.models import load

    torch.set_num_threads(spec["threads"])
    lm = load(spec["model"]).eval()
    alphabet = list(getattr(lm.config, "kmer_alphabet", None) or [4, 5, 6, 7])
    g = torch.Generator().manual_seed(0)
    out = {}
    with torch.inference_mode():
        for key, n in (("near_1k", spec["near"]), ("after_prefill", spec["prefill"])):
            ids = torch.tensor(alphabet)[torch.randint(len(alphabet), (1, n), generator=g)]
            state, t = None, time.perf_counter()
            for s in range(0, n, spec["chunk"]):
                _, state = lm(ids[:, s : s + spec["chunk"]], state)
            prefill_s = time.perf_counter() - t
            tok = ids[:, -1]
            for _ in range(5):  # warm-up steps
                _, warm_state = lm.step(tok, state)
            times = []
            for _ in range(spec["steps"]):
                t = time.perf_counter()
                _, state = lm.step(tok, state)
                times.append(time.perf_counter() - t)
            out[key] = {"ms": 1e3 * statistics.median(times), "position": n, "prefill_s": prefill_s}
            del warm_state
    return out


def _scan_phases_worker(spec: dict) -> dict:
    """One in-process scan (``strandline.tasks.scan.scan``, as the CLI runs it) with its time split by phase:
    reading and parsing the FASTA, the model's forward (layers), the k-mer memory, turning logits into scores,
    writing the tracks, and the rest (survey pre-pass, work folder, merge and rename)."""
    import torch

    import strandline.tasks.scan.job as job
    from strandline.models.kmer_memory import KmerMemory
    from strandline.tasks.scan import scan
    from strandline.tasks.scan.args import ScanArgs

    torch.set_num_threads(spec["threads"])
    ph = _Phases()
    read = job.read_records

    def timed_records(*a, **k):
        it = read(*a, **k)
        nxt = ph.wrap("read", lambda: next(it, None))
        while (item := nxt()) is not None:
            yield item

    job.read_records = timed_records
    job.score_chunk = ph.wrap("forward", job.score_chunk)
    job.base_scores = ph.wrap("scores", job.base_scores)
    KmerMemory.forward = ph.wrap("memory", KmerMemory.forward)
    job.ScanJob._emit = ph.wrap("write", job.ScanJob._emit)
    out = Path(spec["tmp"]) / "scan-phases.bedGraph"
    t = time.perf_counter()
    scan(
        ScanArgs(model=spec["model"], inputs=[spec["fasta"]], output=str(out), threads=spec["threads"]), progress=False
    )
    wall = time.perf_counter() - t
    out.unlink(missing_ok=True)
    phases = {k: ph.total.get(k, 0.0) for k in SCAN_PHASES}
    phases["overhead"] = wall - sum(phases.values())
    return {"seconds": wall, "phases": phases}


SCAN_PHASES = ("read", "forward", "memory", "scores", "write")


def worker_main(spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    if spec.get("isolate"):
        exec(ISOLATE)
    fn = {"train": _train_worker, "generate": _generate_worker, "scan_phases": _scan_phases_worker}[spec["kind"]]
    result = fn(spec)
    import strandline.models

    result["load"] = os.getloadavg()[0]
    result["code"] = str(Path(strandline.models.__file__).resolve().parents[1])  # the tree that ran
    Path(spec["out"]).write_text(json.dumps(result))
    return 0


# ---- scan input -----------------------------------------------------------------------------------------
def _read_records(path: Path):
    """(name, sequence bytes) of each record of a plain or gzip FASTA, read whole (small shipped files)."""
    with (gzip.open if path.suffix == ".gz" else open)(path, "rb") as f:
        name, seq = None, []
        for line in f:
            if line.startswith(b">"):
                if name is not None:
                    yield name, b"".join(seq)
                name, seq = line[1:].split()[0].decode(), []
            else:
                seq.append(line.strip())
        if name is not None:
            yield name, b"".join(seq)


def _stream_bases(paths: list[Path], n: int, out) -> int:
    """Copy records of ``paths`` into ``out`` until ``n`` bases are written (the last record cut); the bases."""
    done = 0
    for path in paths:
        with (gzip.open if path.suffix == ".gz" else open)(path, "rb") as f:
            for line in f:
                if line.startswith(b">"):
                    out.write(line)
                    continue
                line = line.strip()[: n - done]
                out.write(line + b"\n")
                done += len(line)
                if done >= n:
                    return done
    return done


def write_scan_input(path: Path, n: int) -> str:
    """A FASTA of ``n`` bases at ``path``; returns where its bases came from (for the table)."""
    cache = ROOT / "data" / "cache"
    corpus = sorted(Path(p) for p in glob.glob(str(cache / "corpus" / "*")) if Path(p).is_file())
    chr20 = cache / "genomes" / "GRCh37-chr20.fa.gz"
    for paths, what in ((corpus, "data/cache/corpus"), ([chr20] if chr20.is_file() else [], str(chr20))):
        if paths:
            with open(path, "wb") as out:
                got = _stream_bases(paths, n, out)
            if got >= n:
                return f"first {n / 1e6:g} Mb of {what}"
    genomes = sorted(
        g for g in (ROOT / "data" / "genomes").iterdir() if g.name.endswith((".fa", ".fasta", ".fa.gz", ".fasta.gz"))
    )
    records = [(f"{g.name.split('.')[0]}_{i}", seq) for g in genomes for i, (_, seq) in enumerate(_read_records(g))]
    done, copy = 0, 0
    with open(path, "wb") as out:
        while done < n:
            copy += 1
            for name, seq in records:
                seq = seq[: n - done]
                out.write(f">{name}_copy{copy}\n".encode())
                out.writelines(seq[i : i + 80] + b"\n" for i in range(0, len(seq), 80))
                done += len(seq)
                if done >= n:
                    break
    names = ", ".join(g.name for g in genomes)
    return f"the shipped genomes' records ({names}) repeated {copy}x under distinct record names"


def run_scan(tree: Tree, fasta: Path, threads: int, tmp: Path, timeout: float) -> dict:
    """Wall seconds of ``python -m strandline scan MODEL FASTA -o OUT.bedGraph`` in ``tree``."""
    model = tree.root / DEFAULT_MODEL
    out = tmp / f"scan-{tree.name}.bedGraph"
    cmd = tree.python("scan", str(model), str(fasta), "-o", str(out), "--threads", str(threads), module="strandline")
    t = time.perf_counter()
    try:
        r = subprocess.run(cmd, cwd=tree.root, env=tree.env(threads), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    dt = time.perf_counter() - t
    load = os.getloadavg()[0]
    if r.returncode or not out.is_file():
        tail = r.stderr.strip().splitlines()
        return {"error": tail[-1] if tail else f"exit {r.returncode}"}
    out.unlink()
    return {"seconds": dt, "load": load}


# ---- the run --------------------------------------------------------------------------------------------
def label(recipe: Path) -> str:
    """A recipe as the tables name it: its folder and stem (``dna/tiny-cpu``, ``text/tiny-cpu``)."""
    return f"{recipe.parent.name}/{recipe.stem}"


def default_recipes() -> list[str]:
    dna = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "configs" / "dna").glob("*-cpu.yaml"))
    return dna + ([TEXT_RECIPE] if (ROOT / TEXT_RECIPE).is_file() else [])


QUICK_RECIPES = ["configs/dna/tiny-cpu.yaml", "configs/dna/recall-cpu.yaml"]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="roofline", description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=2, help="torch threads of every measurement")
    ap.add_argument("--steps", type=int, default=30, help="training steps per recipe (max_steps)")
    ap.add_argument("--warm", type=int, default=5, help="first training steps not timed")
    ap.add_argument("--recipes", nargs="+", help="training recipes (default: configs/dna/*-cpu.yaml and the text one)")
    ap.add_argument("--scan-mb", type=float, default=10.0, help="megabases of the scan input")
    ap.add_argument("--generate-prefill", type=int, default=1_000_000, help="tokens read before the late steps")
    ap.add_argument("--generate-steps", type=int, default=200, help="steps timed at each position (median)")
    ap.add_argument("--gemm-reps", type=int, default=5, help="repetitions of each matmul (best kept)")
    ap.add_argument("--peak-seconds", type=float, default=3.0, help="least time spent timing the 2048² product")
    ap.add_argument("--rev", help="also measure the code of this revision (A/B, alternating)")
    ap.add_argument("--rounds", type=int, help="A/B rounds (default 2 with --rev, else 1); the best is shown")
    ap.add_argument("--sections", default="peak,train,scan,generate", help="which sections to run")
    ap.add_argument("--quick", action="store_true", help="everything tiny: 2 recipes, 6 steps, 1 Mb, short prefill")
    ap.add_argument("--save", action="store_true", help="write benchmarks/results/roofline.json, re-render docs")
    ap.add_argument("--count", metavar="CONFIG", help="print the FLOPs per token of a recipe or model dir, and exit")
    ap.add_argument("--_worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.quick:
        args.recipes = args.recipes or QUICK_RECIPES
        args.steps, args.warm, args.scan_mb = min(args.steps, 6), min(args.warm, 2), min(args.scan_mb, 1.0)
        args.generate_prefill, args.generate_steps = min(args.generate_prefill, 20_000), min(args.generate_steps, 50)
        args.gemm_reps, args.peak_seconds = min(args.gemm_reps, 2), min(args.peak_seconds, 0.5)
    args.recipes = args.recipes or default_recipes()
    args.rounds = args.rounds or (2 if args.rev else 1)
    if args.rounds < 1 or args.threads < 1 or args.warm < 1 or args.steps <= args.warm:
        raise _user_error("--rounds, --threads and --warm must be >= 1, and --steps more than --warm")
    return args


def count_table(path: str) -> str:
    cfg = model_config_of(path)
    fwd, rec = flops_per_token(cfg, train=False), flops_per_token(cfg, train=False, mode="recurrent")
    lines = [f"# FLOPs per token of {path}", "| part | forward (chunked) | recurrent step | training |",
             "| --- | --- | --- | --- |"]  # fmt: skip
    for k in fwd:
        lines.append(f"| {k} | {fwd[k]:,.0f} | {rec[k]:,.0f} | {3 * fwd[k]:,.0f} |")
    lines.append(f"| total | {sum(fwd.values()):,.0f} | {sum(rec.values()):,.0f} | {3 * sum(fwd.values()):,.0f} |")
    return "\n".join(lines)


def _fmt_rate(x: float | None, unit: str) -> str:
    if x is None:
        return "-"
    return f"{x:.3f} ms" if unit == "ms" else f"{x:,.0f} {unit}"


class Table:
    """Rows of one section: what, and per tree (value, FLOP/s, load)."""

    def __init__(self, title: str, unit_note: str = ""):
        self.title, self.unit_note, self.rows = title, unit_note, []

    def add(self, what: str, unit: str, results: dict, note: str = "") -> None:
        """``results``: tree name -> (value, flop/s or None, load) or None (failed)."""
        self.rows.append((what, unit, results, note))


def best(values: list[tuple], unit: str):
    ok = [v for v in values if v is not None]
    if not ok:
        return None
    return min(ok, key=lambda v: v[0]) if unit == "ms" else max(ok, key=lambda v: v[0])


def render(tables: list[Table], trees: list[str], peak: float) -> tuple[str, list[str], list[list]]:
    """Markdown for all tables, and (columns, rows) for the saved record."""
    cols = ["section", "what"]
    for t in trees:
        sfx = "" if len(trees) == 1 else f" ({t})"
        cols += [f"rate{sfx}", f"GFLOP/s{sfx}", f"% of peak{sfx}", f"load 1m{sfx}"]
    if len(trees) == 2:
        cols.append(f"{trees[0]} / {trees[1]} (speed)")
    cols.append("note")
    out, rec_rows = [], []
    for tab in tables:
        out += ["", f"### {tab.title}", ""]
        if tab.unit_note:
            out += [tab.unit_note, ""]
        out.append("| " + " | ".join(cols[1:]) + " |")
        out.append("|" + " --- |" * (len(cols) - 1))
        for what, unit, results, note in tab.rows:
            cells = [what]
            vals = []
            for t in trees:
                r = results.get(t)
                vals.append(r)
                if r is None:
                    cells += ["failed" if t in results else "-", "-", "-", "-"]
                    continue
                value, flops, load = r
                cells += [_fmt_rate(value, unit), "-" if flops is None else f"{flops / 1e9:.2f}",
                          "-" if flops is None else f"{100 * flops / peak:.1f}%", f"{load:.2f}"]  # fmt: skip
            if len(trees) == 2:
                a, b = vals
                ratio = "-" if a is None or b is None else (b[0] / a[0] if unit == "ms" else a[0] / b[0])
                cells.append(ratio if isinstance(ratio, str) else f"{ratio:.2f}x")
            cells.append(note)
            out.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
            rec_rows.append([tab.title, *cells])
    return "\n".join(out), cols, rec_rows


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["--_worker"]:  # the tree measured may be older: nothing of this tree's strandline here
        return worker_main(argv[1])
    from strandline.app.threads import set_openmp_defaults  # before torch loads OpenMP (also for the workers)
    from strandline.errors import UserInputError, first_line

    set_openmp_defaults()
    try:
        args = parse_args(argv)
        if args.count:
            print(count_table(args.count))
            return 0
        return run(args, argv)
    except UserInputError as e:
        print(f"roofline: error: {first_line(e)}", file=sys.stderr)
        return 2


def run(args: argparse.Namespace, argv: list[str]) -> int:
    import torch

    t_start = time.perf_counter()
    sections = set(args.sections.split(","))
    # everything counted first: a config this cannot count ends the run before any measurement
    recipes = [Path(r) if Path(r).is_absolute() else ROOT / r for r in args.recipes]
    for r in recipes:
        if not r.is_file():
            raise _user_error(f"--recipes {r}: no such file")
    cfgs = {r: model_config_of(r) for r in recipes}
    train_flops = {r: sum(flops_per_token(c, train=True).values()) for r, c in cfgs.items()}
    dflt = model_config_of(ROOT / DEFAULT_MODEL)
    scan_flops = sum(flops_per_token(dflt, train=False).values())
    step_flops = sum(flops_per_token(dflt, train=False, mode="recurrent").values())
    torch.set_num_threads(args.threads)
    tmp = Path(tempfile.mkdtemp(prefix="roofline-"))
    trees = [Tree("this", ROOT)]
    try:
        if args.rev:
            rev_tree = export_tree(args.rev, tmp / "rev")
            trees.append(Tree(args.rev, rev_tree, build_pkgroot(rev_tree)))
        names = [t.name for t in trees]
        print(f"# torch {torch.__version__}, {args.threads} thread(s), fp32; OMP_WAIT_POLICY="
              f"{os.environ.get('OMP_WAIT_POLICY')}; load average at start {os.getloadavg()[0]:.2f} on "
              f"{os.cpu_count()} cores; trees: {', '.join(names)}", flush=True)  # fmt: skip
        tables, notes = [], []
        # 1. peak (this process; the same machine for A and B)
        peak = time_matmul(2048, 2048, 2048, args.gemm_reps, args.peak_seconds)
        peak_load = os.getloadavg()[0]
        peak_tab = Table(
            "Peak: fp32 matmul",
            f"{args.threads} thread(s), best of >= {args.gemm_reps} (2048²: >= {args.peak_seconds:g} s of them)",
        )
        peak_tab.add("2048² @ 2048²", "GFLOP/s", {names[0]: (peak / 1e9, peak, peak_load)}, "the peak (at the start)")
        if "peak" in sections:
            seen = {}
            for r, cfg in cfgs.items():
                B, T = recipe_tokens(r)
                for part, shape in gemm_shapes(cfg, B * T).items():
                    seen.setdefault(shape, (part, []))[1].append(label(r))
            for shape, (part, users) in seen.items():
                f = time_matmul(*shape, args.gemm_reps, args.peak_seconds / 10)
                m, k, n = shape
                peak_tab.add(f"{part} [{m}, {k}] @ [{k}, {n}]", "GFLOP/s", {names[0]: (f / 1e9, f, os.getloadavg()[0])},
                             ", ".join(sorted(set(users))))  # fmt: skip
        tables.append(peak_tab)
        print(f"# peak {peak / 1e9:.1f} GFLOP/s (2048², {args.threads} threads)", flush=True)
        order = lambda rnd: trees if rnd % 2 == 0 else trees[::-1]  # noqa: E731
        timeout = 900.0
        # 2. training
        if "train" in sections:
            results = {r: {n: [] for n in names} for r in recipes}
            for rnd in range(args.rounds):
                for r in recipes:
                    for tree in order(rnd):
                        rel = str(r.relative_to(ROOT)) if r.is_relative_to(ROOT) else str(r)
                        if not (tree.root / rel).is_file():
                            continue
                        spec = {"kind": "train", "recipe": rel, "steps": args.steps, "warm": args.warm}
                        res = tree.worker(spec, args.threads, tmp, timeout)
                        results[r][tree.name].append(res)
                        msg = res.get("error") or f"{res['tokens_per_s']:,.0f} tokens/s (code of {res['code']})"
                        print(f"#   train {label(r)} [{tree.name}] round {rnd + 1}: {msg}", flush=True)
            tab = Table("Training (Lightning Trainer, tokens/s)",
                        f"{args.steps} steps, the first {args.warm} not timed; training FLOPs = 3 x forward")  # fmt: skip
            phase_lines = []
            for r in recipes:
                cells = {}
                for n in names:
                    runs = results[r][n]
                    ok = [x for x in runs if "error" not in x]
                    if runs and not ok:
                        cells[n] = None
                        notes.append(f"training {label(r)} [{n}]: {runs[0]['error']}")
                    if ok:
                        b = max(ok, key=lambda x: x["tokens_per_s"])
                        cells[n] = (b["tokens_per_s"], b["tokens_per_s"] * train_flops[r], b["load"])
                        ph = b["phases"]
                        total = b["step_s"]
                        split = " | ".join(f"{100 * ph[k] / total:.1f}%" for k in (*PHASES, "overhead"))
                        phase_lines.append(f"| {label(r)} | {n} | {1e3 * total:.1f} | {split} |")
                B, T = recipe_tokens(r)
                ck = " (activation checkpointing: +1 forward not counted)" if cfgs[r].checkpoint_activations else ""
                tab.add(label(r), "tokens/s", cells, f"{B} x {T} tokens/step{ck}")
            tables.append(tab)
        # 3. scan
        scan_lines: list[str] = []
        if "scan" in sections:
            fasta = tmp / "scan.fa"
            n = int(args.scan_mb * 1e6)
            source = write_scan_input(fasta, n)
            res = {t.name: [] for t in trees}
            for rnd in range(args.rounds):
                for tree in order(rnd):
                    r = run_scan(tree, fasta, args.threads, tmp, timeout=3600)
                    res[tree.name].append(r)
                    msg = r.get("error") or f"{n / r['seconds']:,.0f} bases/s"
                    print(f"#   scan [{tree.name}] round {rnd + 1}: {msg}", flush=True)
            cells = {}
            for name, runs in res.items():
                ok = [x for x in runs if "error" not in x]
                if not ok:
                    cells[name] = None
                    notes.append(f"scan [{name}]: {runs[0]['error']}")
                    continue
                b = min(ok, key=lambda x: x["seconds"])
                cells[name] = (n / b["seconds"], n / b["seconds"] * scan_flops, b["load"])
            tab = Table("Scan: strandline scan, file to bedGraph (bases/s)",
                        f"{DEFAULT_MODEL}, one strand, --threads {args.threads}; wall time of the CLI process")  # fmt: skip
            tab.add(f"scan {n / 1e6:g} Mb", "bases/s", cells, source)
            tables.append(tab)
            r = trees[0].worker({"kind": "scan_phases", "model": DEFAULT_MODEL, "fasta": str(fasta)}, args.threads,
                                tmp, timeout=3600)  # fmt: skip
            if "error" in r:
                notes.append(f"scan phases: {r['error']}")
            else:
                split = " | ".join(f"{100 * r['phases'][k] / r['seconds']:.1f}%" for k in (*SCAN_PHASES, "overhead"))
                scan_lines.append(f"| scan {n / 1e6:g} Mb [{trees[0].name}] | {n / r['seconds']:,.0f} | {split} |")
                print(f"#   scan phases: {split}", flush=True)
        # 4. generation
        if "generate" in sections:
            res = {t.name: [] for t in trees}
            near = 1024
            spec = {"kind": "generate", "model": DEFAULT_MODEL, "near": near, "prefill": args.generate_prefill,
                    "steps": args.generate_steps, "chunk": 8192}  # fmt: skip
            for rnd in range(args.rounds):
                for tree in order(rnd):
                    r = tree.worker(spec, args.threads, tmp, timeout)
                    res[tree.name].append(r)
                    msg = r.get("error") or " / ".join(f"{r[k]['ms']:.2f} ms" for k in ("near_1k", "after_prefill"))
                    print(f"#   generate [{tree.name}] round {rnd + 1}: {msg}", flush=True)
            tab = Table("Generation: LinearTransformerLM.step (ms per token)",
                        f"{DEFAULT_MODEL}, batch 1, median of {args.generate_steps} steps; prefill in chunks of 8192")  # fmt: skip
            for key, what in (("near_1k", f"step at position {near:,}"),
                              ("after_prefill", f"step after a prefill of {args.generate_prefill:,}")):  # fmt: skip
                cells, prefill = {}, {}
                for name, runs in res.items():
                    ok = [x for x in runs if "error" not in x]
                    if not ok:
                        cells[name] = None
                        if key == "near_1k":
                            notes.append(f"generate [{name}]: {runs[0]['error']}")
                        continue
                    b = min(ok, key=lambda x: x[key]["ms"])
                    cells[name] = (b[key]["ms"], step_flops / (b[key]["ms"] / 1e3), b["load"])
                    prefill[name] = (b[key]["position"] / b[key]["prefill_s"], scan_flops * b[key]["position"] / b[key]["prefill_s"], b["load"])  # fmt: skip
                tab.add(what, "ms", cells)
                if key == "after_prefill" and prefill:
                    tab.add(f"prefill of {args.generate_prefill:,} (chunked)", "tokens/s", prefill)
            tables.append(tab)
        # the peak again at the end: on a shared machine the best of the two is the nearer to the machine's limit
        peak_end = time_matmul(2048, 2048, 2048, args.gemm_reps, args.peak_seconds)
        if peak_end > peak:
            peak = peak_end
            peak_tab.rows[0] = ("2048² @ 2048²", "GFLOP/s", {names[0]: (peak / 1e9, peak, os.getloadavg()[0])},
                                "the peak (at the end of the run)")  # fmt: skip
        print(f"# peak at the end {peak_end / 1e9:.1f} GFLOP/s; % of peak below is of {peak / 1e9:.1f}", flush=True)
        if args.threads > 1:  # one thread is disturbed less by other work: what the cores give undisturbed
            torch.set_num_threads(1)
            one = time_matmul(2048, 2048, 2048, args.gemm_reps, args.peak_seconds)
            torch.set_num_threads(args.threads)
            peak_tab.rows.insert(1, ("2048² @ 2048², 1 thread", "GFLOP/s", {names[0]: (one / 1e9, one, os.getloadavg()[0])},
                                     f"x {args.threads} = {args.threads * one / 1e9:.0f} GFLOP/s if no other work took a core"))  # fmt: skip
        text, cols, rows = render(tables, names, peak)
        print(text)
        if "train" in sections and phase_lines:
            print("\n### Training step by phase (% of the step)\n")
            print("| recipe | tree | ms/step | " + " | ".join(PHASE_NAMES[k] for k in (*PHASES, "overhead")) + " |")
            print("|" + " --- |" * 9)
            print("\n".join(phase_lines))
        if scan_lines:
            print("\n### Scan by phase (% of the wall time)\n")
            print("| scan | bases/s | " + " | ".join((*SCAN_PHASES, "overhead")) + " |")
            print("|" + " --- |" * 8)
            print("\n".join(scan_lines))
        for line in notes:
            print(f"# failed: {line}")
        elapsed = time.perf_counter() - t_start
        print(f"\n# {elapsed / 60:.1f} min; load average at the end {os.getloadavg()[0]:.2f}", flush=True)
        if args.save:
            save(args, argv, cols, rows, phase_lines if "train" in sections else [], notes, peak, scan_lines)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


def save(args, argv, cols, rows, phase_lines, notes, peak, scan_lines=()) -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import results

    machine = (f"{os.cpu_count()} cores, {args.threads} thread(s), fp32; peak {peak / 1e9:.1f} GFLOP/s (2048²); "
               f"load average at the end {os.getloadavg()[0]:.2f}")  # fmt: skip
    caveats = [
        "FLOPs counted from the config (flops_per_token in benchmarks/roofline.py): training = 3 x forward, a scan "
        "one forward per base, a generation step the recurrent form; the k-mer tables are memory traffic (0 FLOPs).",
        *(
            [
                "Training step by phase (ms/step; data, forward, backward, optimizer, memory/state, Lightning and "
                "Python overhead, % of the step):"
            ]
            if phase_lines
            else []
        ),
        *[line.strip("| ").replace(" | ", "; ") for line in phase_lines],
        *(
            [f"Scan by phase (bases/s; {', '.join(SCAN_PHASES)}, overhead; % of the wall time, this tree):"]
            if scan_lines
            else []
        ),
        *[line.strip("| ").replace(" | ", "; ") for line in scan_lines],
        *[f"failed: {n}" for n in notes],
    ]
    path = results.record(
        "roofline",
        "The roofline: matmul peak beside training, scan and generation",
        "python benchmarks/roofline.py " + " ".join(a for a in argv if a != "--save"),
        cols,
        rows,
        machine=machine,
        caveats=caveats,
    )
    print(f"wrote {path}")
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "results.py")], check=True, cwd=ROOT)


if __name__ == "__main__":
    sys.exit(main())
