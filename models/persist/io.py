"""Loading a model: a model directory (``strandline.models.persist.modeldir``) or a Lightning checkpoint (``strandline.models.persist.checkpoint``).

``models.load(path)`` accepts either and raises ``ModelLoadError`` (a ``UserInputError``) with one line for
anything unusable: a missing path, a config with a wrong key, type or value, weights that do not fit the
config (missing or extra layers, other shapes), a corrupt or random file. Everything is checked before
the weights are copied in, so no error leaves a half-loaded model.
"""

from __future__ import annotations

import re
import types
from dataclasses import fields
from pathlib import Path
from typing import Literal, Union, get_args, get_origin, get_type_hints

import torch
from safetensors import safe_open
from safetensors.torch import load_model as st_load_model

from strandline.errors import first_line
from strandline.models.config import ModelConfig
from strandline.models.lm import LinearTransformerLM, current_weight_name
from strandline.models.persist.checkpoint import CheckpointParts, read_checkpoint
from strandline.models.persist.modeldir import WEIGHTS, ModelLoadError, ModelSaveError, read_config, save_model
from strandline.resources import resolve

__all__ = ["ModelLoadError", "ModelSaveError", "check_checkpoint", "load", "save_model"]


def load(path, map_location: str | torch.device = "cpu") -> LinearTransformerLM:
    """Load a model directory, a Lightning ``.ckpt`` or a shipped model by name (``"dna-corpus-tbptt"``); raises
    ``ModelLoadError`` with a one-line reason."""
    path = Path(resolve(str(path)))
    if not path.exists():
        raise ModelLoadError(f"{path}: no such model directory or checkpoint")
    if path.is_dir():
        return _load_dir(path, map_location)
    return _load_checkpoint(path, map_location)[0]


def check_checkpoint(path, map_location: str | torch.device = "cpu") -> CheckpointParts:
    """Everything ``load`` checks of a ``.ckpt`` (read safely, config, weights' names, shapes, dtypes, finite),
    for a checkpoint that Lightning itself will load next (``fit --ckpt_path``, ``convert --resume``)."""
    return _load_checkpoint(Path(path), map_location)[1]


def _load_checkpoint(path: Path, map_location) -> tuple[LinearTransformerLM, CheckpointParts]:
    parts = read_checkpoint(path, map_location)
    model = _build(parts.config, path)
    sd = parts.state_dict
    _check_weights(model, {k: tuple(v.shape) for k, v in sd.items()}, path, {k: str(v.dtype) for k, v in sd.items()})
    model.load_state_dict(sd, strict=True)
    _check_finite(model, path)
    training = {"checkpoint": str(path), "global_step": parts.global_step}
    if parts.context is not None:
        training["context"] = parts.context  # the sliding window a softmax model streams with (models/streaming.py)
    model.meta = {"tokenizer": parts.tokenizer, "training": training}
    return model.eval(), parts


def _load_dir(path: Path, map_location) -> LinearTransformerLM:
    cfg = read_config(path)
    weights = path / WEIGHTS
    if not weights.is_file():
        raise ModelLoadError(f"{path}: not a model directory (no {WEIGHTS})")
    model = _build(cfg.get("model"), path / "config.json")
    try:
        with safe_open(str(weights), framework="pt") as f:
            shapes = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}  # noqa: SIM118 - not a dict
            dtypes = {k: f.get_slice(k).get_dtype() for k in shapes}  # "F32", "BF16", "I64", ...
    except Exception as e:  # safetensors raises several types for corrupt, truncated or random files
        raise ModelLoadError(f"{weights}: cannot read weights ({type(e).__name__}: {first_line(e)})") from None
    _check_weights(model, shapes, weights, dtypes)
    try:
        st_load_model(model, str(weights), strict=False, device=str(map_location))
    except Exception as e:
        raise ModelLoadError(f"{weights}: cannot read weights ({type(e).__name__}: {first_line(e)})") from None
    _check_finite(model, weights)
    model.meta = {"tokenizer": cfg.get("tokenizer"), "training": cfg.get("training") or {}}
    return model.eval()


def _check_finite(model: LinearTransformerLM, where) -> None:
    """Refuse NaN or infinite weights (a diverged run, a corrupt file): every score would be NaN, and a scan
    would write an empty track that looks complete."""
    bad = [k for k, t in model.state_dict().items() if t.is_floating_point() and not bool(torch.isfinite(t).all())]
    if bad:
        raise ModelLoadError(
            f"{where}: {len(bad)} weight tensor(s) hold NaN or infinite values, e.g. {bad[0]} (a diverged or corrupt model)"
        )


