"""The LM's state as one named value, and the protocol a model-level memory follows.

``LMState(layers, memory)``: ``layers`` holds one state per block, in block order (``LinearState``,
``KVState`` or ``WindowKVState``, ``models/layers.py``); ``memory`` is the state of the model's memory beside
the layers (the k-mer memory's ``KmerMemoryState``), or None for a model without one. Both fields are always
there, so a state never has entries by position that may or may not exist.

The state contract (docs/architecture.md): a state is a value. Every call returns a new ``LMState`` and never
changes the one passed in, so a state can be forked, saved (``models/persist/state.py``), carried across
training windows (``tasks/lm.py``) and resumed. Every tensor of every field has the batch in dim 0, so a
carried state is reset row by row (``LMState.map``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from torch import Tensor, nn

from strandline.models.ops.linear import Mode


class LMState(NamedTuple):
    """Where a ``LinearTransformerLM`` stands in its stream(s): the layers' states and the memory's."""

    layers: tuple  # one LinearState / KVState / WindowKVState per block, in block order
    memory: NamedTuple | None  # the memory's state (a NamedTuple of tensors), None when the model has none

    def tensors(self) -> Iterator[Tensor]:
        """Every tensor of the state (absent layer buffers, which are None, skipped)."""
        for part in (*self.layers, self.memory):
            if part is not None:
                yield from (t for t in part if isinstance(t, Tensor))

    def map(self, fn: Callable[[Tensor], Tensor]) -> LMState:
        """A new state with ``fn`` applied to every tensor (None buffers stay None); types and fields kept."""

        def each(part):
            if part is None:
                return None
            return type(part)(*(fn(t) if isinstance(t, Tensor) else t for t in part))

        return LMState(tuple(each(s) for s in self.layers), each(self.memory))

    def nbytes(self) -> int:
        """Bytes held: constant for linear layers and the memory, growing for a KV cache."""
        return sum(t.numel() * t.element_size() for t in self.tensors())


def rebuild(cls: type, fields: dict):
    """A state part of NamedTuple class ``cls`` from saved fields (a file, a checkpoint). A class with a
    ``from_fields`` classmethod builds itself (and may fill in fields that older saves lack); a field absent
    from ``fields`` is passed as None otherwise."""
    if hasattr(cls, "from_fields"):
        return cls.from_fields(fields)
    return cls(**{name: fields.get(name) for name in cls._fields})


class Memory(nn.Module):
    """A memory beside the layers that reads the tokens and adjusts the logits (the k-mer memory).

    The LM calls it without knowing what it holds::

        read, new_state = memory(tokens, state, mode, need_state)   # tokens [B, T]; state None: the start
        logits = memory.mix(logits, hidden, read)                  # logits [B, T, V], hidden [B, T, D]

    Its state is a NamedTuple of tensors with the batch in dim 0, returned new on every call (a
    ``from_fields`` classmethod on it lets ``rebuild`` read older saved forms). ``need_state``
    False says the new state will be thrown away (a training window read from the start, no state carried):
    a memory may then skip building it and return None, and that state cannot be continued. ``donate``
    True says the state passed in will not be used again (training carries one state forward), so the memory
    may write into it instead of copying it.
    """

    def init_state(self, batch_size: int, dtype, device=None) -> NamedTuple:
        """The empty memory for ``batch_size`` streams, accumulating in ``dtype``."""
        raise NotImplementedError

    def forward(
        self, tokens: Tensor, state: Any, mode: Mode, need_state: bool = True, donate: bool = False
    ) -> tuple[Any, Any]:
        """tokens [B, T] -> (what the memory read at each position, the new state or None). ``donate``: the
        caller will not use ``state`` again, so the memory may update its tensors in place (no copies)."""
        raise NotImplementedError

    def mix(self, logits: Tensor, hidden: Tensor, read: Any) -> Tensor:
        """The LM's logits [B, T, V] with what the memory read mixed in (same shape and dtype)."""
        raise NotImplementedError
