"""Save and load a model state (e.g. to resume a genome scan after a crash) with safetensors.

The file records the state's structure explicitly (format 2): the metadata names the kind of every layer
state (``layers``, in block order) and of the memory's state (``memory``, or null for a model without one),
and each tensor is stored as ``layers.<i>.<field>`` or ``memory.<field>``. A saved None (nothing to carry)
has ``layers`` null. Files of format 1 (no ``format`` key: a flat list of ``kinds`` whose entry ``recall``,
the k-mer memory, came last) still load, into the same ``LMState``.
"""

from __future__ import annotations

import json

from safetensors import safe_open
from safetensors.torch import load_file, save_file

from strandline.errors import UserInputError, first_line
from strandline.files import atomic_output
from strandline.models.layers import KVState, LinearState, WindowKVState
from strandline.models.ops.kmer import KmerMemoryState
from strandline.models.state import LMState, rebuild

FORMAT = 2
"""The state file format this version writes (and the newest it reads)."""
LAYER_KINDS = {"linear": LinearState, "kv": KVState, "window": WindowKVState}
"""The state class of each saved layer kind; a field missing from an older file (a later optional one) loads as None."""
MEMORY_KINDS = {"kmer": KmerMemoryState}
"""The state class of each saved memory kind."""
_OLD_MEMORY_KINDS = {"recall": "kmer"}  # format 1's name of the k-mer memory


class StateFileError(UserInputError):
    """A state file that is corrupt, truncated, not a saved state or of a newer format; one line naming it."""


def _kind(part, kinds: dict) -> str:
    kind = next((k for k, cls in kinds.items() if isinstance(part, cls)), None)
    if kind is None:
        raise TypeError(f"cannot save a state part of type {type(part).__name__}")
    return kind


def save_state(state: LMState | None, path, metadata: dict | None = None) -> None:
    """Write ``state`` (an ``LMState``, or None: nothing to carry) and JSON-able ``metadata`` atomically."""
    tensors, layers, memory = {}, None, None
    if state is not None:
        layers = [_kind(s, LAYER_KINDS) for s in state.layers]
        parts = [(f"layers.{i}", s) for i, s in enumerate(state.layers)]
        if state.memory is not None:
            memory = _kind(state.memory, MEMORY_KINDS)
            parts.append(("memory", state.memory))
        for prefix, part in parts:
            for name, t in part._asdict().items():
                if t is not None:
                    tensors[f"{prefix}.{name}"] = t.detach().contiguous().cpu()
    meta = {"format": str(FORMAT), "layers": json.dumps(layers), "memory": json.dumps(memory),
            "user": json.dumps(metadata or {})}  # fmt: skip
    with atomic_output(path) as tmp:
        save_file(tensors, str(tmp), metadata=meta)


def load_state(path, device=None) -> tuple[LMState | None, dict]:
    """Inverse of ``save_state``: returns (state or None, metadata); ``StateFileError`` if the file is not one."""
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
        version = int(meta.get("format", 1))
    except Exception as e:  # safetensors and int() errors of a corrupt, truncated or foreign file
        raise StateFileError(f"{path}: not a readable saved state ({type(e).__name__}: {first_line(e)})") from None
    if version > FORMAT:
        raise StateFileError(f"{path}: a state file of format {version}; this strandline reads formats 1 to {FORMAT}")
    try:
        tensors = load_file(str(path), device=str(device or "cpu"))
        state = _read_v2(meta, tensors) if version == 2 else _read_v1(meta, tensors)
        user = json.loads(meta.get("user", "{}"))
    except Exception as e:  # safetensors, JSON and key errors of a corrupt, truncated or foreign file
        raise StateFileError(f"{path}: not a readable saved state ({type(e).__name__}: {first_line(e)})") from None
    return state, user


def _part(cls, tensors: dict, prefix: str):
    return rebuild(cls, {name: tensors.get(f"{prefix}.{name}") for name in cls._fields})


def _read_v2(meta: dict, tensors: dict) -> LMState | None:
    layers, memory = json.loads(meta["layers"]), json.loads(meta["memory"])
    if layers is None:
        return None
    states = tuple(_part(LAYER_KINDS[k], tensors, f"layers.{i}") for i, k in enumerate(layers))
    mem = None if memory is None else _part(MEMORY_KINDS[memory], tensors, "memory")
    return LMState(states, mem)


def _read_v1(meta: dict, tensors: dict) -> LMState | None:
    """Format 1: ``kinds``, one per entry of a flat tuple, tensors ``<i>.<field>``; () was saved for None."""
    kinds = json.loads(meta["kinds"])
    if not kinds:
        return None
    memory = None
    if kinds[-1] in _OLD_MEMORY_KINDS:
        memory = _part(MEMORY_KINDS[_OLD_MEMORY_KINDS[kinds[-1]]], tensors, str(len(kinds) - 1))
        kinds = kinds[:-1]
    layers = tuple(_part(LAYER_KINDS[k], tensors, str(i)) for i, k in enumerate(kinds))
    return LMState(layers, memory)
