"""The model directory, Strandline's exchange format: ``config.json`` + ``model.safetensors``.

Writing one never deletes anything the user made: a new or empty directory is filled; an existing model
directory is replaced only when the caller asks (``overwrite``), and then as a whole: every file is written
into a temporary sibling directory, which is swapped in once complete, so the result holds exactly the new
model's files (a summarizer's salience head is not kept beside another LM). A model directory holding files
that this tool does not write (``OWN_FILES``), and any other non-empty directory, is refused. Files get the
usual permissions (0666 & ~umask). Reading is ``strandline.models.persist.io.load``; this module does not import the LM class,
so ``LinearTransformerLM.save`` can use it without an import cycle.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from pathlib import Path

from safetensors.torch import save_model as st_save_model
from torch import nn

from strandline.errors import UserInputError
from strandline.files import file_mode

FORMAT = "strandline-model"
VERSION = 1
CONFIG, WEIGHTS = "config.json", "model.safetensors"
CARD = "README.md"
OWN_FILES = frozenset({CONFIG, WEIGHTS, CARD, "salience.json", "salience.safetensors"})
"""Every file a model directory written by this tool can hold (the LM, its model card, a summarizer's head)."""


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


def check_model_dir_target(path: str | Path, overwrite: bool = False) -> Path:
    """Refuse, before any work, a target that ``save_model`` must not write (see the module docstring)."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ModelSaveError(f"{path}: exists and is not a directory")
    existing = next((d for d in path.parents if d.exists()), Path("."))
    if not path.exists() and not existing.is_dir():
        raise ModelSaveError(f"{path}: {existing} is not a directory")
    if not os.access(path if path.is_dir() else existing, os.W_OK | os.X_OK):
        raise ModelSaveError(f"{path}: cannot write in {path if path.is_dir() else existing} (permission denied)")
    if not path.is_dir() or not any(path.iterdir()):
        return path
    if not is_model_dir(path):
        raise ModelSaveError(
            f"{path}: not empty and not a Strandline model directory; refusing to write into it "
            "(give a new or empty directory)"
        )
    if not overwrite:
        raise ModelSaveError(f"{path}: already holds a model; pass --overwrite to replace it, or give a new directory")
    foreign = sorted(p.name for p in path.iterdir() if p.name not in OWN_FILES or not p.is_file())
    if foreign:
        raise ModelSaveError(
            f"{path}: holds files that are not a model's ({', '.join(foreign[:3])}); refusing to replace it"
        )
    if not os.access(path.parent if str(path.parent) else ".", os.W_OK | os.X_OK):
        raise ModelSaveError(f"{path}: cannot replace it, {path.parent} is not writable (permission denied)")
    return path


def save_model(
    model: nn.Module,
    path,
    tokenizer: str | None = None,
    training: dict | None = None,
    overwrite: bool = False,
    extra: dict[str, bytes] | None = None,
) -> Path:
    """Write ``path/config.json`` and ``path/model.safetensors`` (see the module docstring for what is refused).

    Args:
        model: a ``LinearTransformerLM`` (its ``config`` and ``meta`` are saved with the weights).
        path: a new or empty directory, or (with ``overwrite``) an existing model directory to replace.
        tokenizer: tokenizer kind ('dna' or 'bytes'); default: the model's ``meta``.
        training: JSON-able training facts; default: the model's ``meta``.
        overwrite: replace an existing model directory (else it is refused).
        extra: more files of the directory, name (one of ``OWN_FILES``) -> bytes, written with the model.

    Raises:
        ModelSaveError: the target is a file, a non-empty directory that is not a model directory (or holds
            other files), an existing model directory without ``overwrite``, or unwritable.
    """
    path = check_model_dir_target(path, overwrite)
    if path.is_symlink():
        path = Path(os.path.realpath(path))  # replace the directory it names, not the link
    meta = dict(getattr(model, "meta", {}) or {})
    cfg = {
        "format": FORMAT,
        "version": VERSION,
        "model": model.config.to_dict(),
        "tokenizer": tokenizer if tokenizer is not None else meta.get("tokenizer"),
        "training": training if training is not None else meta.get("training", {}),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = None
    try:
        staging = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
        st_save_model(model, str(staging / WEIGHTS))  # save_model (not save_file) handles the tied embedding
        (staging / CONFIG).write_text(json.dumps(cfg, indent=2) + "\n", encoding="utf-8")
        extra = {CARD: model_card(cfg, getattr(model, "num_params", lambda: None)()).encode(), **(extra or {})}
        for name, data in extra.items():
            (staging / name).write_bytes(data)
        for f in staging.iterdir():
            os.chmod(f, file_mode())  # safetensors writes its file 0600, as mkstemp does
        os.chmod(staging, file_mode(directory=True))  # mkdtemp makes 0700
        _swap_in(staging, path)
    except OSError as e:
        raise ModelSaveError(f"{path}: cannot write the model ({e.strerror or e})") from None
    finally:
        if staging is not None and staging.exists():
            shutil.rmtree(staging)  # the temporary directory this call made, never the target
    return path


def model_card(cfg: dict, n_params: int | None = None) -> str:
    """A model card (README.md) from what ``config.json`` knows; its author adds data, metrics and limits."""
    m, training = cfg["model"], cfg.get("training") or {}
    rows = [
        ("tokenizer", cfg.get("tokenizer")),
        ("attention", m.get("attention")),
        ("d_model", m.get("d_model")),
        ("layers", m.get("n_layers")),
        ("heads", m.get("n_heads")),
        ("parameters", n_params and f"{n_params:,}"),
    ]
    rows += [(k, v) for k, v in training.items() if isinstance(v, str | int | float)]
    table = "\n".join(f"| {k} | {v} |" for k, v in rows if v not in (None, ""))
    return (
        "# Model card\n\nWritten by `strandline export` from the model's `config.json`. Add what a user needs before\n"
        "relying on it: every training file and its licence, the recipe, held-out metrics beside a simple baseline,\n"
        f"the intended use and the limits.\n\n| field | value |\n| --- | --- |\n{table}\n"
    )


def _swap_in(staging: Path, path: Path) -> None:
    """Rename the complete ``staging`` directory onto ``path``; an old model directory there is moved aside
    first and only its own files (``OWN_FILES``, checked before any work) are removed afterwards."""
    if not path.exists() or not any(path.iterdir()):
        os.replace(staging, path)  # a rename replaces an empty directory
        return
    old = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".old", dir=path.parent))
    os.replace(path, old)
    try:
        os.replace(staging, path)
    except OSError:
        os.replace(old, path)  # put the old model back
        raise
    for f in old.iterdir():
        if f.name in OWN_FILES:
            f.unlink()
    with contextlib.suppress(OSError):  # a file that appeared meanwhile stays, in the hidden old folder
        old.rmdir()
