"""Model hyperparameters: one dataclass, saved as ``config.json`` next to the weights.

Every string option is a ``Literal`` (jsonargparse checks it when a YAML recipe is parsed) and is checked
again in ``__post_init__``, so a ``config.json`` or a Python call with a bad value fails with one line
(``ConfigError``) before any weight is built. Keys added later all have defaults that reproduce the older
models, so every older ``config.json`` still loads.
"""

from __future__ import annotations

import functools
import math
import types
from dataclasses import asdict, dataclass, field, fields
from typing import Literal, Union, get_args, get_origin, get_type_hints

import torch

from strandline.errors import UserInputError
from strandline.models.feature_maps import FEATURE_MAPS

Attention = Literal["linear", "softmax"]
FeatureMapName = Literal["elu1", "relu", "performer", "hedgehog", "taylor", "t2r", "silu", "identity"]
Position = Literal["none", "rope", "sinusoidal"]
Gate = Literal["none", "scalar"]
Update = Literal["additive", "delta"]
Normalizer = Literal["z", "rmsnorm", "none"]
StateDtype = Literal["float32", "float64"]


class ConfigError(UserInputError):
    """A model config value that cannot work; the message names the key."""


@dataclass
class ModelConfig:
    """Architecture of a ``LinearTransformerLM``."""

    vocab_size: int = 16
    """Token ids the embedding holds; the tokenizer decides (DNA: 16, UTF-8 bytes: 260)."""
    d_model: int = 128
    """Width of the residual stream."""
    n_layers: int = 4
    """Number of blocks."""
    n_heads: int = 4
    """Attention heads; head dim = d_model / n_heads."""
    mlp_ratio: float = 4.0
    """Hidden width of the MLP as a multiple of d_model."""
    attention: Attention = "linear"
    """'linear' (the RNN-form transformer) or 'softmax' (SDPA with a KV cache: the baseline)."""
    feature_map: FeatureMapName = "elu1"
    """φ for linear attention: 'elu1' (the paper), 'relu', 'performer', 'hedgehog', 'taylor' (Based), 't2r' (learned
    relu, from conversion), or the signed 'silu' (DeltaNet's) and 'identity' (GLA's), which need a normalizer
    other than 'z'."""
    feature_dim: int | None = None
    """'performer': random features per head (default: head dim); 'taylor': the learned projection's width
    before the 2nd-order expansion (default: head dim, no projection)."""
    conv_width: int = 4
    """Short causal depthwise convolution before q/k/v; 0 or 1 turns it off. Gives local order cheaply."""
    decay: Literal["retnet"] | list[float] | None = None
    """Per-head γ ∈ (0, 1]: None = 1 (the paper), 'retnet' (γ_h = 1 - 2^(-5-h)), or one float per head.
    With ``gate: scalar`` it is the gate's value at initialization instead (default there: 'retnet')."""
    position: Position = "none"
    """Positional information from a token counter carried in the state: 'none' (the paper's LM), 'rope'
    (rotary on q, k before φ, the softmax baseline's rope) or 'sinusoidal' (the paper's copy-task encoding,
    added to the last d_model/2 embedding channels). Streaming, step and any split stay exact."""
    gate: Gate = "none"
    """'scalar': a data-dependent forget gate per head and token, α_t = exp(logsigmoid(w·x_t + b) / gate_tau)
    (GLA / Mamba-2 style), generalizing the fixed γ. 'none': γ only."""
    gate_tau: float = 16.0
    """Temperature of the scalar gate: larger keeps α closer to 1 (GLA's gate_logit_normalizer)."""
    update: Update = "additive"
    """State update: 'additive' (S += φ(k)vᵀ, the paper) or 'delta' (the delta rule, Schlag et al. 2021:
    S = α(I - β k kᵀ)S + β k vᵀ with L2-normalized keys and a learned write strength β_t per head)."""
    normalizer: Normalizer = "z"
    """Output normalization: 'z' (the paper's q·z denominator; additive only), 'rmsnorm' (no z; a per-head
    RMSNorm of the output, as GLA / DeltaNet do) or 'none'."""
    window: int = 0
    """Sliding window W (0 = off). 'softmax': each query sees its last W keys, the KV cache holds W tokens
    (constant memory). 'linear': the LoLCATs hybrid, softmax over the last W tokens plus linear attention
    over every older token with one shared normalizer (update 'additive', gate 'none', normalizer 'z').
    See docs/variants.md."""
    chunk_size: int = 64
    """C of the chunked op: C×C products inside a chunk, the state across chunks."""
    state_dtype: StateDtype = "float32"
    """Accumulation dtype of the carried state; 'float64' for chromosome-length streams without decay."""
    eps: float = 1e-6
    """Added to the linear-attention denominator."""
    norm_eps: float = 1e-5
    """RMSNorm epsilon."""
    dropout: float = 0.0
    """Residual dropout in training."""
    tie_embeddings: bool = True
    """Share the input embedding with the output head."""
    rope_base: float = 10000.0
    """Rotary base: the softmax baseline always uses RoPE; linear attention with ``position: rope``."""
    checkpoint_activations: bool = False
    """Recompute each block in backward (O(T·d) memory for long contexts)."""
    kmer_orders: list[int] = field(default_factory=list)
    """k-mer orders of the k-mer memory (``models/ops/kmer.py``; [] = off, the older models). Each order keeps
    a table of what followed every (hashed) k-mer read so far, and a learned head mixes it into the logits:
    exact copying of repeats at any distance with constant memory. DNA: e.g. [12, 20]."""
    kmer_buckets: int = 1 << 19
    """Rows of each order's table (a power of two): state = orders × buckets × alphabet counts per sequence."""
    kmer_alphabet: list[int] = field(default_factory=lambda: [4, 5, 6, 7])
    """Token ids the k-mer memory matches and predicts (default: the DNA tokenizer's A, C, G, T)."""
    kmer_decay: float | list[float] = 1.0
    """γ of the k-mer memory's counts per token (1: never forget); 1 - 2^-17 keeps ~131k tokens of a chromosome.
    A list gives one γ per order: e.g. [1 - 2^-16, 1 - 2^-16, 1.0] follows the local composition with the
    short orders and keeps every 20-mer of a genome (with enough buckets: ``kmer_buckets``)."""

    def __post_init__(self):
        for name, (choices, only_literal) in _string_options().items():
            value = getattr(self, name)
            if name == "decay":
                continue  # decay_values() below names all three accepted forms
            if (isinstance(value, str) or only_literal) and value not in choices:
                raise ConfigError(f"model config {name} must be one of {list(choices)}, got {value!r}")
        self._check_sizes()  # before d_model % n_heads: a 0 would raise ZeroDivisionError, not one line
        if self.d_model % self.n_heads:
            raise ConfigError(f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}")
        if self.position == "rope" and self.head_dim % 2:
            raise ConfigError(f"position 'rope' needs an even head dim, got {self.head_dim}")
        if self.position == "sinusoidal" and self.d_model % 4:
            raise ConfigError(f"position 'sinusoidal' needs d_model divisible by 4, got {self.d_model}")
        if self.update == "delta" and self.normalizer == "z":
            raise ConfigError("update 'delta' has no normalizer z: set normalizer to 'rmsnorm' or 'none'")
        if not self.gate_tau > 0:
            raise ConfigError(f"gate_tau must be > 0, got {self.gate_tau}")
        if self.feature_dim is not None and self.feature_dim < 1:
            raise ConfigError(f"feature_dim must be >= 1 or null, got {self.feature_dim}")
        self._check_window()
        self._check_signed_map()
        self._check_kmer_memory()
        self.decay_values()  # checks decay now, not when the first layer is built

    def _check_sizes(self) -> None:
        """Sizes are positive integers and scalars finite (a hand-edited config.json or a CLI typo), one line each."""
        for name in ("vocab_size", "d_model", "n_layers", "n_heads", "chunk_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"model config {name} must be an integer >= 1, got {value!r}")
        if isinstance(self.conv_width, bool) or not isinstance(self.conv_width, int) or self.conv_width < 0:
            raise ConfigError(f"model config conv_width must be an integer >= 0 (0 or 1: off), got {self.conv_width!r}")
        positive = {"mlp_ratio": self.mlp_ratio, "rope_base": self.rope_base, "gate_tau": self.gate_tau}
        for name, value in {**positive, "eps": self.eps, "norm_eps": self.norm_eps}.items():
            ok = (
                isinstance(value, (int, float))
                and math.isfinite(value)
                and (value > 0 if name in positive else value >= 0)
            )
            if not ok:
                raise ConfigError(
                    f"model config {name} must be a finite number {'> 0' if name in positive else '>= 0'}, got {value!r}"
                )
        if not (isinstance(self.dropout, (int, float)) and 0 <= self.dropout < 1):
            raise ConfigError(f"model config dropout must lie in [0, 1), got {self.dropout!r}")

    def _check_window(self) -> None:
        """The window options that are sound; one line naming the key otherwise."""
        if isinstance(self.window, bool) or not isinstance(self.window, int) or self.window < 0:
            raise ConfigError(f"window must be an integer >= 0 (0 = off), got {self.window!r}")
        if not self.window or self.attention == "softmax":
            return
        if not FEATURE_MAPS[self.feature_map].positive_kernel:
            raise ConfigError(
                f"window with linear attention does not take feature_map {self.feature_map!r}: the hybrid's shared "
                "normalizer needs a positive kernel"
            )
        wrong = {"update": "additive", "gate": "none", "normalizer": "z"}
        for key, need in wrong.items():
            if getattr(self, key) != need:
                raise ConfigError(
                    f"window {self.window} with linear attention (the window + linear hybrid) needs {key} "
                    f"{need!r}, got {getattr(self, key)!r}"
                )
        if self.feature_map == "performer":
            raise ConfigError(
                "window with linear attention does not take feature_map 'performer': its per-query rescaling "
                "cancels in q·z, not against the window's softmax"
            )

    def _check_kmer_memory(self) -> None:
        """The k-mer memory's options: one line naming the key."""
        orders, alphabet = self.kmer_orders, self.kmer_alphabet
        if not isinstance(orders, (list, tuple)) or not all(isinstance(k, int) and k >= 1 for k in orders):
            raise ConfigError(f"kmer_orders must be a list of integers >= 1, got {orders!r}")
        if len(set(orders)) != len(orders):
            raise ConfigError(f"kmer_orders has a repeated order: {orders!r}")
        if not alphabet or len(set(alphabet)) != len(alphabet) or not all(0 <= a < self.vocab_size for a in alphabet):
            raise ConfigError(
                f"kmer_alphabet must be distinct token ids below vocab_size {self.vocab_size}, got {alphabet!r}"
            )
        if orders and max(orders) * math.log2(max(len(alphabet), 2)) > 62:
            raise ConfigError(f"kmer_orders: a {max(orders)}-mer over {len(alphabet)} symbols does not fit 62 bits")
        n = self.kmer_buckets
        if isinstance(n, bool) or not isinstance(n, int) or n < 16 or n > 1 << 26 or n & (n - 1):
            raise ConfigError(f"kmer_buckets must be a power of two in [16, 2^26], got {n!r}")
        decays = self.kmer_decay if isinstance(self.kmer_decay, (list, tuple)) else [self.kmer_decay]
        if isinstance(self.kmer_decay, (list, tuple)) and len(decays) != len(orders):
            raise ConfigError(f"kmer_decay: {len(decays)} values for {len(orders)} kmer_orders {orders!r}")
        for g in decays:
            if isinstance(g, bool) or not isinstance(g, (int, float)) or not (0 < g <= 1 and math.isfinite(g)):
                raise ConfigError(f"kmer_decay must lie in (0, 1], got {self.kmer_decay!r}")

    def _check_signed_map(self) -> None:
        """A signed φ (silu, identity) can make the denominator q·z zero or negative: refuse it with z."""
        if self.attention == "linear" and self.normalizer == "z" and not FEATURE_MAPS[self.feature_map].positive_kernel:
            raise ConfigError(
                f"feature_map {self.feature_map!r} can be negative, so normalizer 'z' (q·z) could divide by <= 0: "
                "set normalizer to 'rmsnorm' or 'none'"
            )

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def torch_state_dtype(self) -> torch.dtype:
        return getattr(torch, self.state_dtype)

    def decay_values(self) -> list[float] | None:
        """γ per head, or None for the paper's γ = 1."""
        if self.decay is None:
            return None
        if self.decay == "retnet":
            return [1 - 2.0 ** (-5 - h) for h in range(self.n_heads)]
        if isinstance(self.decay, str) or not isinstance(self.decay, (list, tuple)):
            raise ConfigError(f"decay must be null, 'retnet' or a list of floats, got {self.decay!r}")
        if len(self.decay) != self.n_heads:
            raise ConfigError(f"decay has {len(self.decay)} values for {self.n_heads} heads")
        gammas = [float(g) for g in self.decay]
        if not all(0 < g <= 1 and math.isfinite(g) for g in gammas):
            raise ConfigError(f"decay values must lie in (0, 1], got {gammas}")
        return gammas

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> ModelConfig:
        """A config from ``to_dict``'s form or an older one (``renamed_keys``); unknown keys are refused."""
        d = cls.renamed_keys(d)
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ConfigError(f"unknown model config keys: {unknown}")
        return cls(**d)

    @staticmethod
    def renamed_keys(d: dict) -> dict:
        """``d`` with the keys of older configs (``OLD_KEYS``) under their current names; both at once is refused."""
        both = sorted(old for old, new in OLD_KEYS.items() if old in d and new in d)
        if both:
            raise ConfigError(f"model config has both {both[0]} and its new name {OLD_KEYS[both[0]]}")
        return {OLD_KEYS.get(k, k): v for k, v in d.items()}


OLD_KEYS = {
    "recall_orders": "kmer_orders",
    "recall_buckets": "kmer_buckets",
    "recall_alphabet": "kmer_alphabet",
    "recall_decay": "kmer_decay",
}
"""Keys that older config.json files and checkpoints use -> their name now (read, never written)."""


def _literal_choices(annotation) -> tuple:
    """The choices of a ``Literal`` annotation, also inside a union (``Literal["retnet"] | list | None``); else ()."""
    if get_origin(annotation) is Literal:
        return get_args(annotation)
    if get_origin(annotation) in (Union, types.UnionType):
        return tuple(c for a in get_args(annotation) for c in _literal_choices(a))
    return ()


@functools.cache
def _string_options() -> dict[str, tuple[tuple, bool]]:
    """{field: (choices, only_literal)} for every field of ModelConfig with Literal choices."""
    hints = get_type_hints(ModelConfig)
    out = {}
    for name, tp in hints.items():
        choices = _literal_choices(tp)
        if choices:
            out[name] = (choices, get_origin(tp) is Literal)
    return out
