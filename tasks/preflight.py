"""Before training starts: will one training step fit in this machine's memory?

``train_step_bytes`` estimates the peak memory of one step of ``LMTask`` (forward + backward) from the model config,
the batch and the window, float32, so that a window that cannot fit is refused in one line before any data is
read into a batch, instead of the machine swapping or the process being killed an hour in. The estimate is
deliberately on the high side (it came out 1.1-1.8x the peak RSS that ``benchmarks/train_memory.py`` and the
131k-window corpus run measured on CPU), so a run it lets through fits; set ``STRANDLINE_SKIP_MEMORY_CHECK=1`` to
start anyway. What it counts, per token of the batch (B x T tokens):

- with activation checkpointing: each block's input (L x D floats), one block's recomputed intermediates (~20 D)
  and the chunked op's in-chunk scores (~4 C x H, C the chunk size); without: all blocks' intermediates;
- the logits and their gradient (4 V), and the k-mer memory's reads (6 A per order);
- plus the k-mer tables (B lanes x orders x buckets x (A + 1) x 4 bytes, twice: the state and the new one), the
  weights with their gradients and AdamW moments (16 bytes each) and ~400 MB for torch itself.
"""

from __future__ import annotations

import os
from pathlib import Path

from strandline.errors import UserInputError
from strandline.models.config import ModelConfig

TORCH_BASE = 400 * 2**20


def train_step_bytes(cfg: ModelConfig, batch_size: int, window: int, n_params: int | None = None) -> int:
    """Estimated peak bytes of one float32 training step (see the module docstring for what is counted)."""
    D, L, H, V = cfg.d_model, cfg.n_layers, cfg.n_heads, cfg.vocab_size
    C = min(cfg.chunk_size or 64, window)
    block = 20 * D + 4 * C * H  # one block's intermediates per token
    per_token = (L + 1) * D + block if cfg.checkpoint_activations else L * block
    J, A = len(cfg.kmer_orders or []), len(cfg.kmer_alphabet or [])
    per_token += 4 * V + 6 * J * A
    tables = 2 * batch_size * J * (cfg.kmer_buckets or 0) * (A + 1) * 4
    if n_params is None:
        n_params = 12 * L * D * D + 2 * V * D
    return 4 * batch_size * window * per_token + tables + 16 * n_params + TORCH_BASE


def available_bytes() -> int | None:
    """Memory this process may still use: MemAvailable of /proc/meminfo (None where it cannot be read)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def check_fits(cfg: ModelConfig, batch_size: int, window: int, device: str = "cpu") -> None:
    """Refuse a CPU run whose estimated step does not fit in the available memory (``UserInputError``, one line)."""
    if device != "cpu" or os.environ.get("STRANDLINE_SKIP_MEMORY_CHECK") == "1":
        return
    have = available_bytes()
    need = train_step_bytes(cfg, batch_size, window)
    if have is None or need <= have:
        return
    hint = "" if cfg.checkpoint_activations else ", turn on model.model.checkpoint_activations"
    raise UserInputError(
        f"a training step of {batch_size} x {window:,} tokens needs about {need / 2**30:.1f} GiB and "
        f"{have / 2**30:.1f} GiB are available: lower data.window or data.batch_size{hint} "
        "(STRANDLINE_SKIP_MEMORY_CHECK=1 starts anyway)"
    )
