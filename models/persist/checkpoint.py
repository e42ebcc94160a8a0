"""The training checkpoint layout, in one place: what a Lightning ``.ckpt`` of ``strandline.tasks.lm.LMTask`` holds.

``LMTask`` saves ``ModelConfig.to_dict()`` as ``hyper_parameters["model"]`` and the tokenizer kind as
``hyper_parameters["tokenizer"]``, and keeps its LM as ``self.model``, so the LM's weights are the
``state_dict`` keys under ``model.``. ``models.load`` reads a checkpoint through ``read_checkpoint`` only;
``tests/test_io.py`` checks the layout against a real ``LMTask``. Checkpoints are opened with
``weights_only=True``: no pickled code from an untrusted file is ever run.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import torch

from strandline.models.persist.modeldir import ModelLoadError

HPARAM_MODEL = "model"
HPARAM_TOKENIZER = "tokenizer"
STATE_PREFIX = "model."
RESUME_KEYS = ("optimizer_states", "lr_schedulers")  # lists in a full checkpoint; absent in a weights-only one


class CheckpointParts(NamedTuple):
    """The LM inside a training checkpoint."""

    config: dict  # ModelConfig.to_dict()
    tokenizer: str | None
    state_dict: dict[str, torch.Tensor]  # the LM's own keys (prefix removed)
    global_step: int | None
    resumable: bool = False  # holds the optimizer and loop state that resuming a run needs (not weights only)
    context: int | None = None  # tokens per training window (the data module's window or seq_len), if recorded


def read_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> CheckpointParts:
    """Open a ``.ckpt`` safely and return the LM's parts; ModelLoadError (one line) if it is not one of ours."""
    path = Path(path)
    if not path.exists():
        raise ModelLoadError(f"{path}: no such model directory or checkpoint")
    if not path.is_file():
        raise ModelLoadError(f"{path}: not a file")
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except OSError as e:
        raise ModelLoadError(f"{path}: cannot read ({e.strerror or e})") from None
    except Exception as e:  # unpickling raises many types for random or truncated files
        raise ModelLoadError(
            f"{path}: not a model directory or a readable Lightning checkpoint ({type(e).__name__})"
        ) from None
    hp = ckpt.get("hyper_parameters") if isinstance(ckpt, dict) else None
    sd = ckpt.get("state_dict") if isinstance(ckpt, dict) else None
    if not isinstance(hp, dict) or not isinstance(hp.get(HPARAM_MODEL), dict) or not isinstance(sd, dict):
        raise ModelLoadError(f"{path}: not a Strandline checkpoint (no model hyperparameters)")
    weights = {k.removeprefix(STATE_PREFIX): v for k, v in sd.items() if k.startswith(STATE_PREFIX)}
    bad = next((k for k, v in weights.items() if not isinstance(v, torch.Tensor)), None)
    if bad is not None:
        raise ModelLoadError(f"{path}: not a Strandline checkpoint (state_dict entry model.{bad} is not a tensor)")
    step = ckpt.get("global_step")
    step = step if isinstance(step, int) else None
    resumable = all(isinstance(ckpt.get(k), list) for k in RESUME_KEYS) and isinstance(ckpt.get("loops"), dict)
    return CheckpointParts(hp[HPARAM_MODEL], hp.get(HPARAM_TOKENIZER), weights, step, resumable, _context(ckpt))


def _context(ckpt: dict) -> int | None:
    """The training window in tokens, from the data module's saved hyperparameters (``window``, ``seq_len``)."""
    dm = ckpt.get("datamodule_hyper_parameters")
    if not isinstance(dm, dict):
        return None
    value = dm.get("window", dm.get("seq_len"))
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
