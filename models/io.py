"""Model directories (config.json + model.safetensors) and loading from Lightning checkpoints.

A model directory is the exchange format: ``model.save(dir)`` writes it, ``models.load(dir)`` reads it.
``models.load`` also accepts a Lightning ``.ckpt`` written by the training task; it is opened with
``torch.load(weights_only=True)``, so no pickled code from an untrusted file is ever run.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import torch
from safetensors.torch import load_model as st_load_model
from safetensors.torch import save_model as st_save_model

from .config import ModelConfig
from .lm import LinearTransformerLM

FORMAT = "strandline-model"
VERSION = 1


class ModelLoadError(ValueError):
    """A path that is not a Strandline model directory or checkpoint; the message is one line for users."""


def save_model(model: LinearTransformerLM, path, tokenizer: str | None = None, training: dict | None = None) -> Path:
    """Write ``path/config.json`` and ``path/model.safetensors`` atomically (temp dir, then rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = dict(model.meta)
    cfg = {
        "format": FORMAT,
        "version": VERSION,
        "model": model.config.to_dict(),
        "tokenizer": tokenizer if tokenizer is not None else meta.get("tokenizer"),
        "training": training if training is not None else meta.get("training", {}),
    }
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        (tmp / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
        st_save_model(model, str(tmp / "model.safetensors"))  # save_model handles the tied embedding
        if path.exists():
            shutil.rmtree(path)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return path


def load(path, map_location: str | torch.device = "cpu") -> LinearTransformerLM:
    """Load a model directory or a Lightning ``.ckpt``; raises ``ModelLoadError`` with a one-line reason."""
    path = Path(path)
    if not path.exists():
        raise ModelLoadError(f"{path}: no such model directory or checkpoint")
    if path.is_dir():
        return _load_dir(path, map_location)
    return _load_ckpt(path, map_location)


def _load_dir(path: Path, map_location) -> LinearTransformerLM:
    cfg_path, weights = path / "config.json", path / "model.safetensors"
    if not cfg_path.is_file() or not weights.is_file():
        raise ModelLoadError(f"{path}: not a model directory (needs config.json and model.safetensors)")
    try:
        cfg = json.loads(cfg_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ModelLoadError(f"{cfg_path}: not valid JSON ({e})") from None
    if not isinstance(cfg, dict) or cfg.get("format") != FORMAT:
        raise ModelLoadError(f"{cfg_path}: not a Strandline model config (format != {FORMAT!r})")
    model = _build(cfg.get("model"), cfg_path)
    try:
        missing, unexpected = st_load_model(model, str(weights), strict=False, device=str(map_location))
    except Exception as e:  # safetensors raises several types for corrupt or mismatched files
        raise ModelLoadError(f"{weights}: cannot read weights ({type(e).__name__}: {e})") from None
    if missing or unexpected:
        raise ModelLoadError(
            f"{weights}: weights do not match config.json (missing {missing[:3]}, unexpected {unexpected[:3]})"
        )
    model.meta = {"tokenizer": cfg.get("tokenizer"), "training": cfg.get("training") or {}}
    return model.eval()


def _load_ckpt(path: Path, map_location) -> LinearTransformerLM:
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as e:
        raise ModelLoadError(
            f"{path}: not a model directory or a readable Lightning checkpoint ({type(e).__name__})"
        ) from None
    hp = ckpt.get("hyper_parameters") if isinstance(ckpt, dict) else None
    if not isinstance(hp, dict) or "model" not in hp or "state_dict" not in ckpt:
        raise ModelLoadError(f"{path}: not a Strandline checkpoint (no model hyperparameters)")
    model = _build(hp["model"], path)
    sd = {k.removeprefix("model."): v for k, v in ckpt["state_dict"].items() if k.startswith("model.")}
    try:
        model.load_state_dict(sd, strict=True)
    except RuntimeError as e:
        raise ModelLoadError(f"{path}: weights do not match the model config ({str(e).splitlines()[0]})") from None
    model.meta = {
        "tokenizer": hp.get("tokenizer"),
        "training": {"checkpoint": str(path), "global_step": ckpt.get("global_step")},
    }
    return model.eval()


def _build(model_cfg, where) -> LinearTransformerLM:
    if not isinstance(model_cfg, dict):
        raise ModelLoadError(f"{where}: missing the 'model' config")
    try:
        return LinearTransformerLM(ModelConfig.from_dict(model_cfg))
    except (TypeError, ValueError) as e:
        raise ModelLoadError(f"{where}: bad model config ({e})") from None
