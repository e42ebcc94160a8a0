"""Save and load a model state (e.g. to resume a genome scan after a crash) with safetensors."""

from __future__ import annotations

import json
import os
from pathlib import Path

from safetensors.torch import load_file, save_file

from .layers import KVState, LinearState

_KINDS = {"linear": LinearState, "kv": KVState}


def save_state(state: tuple, path, metadata: dict | None = None) -> None:
    """Write ``state`` (one LinearState/KVState per layer) and JSON-able ``metadata`` atomically."""
    tensors, kinds = {}, []
    for i, s in enumerate(state):
        kinds.append("linear" if isinstance(s, LinearState) else "kv")
        for name, t in s._asdict().items():
            if t is not None:
                tensors[f"{i}.{name}"] = t.detach().contiguous().cpu()
    meta = {"kinds": json.dumps(kinds), "user": json.dumps(metadata or {})}
    tmp = f"{path}.tmp"
    save_file(tensors, tmp, metadata=meta)
    os.replace(tmp, path)


def load_state(path, device=None) -> tuple[tuple, dict]:
    """Inverse of ``save_state``: returns (state, metadata)."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata() or {}
    tensors = load_file(str(Path(path)), device=str(device or "cpu"))
    state = []
    for i, kind in enumerate(json.loads(meta["kinds"])):
        cls = _KINDS[kind]
        state.append(cls(**{name: tensors.get(f"{i}.{name}") for name in cls._fields}))
    return tuple(state), json.loads(meta.get("user", "{}"))