def _build(model_cfg, where) -> LinearTransformerLM:
    if not isinstance(model_cfg, dict):
        raise ModelLoadError(f"{where}: missing the 'model' config")
    try:
        model_cfg = ModelConfig.renamed_keys(model_cfg)  # older keys under their names now, for _check_types
    except ValueError as e:
        raise ModelLoadError(f"{where}: bad model config ({first_line(e)})") from None
    _check_types(model_cfg, where)
    try:
        return LinearTransformerLM(ModelConfig.from_dict(model_cfg))
    except (TypeError, ValueError) as e:
        raise ModelLoadError(f"{where}: bad model config ({first_line(e)})") from None


def _allowed(tp) -> tuple[type, ...]:
    """Python types a JSON value may have for a field annotated ``tp`` (Literal, unions, list[...], scalars)."""
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        return tuple(t for a in get_args(tp) for t in _allowed(a))
    if origin is Literal:
        return tuple({type(a) for a in get_args(tp)})
    if origin in (list, tuple):
        return (list, tuple)
    if tp is float:
        return (float, int)
    return (tp,) if isinstance(tp, type) else (object,)


def _check_types(model_cfg: dict, where) -> None:
    """One line naming the key when a config value has the wrong type (e.g. ``"d_model": "128"``)."""
    hints = get_type_hints(ModelConfig)
    shown = {f.name: str(f.type) for f in fields(ModelConfig)}
    for key, value in model_cfg.items():
        if key not in hints:
            continue  # unknown keys: ModelConfig.from_dict names them
        allowed = _allowed(hints[key])
        is_bool_for_number = isinstance(value, bool) and bool not in allowed
        if is_bool_for_number or not isinstance(value, allowed):
            raise ModelLoadError(f"{where}: model config {key} must be {shown[key]}, got {value!r}")


def _n_blocks(keys) -> int:
    found = [int(m.group(1)) for k in keys if (m := re.match(r"blocks\.(\d+)\.", k))]
    return max(found) + 1 if found else 0


def _is_float_dtype(name: str) -> bool:
    """A stored dtype's name, from safetensors ("F32", "BF16", "F8_E4M3") or torch ("torch.float32"), is floating."""
    return name.startswith(("F", "BF", "torch.float", "torch.bfloat")) or name == "torch.half"


def _check_weights(model: LinearTransformerLM, shapes: dict[str, tuple], where, dtypes: dict[str, str]) -> None:
    """Compare the stored weights' names, shapes and dtypes with the model's before anything is copied in
    (integer weights would be cast silently and score every base the same)."""
    expected = model.state_dict()
    shapes = {current_weight_name(k): v for k, v in shapes.items()}  # older names load (the model renames them too)
    dtypes = {current_weight_name(k): v for k, v in dtypes.items()}
    n_file, n_cfg = _n_blocks(shapes), model.config.n_layers
    if n_file != n_cfg:
        raise ModelLoadError(
            f"{where}: weights do not match the model config (the weights have {n_file} layers, n_layers is {n_cfg})"
        )
    tied: dict[int, list[str]] = {}  # a shared tensor (the tied embedding) is stored under one of its names
    for k, t in expected.items():
        if t.numel():  # empty tensors all share data_ptr 0
            tied.setdefault(t.data_ptr(), []).append(k)
    missing = [k for k in expected if k not in shapes and not set(tied.get(expected[k].data_ptr(), [])) & set(shapes)]
    unexpected = sorted(set(shapes) - set(expected))
    if missing or unexpected:
        raise ModelLoadError(
            f"{where}: weights do not match the model config ({len(missing)} missing, e.g. {missing[:2]}; "
            f"{len(unexpected)} unexpected, e.g. {unexpected[:2]})"
        )
    for k, shape in shapes.items():
        if tuple(expected[k].shape) != tuple(shape):
            raise ModelLoadError(
                f"{where}: weights do not match the model config ({k} has shape {list(shape)}, "
                f"the config needs {list(expected[k].shape)})"
            )
        if _is_float_dtype(dtypes[k]) != expected[k].is_floating_point():
            raise ModelLoadError(
                f"{where}: {k} is stored as {dtypes[k].removeprefix('torch.')}; the model needs "
                f"{str(expected[k].dtype).removeprefix('torch.')} (a floating-point dtype)"
            )
