"""Blocks of the LM: linear attention (the RNN form), its softmax baseline, the short conv and the MLP.

Every mixer has ``forward(x [B, T, D], state, mode) -> (y [B, T, D], new_state)`` and ``init_state``.
States are NamedTuples of tensors, returned new on every call and never mutated, so they can be
forked, saved (``models.state``) and carried across training windows.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .config import ModelConfig
from .feature_maps import make_feature_map
from .ops import AttnState, Mode, init_attn_state, linear_attention


class LinearState(NamedTuple):
    """One linear-attention layer: S [B,H,K,V], z [B,H,K], and the conv's last w-1 inputs [B,w-1,3D] (or None)."""

    S: Tensor
    z: Tensor
    conv: Tensor | None


class KVState(NamedTuple):
    """One softmax layer: the KV cache k, v [B,H,T_seen,hd] and the conv buffer (or None)."""

    k: Tensor
    v: Tensor
    conv: Tensor | None


class ShortConv(nn.Module):
    """Causal depthwise convolution of width w; resumable from the last w-1 inputs."""

    def __init__(self, channels: int, width: int):
        super().__init__()
        self.width = width
        self.conv = nn.Conv1d(channels, channels, width, groups=channels, bias=True)

    def init_state(self, batch_size: int, device=None, dtype=None) -> Tensor:
        return torch.zeros(batch_size, self.width - 1, self.conv.in_channels, device=device, dtype=dtype)

    def forward(self, x: Tensor, cache: Tensor | None) -> tuple[Tensor, Tensor]:
        if cache is None:
            cache = self.init_state(x.shape[0], x.device, x.dtype)
        xe = torch.cat([cache.to(x.dtype), x], dim=1)  # (B, w-1+T, C): zero cache == causal zero padding
        # y[t] = b + Σ_j w[:, j] * xe[t + j]: the depthwise conv as w shifted multiplies, because
        # nn.Conv1d's depthwise backward on CPU is ~1000x slower (measured 26 s for [16, 192, 515])
        T, w = x.shape[1], self.conv.weight[:, 0, :].to(x.dtype)  # (C, width)
        y = self.conv.bias.to(x.dtype) + sum(xe[:, j : j + T] * w[:, j] for j in range(self.width))
        return y, xe[:, xe.shape[1] - (self.width - 1) :]


