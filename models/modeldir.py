"""The model directory, Strandline's exchange format: ``config.json`` + ``model.safetensors``.

Writing one never deletes anything: a new or empty directory is filled, an existing model directory has
exactly its two files replaced (each written to a temporary name, both renamed only once both are
complete), and any other non-empty directory is refused. Other files in a model directory (e.g. a
summarizer's salience head) are left alone. Reading is ``models.io.load``; this module does not import
the LM class, so ``LinearTransformerLM.save`` can use it without an import cycle.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from safetensors.torch import save_model as st_save_model
from torch import nn

from .errors import UserInputError
from .files import atomic_output

FORMAT = "strandline-model"
VERSION = 1
CONFIG, WEIGHTS = "config.json", "model.safetensors"


class ModelLoadError(UserInputError):
    """A path that is not a Strandline model directory or checkpoint; the message is one line for users."""


class ModelSaveError(UserInputError):
    """A model directory that cannot or must not be written (not empty and not ours, unwritable)."""


def read_config(path: Path) -> dict:
    """The parsed ``config.json`` of a model directory; ModelLoadError if missing, not JSON or not ours."""
    cfg_path = path / CONFIG
    try:
        cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ModelLoadError(f"{path}: not a model directory (needs {CONFIG} and {WEIGHTS})") from None
    except OSError as e:
        raise ModelLoadError(f"{cfg_path}: cannot read ({e.strerror or e})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ModelLoadError(f"{cfg_path}: not valid JSON ({str(e).splitlines()[0]})") from None
    if not isinstance(cfg, dict) or cfg.get("format") != FORMAT:
        raise ModelLoadError(f"{cfg_path}: not a Strandline model config (format != {FORMAT!r})")
    version = cfg.get("version", VERSION)
    if isinstance(version, bool) or not isinstance(version, int) or version > VERSION:
        raise ModelLoadError(f"{cfg_path}: model format version {version!r}; this Strandline reads up to {VERSION}")
    for key, kind in (("tokenizer", str), ("training", dict)):
        if cfg.get(key) is not None and not isinstance(cfg[key], kind):
            shown = "a string" if kind is str else "an object"
            raise ModelLoadError(f"{cfg_path}: {key!r} must be {shown} or null, got {cfg[key]!r}")
    return cfg


def is_model_dir(path: str | Path) -> bool:
    """True for a directory whose ``config.json`` is a Strandline model config."""
    path = Path(path)
    if not path.is_dir():
        return False
    try:
        read_config(path)
    except ModelLoadError:
        return False
    return True


def check_model_dir_target(path: str | Path) -> Path:
    """Refuse, before any work, a target that ``save_model`` must not write (see the module docstring)."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ModelSaveError(f"{path}: exists and is not a directory")
    existing = next((d for d in path.parents if d.exists()), Path("."))
    if not path.exists() and not existing.is_dir():
        raise ModelSaveError(f"{path}: {existing} is not a directory")
    if path.is_dir():
        if not os.access(path, os.W_OK | os.X_OK):
            raise ModelSaveError(f"{path}: cannot write in this directory (permission denied)")
        if any(path.iterdir()) and not is_model_dir(path):
            raise ModelSaveError(
                f"{path}: not empty and not a Strandline model directory; refusing to write into it "
                "(give a new or empty directory)"
            )
    return path


def save_model(model: nn.Module, path, tokenizer: str | None = None, training: dict | None = None) -> Path:
    """Write ``path/config.json`` and ``path/model.safetensors`` (see the module docstring for what is refused).

    Args:
        model: a ``LinearTransformerLM`` (its ``config`` and ``meta`` are saved with the weights).
        path: a new, empty, or existing model directory.
        tokenizer: tokenizer kind ('dna' or 'bytes'); default: the model's ``meta``.
        training: JSON-able training facts; default: the model's ``meta``.

    Raises:
        ModelSaveError: the target is a file, a non-empty directory that is not a model directory, or unwritable.
    """
    path = check_model_dir_target(path)
    meta = dict(getattr(model, "meta", {}) or {})
    cfg = {
        "format": FORMAT,
        "version": VERSION,
        "model": model.config.to_dict(),
        "tokenizer": tokenizer if tokenizer is not None else meta.get("tokenizer"),
        "training": training if training is not None else meta.get("training", {}),
    }
    created = not path.exists()
    try:
        path.mkdir(parents=True, exist_ok=True)
        # both files are complete under temporary names before either is renamed into place
        with atomic_output(path / WEIGHTS) as weights, atomic_output(path / CONFIG) as config:
            st_save_model(model, str(weights))  # save_model (not save_file) handles the tied embedding
            config.write_text(json.dumps(cfg, indent=2) + "\n", encoding="utf-8")
    except OSError as e:
        if created and path.is_dir() and not any(path.iterdir()):
            path.rmdir()  # only the empty directory this call made
        raise ModelSaveError(f"{path}: cannot write the model ({e.strerror or e})") from None
    return path
