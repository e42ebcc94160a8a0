"""Model hyperparameters: one dataclass, saved as ``config.json`` next to the weights."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

import torch


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
    attention: str = "linear"
    """'linear' (the RNN-form transformer) or 'softmax' (SDPA with a KV cache: the baseline)."""
    feature_map: str = "elu1"
    """φ for linear attention: 'elu1' (the paper), 'relu', 'performer' or 'hedgehog'."""
    feature_dim: int | None = None
    """Random features per head for 'performer' (default: head dim)."""
    conv_width: int = 4
    """Short causal depthwise convolution before q/k/v; 0 or 1 turns it off. Gives local order cheaply."""
    decay: str | list[float] | None = None
    """Per-head γ: None = 1 (the paper), 'retnet' (γ_h = 1 - 2^(-5-h)), or one float per head."""
    chunk_size: int = 64
    """C of the chunked op: C×C products inside a chunk, the state across chunks."""
    state_dtype: str = "float32"
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
    """Rotary base of the softmax baseline (linear attention uses no positional encoding)."""
    checkpoint_activations: bool = False
    """Recompute each block in backward (O(T·d) memory for long contexts)."""

    def __post_init__(self):
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}")
        if self.attention not in ("linear", "softmax"):
            raise ValueError(f"attention must be 'linear' or 'softmax', got {self.attention!r}")
        if self.state_dtype not in ("float32", "float64"):
            raise ValueError(f"state_dtype must be 'float32' or 'float64', got {self.state_dtype!r}")

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
        if isinstance(self.decay, str):
            raise ValueError(f"decay must be None, 'retnet' or a list of floats, got {self.decay!r}")
        if len(self.decay) != self.n_heads:
            raise ValueError(f"decay has {len(self.decay)} values for {self.n_heads} heads")
        return [float(g) for g in self.decay]

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> ModelConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown model config keys: {unknown}")
        return cls(**d)