class _Mixer(nn.Module):
    """Shared front of both mixers: the qkv projection, the optional short conv, the output projection."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        D = cfg.d_model
        self.cfg = cfg
        self.qkv = nn.Linear(D, 3 * D, bias=False)
        self.conv = ShortConv(3 * D, cfg.conv_width) if cfg.conv_width > 1 else None
        self.proj = nn.Linear(D, D, bias=False)

    def _init_conv(self, batch_size: int, device) -> Tensor | None:
        return None if self.conv is None else self.conv.init_state(batch_size, device, torch.float32)

    def _qkv(self, x: Tensor, state) -> tuple[Tensor, Tensor | None]:
        """x [B, T, D] -> (q, k, v stacked as [B, T, 3, H, hd], the new conv buffer)."""
        B, T, D = x.shape
        h, conv = self.qkv(x), None
        if self.conv is not None:
            h, conv = self.conv(h, None if state is None else state.conv)
        return h.view(B, T, 3, self.cfg.n_heads, D // self.cfg.n_heads), conv


class LinearAttention(_Mixer):
    """Multi-head causal linear attention; q, k go through the feature map φ before the op."""

    def __init__(self, cfg: ModelConfig):
        super().__init__(cfg)
        self.fmap = make_feature_map(cfg.feature_map, cfg.head_dim, cfg.n_heads, cfg.feature_dim)
        self.decay = cfg.decay_values()  # a list, not a buffer: .to(bf16) must not round γ

    def init_state(self, batch_size: int, device=None) -> LinearState:
        H, K, V = self.cfg.n_heads, self.fmap.out_dim, self.cfg.head_dim
        S, z = init_attn_state(batch_size, H, K, V, self.cfg.torch_state_dtype, device)
        return LinearState(S, z, self._init_conv(batch_size, device))

    def forward(
        self, x: Tensor, state: LinearState | None = None, mode: Mode = "chunked"
    ) -> tuple[Tensor, LinearState]:
        B, T, D = x.shape
        h, conv = self._qkv(x, state)
        q, k, v = h.unbind(2)  # each (B, T, H, hd)
        q, k = self.fmap(q, is_query=True), self.fmap(k)
        s = None if state is None else AttnState(state.S, state.z)
        o, s = linear_attention(
            q, k, v, s, mode=mode, chunk_size=self.cfg.chunk_size, decay=self.decay, eps=self.cfg.eps,
            state_dtype=torch.promote_types(self.cfg.torch_state_dtype, q.dtype),  # never below the compute dtype
        )  # fmt: skip
        return self.proj(o.reshape(B, T, D)), LinearState(s.S, s.z, conv)


def _rope(x: Tensor, offset: int, base: float) -> Tensor:
    """Rotary embedding of x [B, H, T, hd] at positions offset .. offset+T-1 (rotate-half form)."""
    T, hd = x.shape[2], x.shape[3]
    inv = base ** (-torch.arange(0, hd, 2, device=x.device, dtype=torch.float64) / hd)
    ang = torch.arange(offset, offset + T, device=x.device, dtype=torch.float64)[:, None] * inv  # (T, hd/2)
    cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    x1, x2 = x[..., : hd // 2], x[..., hd // 2 :]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


class SoftmaxAttention(_Mixer):
    """Causal softmax attention (SDPA) with RoPE and a KV cache: the baseline the benchmarks compare against."""

    def init_state(self, batch_size: int, device=None) -> KVState:
        H, hd = self.cfg.n_heads, self.cfg.head_dim
        empty = torch.zeros(batch_size, H, 0, hd, device=device)
        return KVState(empty, empty, self._init_conv(batch_size, device))

    def forward(self, x: Tensor, state: KVState | None = None, mode: Mode = "chunked") -> tuple[Tensor, KVState]:
        B, T, D = x.shape
        h, conv = self._qkv(x, state)
        q, k, v = h.permute(2, 0, 3, 1, 4)  # each (B, H, T, hd)
        offset = 0 if state is None else state.k.shape[2]
        q, k = _rope(q, offset, self.cfg.rope_base), _rope(k, offset, self.cfg.rope_base)
        if offset:
            k, v = torch.cat([state.k.to(k.dtype), k], 2), torch.cat([state.v.to(v.dtype), v], 2)
        if offset == 0 or T == 1:
            o = F.scaled_dot_product_attention(q, k, v, is_causal=offset == 0 and T > 1)
        else:  # a prefix is cached: query i sees keys 0 .. offset+i
            mask = torch.arange(T, device=x.device)[:, None] + offset >= torch.arange(offset + T, device=x.device)
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.proj(o.transpose(1, 2).reshape(B, T, D)), KVState(k, v, conv)


class Block(nn.Module):
    """Pre-norm residual block: x + mixer(norm(x)), then x + MLP(norm(x))."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.norm1 = nn.RMSNorm(cfg.d_model, eps=cfg.norm_eps)
        self.mixer = LinearAttention(cfg) if cfg.attention == "linear" else SoftmaxAttention(cfg)
        self.norm2 = nn.RMSNorm(cfg.d_model, eps=cfg.norm_eps)
        hidden = int(cfg.mlp_ratio * cfg.d_model)
        self.mlp = nn.Sequential(nn.Linear(cfg.d_model, hidden), nn.GELU(), nn.Linear(hidden, cfg.d_model))
        self.drop = nn.Dropout(cfg.dropout)

    def init_state(self, batch_size: int, device=None):
        return self.mixer.init_state(batch_size, device)

    def forward(self, x: Tensor, state=None, mode: Mode = "chunked"):
        y, state = self.mixer(self.norm1(x), state, mode)
        x = x + self.drop(y)
        return x + self.drop(self.mlp(self.norm2(x))), state
