"""The language model: embedding, blocks, final norm, tied head; parallel or recurrent with one state."""

from __future__ import annotations

import dataclasses
import inspect
import math
from typing import NamedTuple

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from strandline.models.config import ModelConfig
from strandline.models.kmer_memory import KmerMemory
from strandline.models.layers import Block, KVState, sinusoidal_encoding
from strandline.models.ops.linear import Mode
from strandline.models.persist.modeldir import save_model
from strandline.models.state import LMState, Memory

WEIGHT_RENAMES = {"recall.": "memory."}
"""Old weight-name prefix -> new: the k-mer memory's weights were ``recall.*`` before the memory protocol."""


def current_weight_name(name: str) -> str:
    """A stored weight's name as this version calls it (``recall.gate.weight`` -> ``memory.gate.weight``)."""
    for old, new in WEIGHT_RENAMES.items():
        if name.startswith(old):
            return new + name[len(old) :]
    return name


INIT_STD = 0.02
"""Initial std of embeddings and projections (GPT-2); the sinusoidal encoding is added at this scale too."""


class LinearTransformerLM(nn.Module):
    """A causal LM whose linear-attention layers make it an RNN.

    ``logits, state = model(tokens, state)`` runs any number of tokens (chunked mode for T > 1) and
    ``logits, state = model.step(token, state)`` runs one; both continue exactly from ``state`` and return
    a new ``LMState`` (``models/state.py``: the layers' states and the memory's, if the model has one).
    State is reset by passing ``None`` (or ``init_state``) at each document or contig.
    """

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.d_model)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layers))
        self.norm = nn.RMSNorm(config.d_model, eps=config.norm_eps)
        self.head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.gradient_checkpointing = config.checkpoint_activations
        self.meta: dict = {}  # tokenizer kind and training facts, filled by models.load
        self.apply(self._init_weights)
        for name, p in self.named_parameters():  # GPT-2: scale residual projections by 1/sqrt(2L)
            if name.endswith(("mixer.proj.weight", "mlp.2.weight")):
                nn.init.normal_(p, std=INIT_STD / math.sqrt(2 * config.n_layers))
        if config.tie_embeddings:
            self.head.weight = self.embed.weight
        self.memory: Memory | None = KmerMemory(config) if config.kmer_orders else None  # after the init above
        self.register_load_state_dict_pre_hook(_rename_old_weights)

    @staticmethod
    def _init_weights(m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=INIT_STD)
            if getattr(m, "bias", None) is not None:
                nn.init.zeros_(m.bias)

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def init_state(self, batch_size: int, device=None) -> LMState:
        """The zero state (equivalent to ``None``): one entry per layer, and the memory's when the model has one."""
        layers = tuple(b.init_state(batch_size, device) for b in self.blocks)
        dtype = self.config.torch_state_dtype
        return LMState(layers, None if self.memory is None else self.memory.init_state(batch_size, dtype, device))

    def hidden(self, tokens: Tensor, state: LMState | None = None, mode: Mode | None = None) -> tuple[Tensor, LMState]:
        """Final normalized hidden states [B, T, D] and the new state (the memory advanced too)."""
        h, _, state = self._run(tokens, state, mode)
        return h, state

    def _run(
        self, tokens: Tensor, state: LMState | None, mode: Mode | None, need_state: bool = True, donate: bool = False
    ):
        """(hidden [B, T, D], what the memory read (None without one), new state)."""
        mode = mode or ("recurrent" if tokens.shape[1] == 1 else "chunked")
        layers, memory = self._check_state(state)
        read = None
        if self.memory is not None:
            give = {"donate": True} if donate and _takes_donate(self.memory) else {}  # a memory may not take it
            read, memory = self.memory(tokens, memory, mode, need_state, **give)
        h, layers = self._hidden(tokens, layers, mode)
        return h, read, LMState(layers, memory)

    def _check_state(self, state: LMState | None) -> tuple[tuple | None, NamedTuple | None]:
        """(layer states or None, memory state or None) of a state this model can continue; ValueError otherwise."""
        if state is None:
            return None, None
        if not isinstance(state, LMState):
            raise ValueError(f"a model state is an LMState(layers, memory), got {type(state).__name__}")
        if len(state.layers) != len(self.blocks):
            raise ValueError(f"this model has {len(self.blocks)} layers; the state has {len(state.layers)}")
        if (state.memory is None) != (self.memory is None):
            has = "has a memory" if self.memory is not None else "has no memory"
            got = "none" if state.memory is None else f"a {type(state.memory).__name__}"
            raise ValueError(
                f"this model {has}, the state has {got} (a state built with need_state=False cannot be continued)"
            )
        return state.layers, state.memory

    def _hidden(self, tokens: Tensor, state: tuple | None, mode: Mode) -> tuple[Tensor, tuple]:
        x = self.embed(tokens)
        if self.config.position == "sinusoidal":
            x = self._add_positions(x, state)
        states = state if state is not None else (None,) * len(self.blocks)
        new = []
        ckpt = self.gradient_checkpointing and self.training and torch.is_grad_enabled()
        for block, s in zip(self.blocks, states, strict=True):
            if ckpt:
                x, s = checkpoint(block, x, s, mode, use_reentrant=False)
            else:
                x, s = block(x, s, mode)
            new.append(s)
        return self.norm(x), tuple(new)

    def _add_positions(self, x: Tensor, state: tuple | None) -> Tensor:
        """x + the paper's sinusoidal encoding in the last D/2 channels, at the positions the state has reached.

        The paper's copy model concatenates a D/2 token embedding with a D/2 encoding; adding the encoding
        to the last D/2 channels of a full-width embedding contains that as a special case and keeps the
        tied head. The encoding is scaled to the embedding's initial std: at amplitude 1 (the paper's, whose
        embedding had unit scale) it is ~35x the token signal here and the copy task stayed at chance for 400
        steps (docs/training.md). The offset is the first layer's token counter (or its KV cache length).
        """
        B, T, D = x.shape
        start = torch.zeros(B, dtype=torch.long, device=x.device)
        if state is not None and isinstance(state[0], KVState):  # a growing KV cache: one key per token read
            start = start + state[0].k.shape[2]
        elif state is not None:  # a LinearState or a window's constant-size cache: the token counter
            if state[0].pos is None:
                raise ValueError("this model uses positions, but the state passed has no token counter (pos)")
            start = state[0].pos
        pe = sinusoidal_encoding(start[:, None] + torch.arange(T, device=x.device), D // 2, x.dtype) * INIT_STD
        return torch.cat([x[..., : D - D // 2], x[..., D - D // 2 :] + pe], dim=-1)

    def forward(
        self,
        tokens: Tensor,
        state: LMState | None = None,
        mode: Mode | None = None,
        need_state: bool = True,
        donate: bool = False,
    ) -> tuple[Tensor, LMState]:
        """tokens [B, T] -> logits [B, T, vocab], new state. ``mode`` defaults to chunked (recurrent at T=1).

        ``need_state=False`` (a window read from the start whose state is thrown away) is passed to the memory,
        which may then skip building its state: the new state's ``memory`` is None and cannot be continued.
        ``donate=True``: the caller gives ``state`` up (training carries one state forward and never reads the
        old one again), so the memory updates its tables in place; the results are the same. Without it the
        state passed in is never changed (it can be forked).
        """
        h, read, state = self._run(tokens, state, mode, need_state, donate)
        logits = self.head(h)
        if self.memory is not None:
            logits = self.memory.mix(logits, h, read)
        return logits, state

    def step(self, tokens_t: Tensor, state: LMState | None) -> tuple[Tensor, LMState]:
        """One token per sequence: tokens_t [B] -> logits [B, vocab], new state. Constant cost for linear layers."""
        logits, state = self(tokens_t[:, None], state, mode="recurrent")
        return logits[:, 0], state

    def with_window(self, window: int) -> LinearTransformerLM:
        """A new model with the same weights and ``window`` W (0: off); this one is left as it is.

        For a softmax model: the sliding-window softmax of, e.g., its training context (a KV cache of W
        tokens; identical to the model itself while T <= W). For a linear one: the window + linear hybrid,
        whose extra part has no weights of its own (docs/variants.md).
        """
        new = type(self)(dataclasses.replace(self.config, window=window))
        new.load_state_dict(self.state_dict())
        new.meta = dict(self.meta)
        return new.to(self.embed.weight.device, self.embed.weight.dtype).train(self.training)

    def state_nbytes(self, state: LMState) -> int:
        """Bytes held by a state: constant for linear layers and the memory, growing for a KV cache."""
        return state.nbytes()

    def save(
        self,
        path,
        tokenizer: str | None = None,
        training: dict | None = None,
        overwrite: bool = False,
        extra: dict[str, bytes] | None = None,
    ) -> None:
        """Write a model directory (config.json, model.safetensors, README.md card); see ``strandline.models.persist.modeldir.save_model``."""
        save_model(self, path, tokenizer=tokenizer, training=training, overwrite=overwrite, extra=extra)


def _takes_donate(memory: nn.Module) -> bool:
    """Whether a memory's forward takes ``donate`` (a memory written before that argument existed does not)."""
    return "donate" in inspect.signature(memory.forward).parameters


def _rename_old_weights(module: nn.Module, state_dict: dict, prefix: str, *args) -> None:
    """Load a state dict saved under older weight names (``WEIGHT_RENAMES``): model directories and checkpoints
    written before the rename still load. Runs before ``load_state_dict`` matches names."""
    for key in [k for k in state_dict if k.startswith(prefix)]:
        new = prefix + current_weight_name(key[len(prefix) :])
        if new != key:
            state_dict[new] = state_dict.pop(key)
