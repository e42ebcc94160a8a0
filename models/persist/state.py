"""Save and load a model state (e.g. to resume a genome scan after a crash) with safetensors."""

from __future__ import annotations

import json

from safetensors import safe_open
from safetensors.torch import load_file, save_file

from strandline.errors import UserInputError, first_line
from strandline.files import atomic_output
from strandline.models.layers import KVState, LinearState, WindowKVState
from strandline.models.ops.kmer import RecallState

_KINDS = {"linear": LinearState, "kv": KVState, "window": WindowKVState, "recall": RecallState}
"""The state class of each saved kind; a field missing from an older file (a later optional one) loads as None."""


class StateFileError(UserInputError):
    """A state file that is corrupt, truncated or not a saved state; one line naming it."""


def save_state(state: tuple, path, metadata: dict | None = None) -> None:
    """Write ``state`` (one LinearState/KVState/WindowKVState per layer, a RecallState last) and JSON-able ``metadata`` atomically."""
    tensors, kinds = {}, []
    for i, s in enumerate(state):
        kinds.append(next((kind for kind, cls in _KINDS.items() if isinstance(s, cls)), "kv"))
        for name, t in s._asdict().items():
            if t is not None:
                tensors[f"{i}.{name}"] = t.detach().contiguous().cpu()
    meta = {"kinds": json.dumps(kinds), "user": json.dumps(metadata or {})}
    with atomic_output(path) as tmp:
        save_file(tensors, str(tmp), metadata=meta)


def load_state(path, device=None) -> tuple[tuple, dict]:
    """Inverse of ``save_state``: returns (state, metadata); ``StateFileError`` if the file is not one."""
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
        tensors = load_file(str(path), device=str(device or "cpu"))
        kinds, user = json.loads(meta["kinds"]), json.loads(meta.get("user", "{}"))
        state = []
        for i, kind in enumerate(kinds):
            cls = _KINDS[kind]
            state.append(cls(**{name: tensors.get(f"{i}.{name}") for name in cls._fields}))
    except Exception as e:  # safetensors, JSON and key errors of a corrupt, truncated or foreign file
        msg = first_line(e)
        raise StateFileError(f"{path}: not a readable saved state ({type(e).__name__}: {msg})") from None
    return tuple(state), user
