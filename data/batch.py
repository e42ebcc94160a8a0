"""The one batch format of every DataModule, read by ``strandline.tasks.lm.LMTask``.

A sample is ``{"input": LongTensor[T], "target": LongTensor[T], "reset": BoolTensor[]}``; the default
collate (or ``stack_samples``) makes ``[B, T]`` / ``[B]`` batches. ``target`` is the next token of each
position, ``strandline.data.tokenizers.IGNORE`` where nothing is scored (N bases, padding, the prompt half of the
copy task); ``reset`` is True when the window starts a new record or document (no state carried in).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

KEYS = ("input", "target", "reset")


def make_sample(inp: np.ndarray | Tensor, target: np.ndarray | Tensor, reset: bool = True) -> dict[str, Tensor]:
    """One sample from input ids [T] and target ids [T] (int64 arrays or tensors)."""
    as_tensor = torch.from_numpy if isinstance(inp, np.ndarray) else torch.as_tensor
    return {"input": as_tensor(inp), "target": as_tensor(target), "reset": torch.tensor(bool(reset))}


def stack_samples(rows: list[dict[str, Tensor]]) -> dict[str, Tensor]:
    """Samples -> one batch ``{"input" [B, T], "target" [B, T], "reset" [B]}``."""
    return {k: torch.stack([r[k] for r in rows]) for k in KEYS}
