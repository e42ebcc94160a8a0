"""Blocks of the LM: linear attention (the RNN form), its softmax baseline, the short conv and the MLP.

Every mixer has ``forward(x [B, T, D], state, mode) -> (y [B, T, D], new_state)`` and ``init_state``.
``LinearAttention`` covers every variant of the config (positions, gate, delta rule, normalizer; see
docs/variants.md), each through one exact op: ``ops.linear_attention`` (the paper, fixed γ),
``ops_gated.gated_linear_attention`` or ``ops_delta.delta_rule_attention``; with ``window`` the
sliding-window softmax and the window + linear hybrid go through ``ops_window.window_attention``.
States are NamedTuples of tensors, returned new on every call and never mutated, so they can be
forked, saved (``strandline.models.persist.state``) and carried across training windows.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from strandline.models.config import ModelConfig
from strandline.models.feature_maps import make_feature_map
from strandline.models.ops.delta import delta_rule_attention
from strandline.models.ops.gated import gated_linear_attention
from strandline.models.ops.linear import AttnState, Mode, init_attn_state, linear_attention
from strandline.models.ops.linear.kept import unbind_slots
from strandline.models.ops.window import WindowState, init_window_state, window_attention


class LinearState(NamedTuple):
    """One linear-attention layer (any variant): exactly what it needs to resume.

    ``S`` [B,H,K,V]; ``z`` [B,H,K] where the paper's normalizer is used, else None; ``conv`` the short
    conv's last w-1 inputs [B,w-1,3D] (or None); ``pos`` int64 [B], tokens read so far, where positions
    are used (``position`` 'rope' or 'sinusoidal') or a window is, else None; with ``window`` W (the hybrid)
    ``win_k``, ``win_v`` [B,W,H,hd]: keys (as scored) and values of the last W tokens, oldest first, the
    slots a row has not read yet invalid by ``pos`` (else None). Field order is fixed: code rebuilds a state
    positionally (``LinearState(*fields)``); new fields go at the end with a default.
    """

    S: Tensor
    z: Tensor | None
    conv: Tensor | None
    pos: Tensor | None = None
    win_k: Tensor | None = None
    win_v: Tensor | None = None


class KVState(NamedTuple):
    """One softmax layer: the KV cache k, v [B,H,T_seen,hd] and the conv buffer (or None)."""

    k: Tensor
    v: Tensor
    conv: Tensor | None


class WindowKVState(NamedTuple):
    """One softmax layer with a sliding window W: a KV cache of constant size.

    ``k`` (RoPE'd), ``v`` [B,W,H,hd]: the last W tokens, oldest first, the slots a row has not read yet
    invalid by ``pos`` (int64 [B], tokens read, also the RoPE offset); ``conv`` the conv buffer (or None).
    """

    k: Tensor
    v: Tensor
    conv: Tensor | None
    pos: Tensor


def window_buffers(batch_size: int, cfg: ModelConfig, device=None) -> tuple[Tensor, Tensor]:
    """The empty key and value buffers [B, W, H, hd] of a window layer (all slots invalid at pos 0)."""
    ws = init_window_state(batch_size, cfg.window, cfg.n_heads, cfg.head_dim, cfg.head_dim, device=device)
    return ws.k, ws.v


_CONV1D_FAST = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) >= (2, 13)
"""Whether the CPU depthwise ``conv1d`` backward is fast: on torch 2.13 it ran 2x faster than w shifted multiplies
(fwd+bwd of [16, 256 + 7, 192]: 9 against 14 ms; [1, 32768, 192]: 74 against 147 ms); an older torch took
26 s for [16, 192, 515], ~1000x slower, so it keeps the shifted form."""
CONV1D_MIN_T = 32
"""Below this many tokens (a generation step reads one) the shifted form is faster: conv1d's call costs ~0.45 ms."""


def multiply_adds(xe: Tensor, weight: Tensor, bias: Tensor, T: int) -> Tensor:
    """The depthwise causal convolution of ``xe`` [B, T + w - 1, C] (its ``w - 1`` carried inputs first) with
    ``weight`` [C, 1, w] and ``bias`` [C] as w multiply-adds into one output: [B, T, C]. Autograd follows it (each
    multiply-add keeps its inputs, not the output it adds to), so training and inference share this one form."""
    width = weight.shape[-1]
    y = torch.addcmul(bias, xe[:, width - 1 :], weight[:, 0, -1])
    for j in range(width - 1):
        y.addcmul_(xe[:, j : j + T], weight[:, 0, j])
    return y


class ShortConv(nn.Module):
    """Causal depthwise convolution of width w; resumable from the last w-1 inputs.

    Without gradients and with oneDNN off (the summarizer's reader and the scan job turn it off, because its cache
    grew with every new input length) it runs on CPU as w multiply-adds (``multiply_adds``, the form training on CPU
    runs too, as this torch's depthwise conv backward is far slower there): conv1d's native kernel is slow
    there, [1, 1024 + 3, 288] took 4.4 ms against 0.84 ms (2 threads, torch 2.13). With oneDNN on, conv1d was as
    fast or faster for some shapes and slower for others, from run to run, so it stays
    (``benchmarks/short_conv.py`` prints both)."""

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
        T, weight, bias = x.shape[1], self.conv.weight.to(x.dtype), self.conv.bias.to(x.dtype)
        native = not torch.is_grad_enabled() and not torch.backends.mkldnn.enabled  # conv1d's slow path
        if x.device.type != "cpu" or (
            _CONV1D_FAST and T >= CONV1D_MIN_T and not native
        ):  # y[t] = b + Σ_j w[:, j] * xe[t + j]
            y = F.conv1d(xe.transpose(1, 2), weight, bias, groups=weight.shape[0]).transpose(1, 2)
        elif T < CONV1D_MIN_T:  # a few tokens (a generation step): one product and one sum over the taps
            y = bias + (xe.unfold(1, self.width, 1) * weight[:, 0]).sum(-1)
        else:  # w multiply-adds: inference with oneDNN off (summaries, scans), and training, as this torch's
            y = multiply_adds(xe, weight, bias, T)  # depthwise conv backward is far slower on CPU
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


class HeadScalar(nn.Module):
    """One scalar per head and token from the residual stream: x [B, T, D] -> w·x + b as [B, T, H].

    Not an nn.Linear on purpose: the LM's init (normal weights, zero biases) must not overwrite the bias,
    which sets the gate's starting value.
    """

    def __init__(self, d_model: int, n_heads: int, bias: list[float]):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n_heads, d_model) * 0.02)
        self.bias = nn.Parameter(torch.tensor(bias, dtype=torch.float32))

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x, self.weight.to(x.dtype), self.bias.to(x.dtype))


def gate_bias(gamma: float, tau: float) -> float:
    """The bias b with exp(logsigmoid(b) / tau) = gamma, so that the gate starts at the fixed decay γ."""
    if gamma >= 1:
        return 30.0  # logsigmoid(30) ≈ -1e-13: γ = 1 up to float32
    return -math.log(math.expm1(-tau * math.log(gamma)))


class LinearAttention(_Mixer):
    """Multi-head causal linear attention in every variant of the config (see docs/variants.md).

    q, k get the position (``rope``, from the token counter in the state), then φ; the update is additive
    (optionally gated per token, optionally normalized by z) or the delta rule; the output is optionally
    RMS-normalized per head. Every path is one exact op with the same three modes.
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__(cfg)
        H = cfg.n_heads
        self.fmap = make_feature_map(cfg.feature_map, cfg.head_dim, H, cfg.feature_dim)
        gammas = cfg.decay_values()
        self.decay = gammas if cfg.gate == "none" else None  # a list, not a buffer: .to(bf16) must not round γ
        self.gate = None
        if cfg.gate == "scalar":  # starts at the configured γ (default: RetNet's spread of memories)
            start = gammas or [1 - 2.0 ** (-5 - h) for h in range(H)]
            self.gate = HeadScalar(cfg.d_model, H, [gate_bias(g, cfg.gate_tau) for g in start])
        self.beta = HeadScalar(cfg.d_model, H, [0.0] * H) if cfg.update == "delta" else None  # β starts at 1/2
        self.out_norm = nn.RMSNorm(cfg.head_dim, eps=cfg.norm_eps) if cfg.normalizer == "rmsnorm" else None

    def init_state(self, batch_size: int, device=None) -> LinearState:
        H, K, V = self.cfg.n_heads, self.fmap.out_dim, self.cfg.head_dim
        S, z = init_attn_state(batch_size, H, K, V, self.cfg.torch_state_dtype, device)
        pos = torch.zeros(batch_size, dtype=torch.long, device=device) if self._counts_tokens() else None
        win = window_buffers(batch_size, self.cfg, device) if self.cfg.window else (None, None)
        return LinearState(S, z if self.cfg.normalizer == "z" else None, self._init_conv(batch_size, device), pos, *win)

    def _counts_tokens(self) -> bool:
        """Whether the state carries a token counter: for positions, and for a window's buffer validity."""
        return self.cfg.position != "none" or self.cfg.window > 0

    def forward(
        self, x: Tensor, state: LinearState | None = None, mode: Mode = "chunked"
    ) -> tuple[Tensor, LinearState]:
        B, T, D = x.shape
        h, conv = self._qkv(x, state)
        q, k, v = unbind_slots(h)  # each (B, T, H, hd); h's gradient is the op's one buffer, not a stack
        pos = self._start_positions(state, B, x.device)
        if self.cfg.position == "rope":  # before φ, as Hedgehog / LoLCATs convert RoPE models: φ(RoPE(q))
            q, k = rope_from(q, k, pos, self.cfg.rope_base)
        if self.cfg.window:  # φ of the keys is taken inside the op, when they leave the window
            o, s = self._attend_window(q, k, v, state, pos, mode)
            win = (s.k, s.v)
        else:
            fused = self.fmap.pointwise if self.cfg.update != "delta" else None  # φ applied in the op, per block
            if fused is None:
                q, k = self.fmap(q, is_query=True), self.fmap(k)
            o, s = self._attend(x, q, k, v, state, mode, fused)
            win = (None, None)
        if self.out_norm is not None:  # in float32 at least (its weight's dtype), also under bf16 autocast
            o = self.out_norm(o.to(torch.promote_types(o.dtype, self.out_norm.weight.dtype))).to(o.dtype)
        new_pos = None if pos is None else pos + T  # O(1): the counter never grows the state
        return self.proj(o.reshape(B, T, D)), LinearState(s.S, s.z, conv, new_pos, *win)

    def _start_positions(self, state: LinearState | None, batch_size: int, device) -> Tensor | None:
        """The token counter [B] at this call's first token, or None when the model uses no positions."""
        if not self._counts_tokens():
            return None
        if state is None:
            return torch.zeros(batch_size, dtype=torch.long, device=device)
        if state.pos is None:
            raise ValueError("this model uses positions, but the state passed has no token counter (pos)")
        if self.cfg.window and state.win_k is None:
            raise ValueError("this model has a window, but the state passed has no window buffer (win_k)")
        return state.pos

    def _attend_window(self, q: Tensor, k: Tensor, v: Tensor, state: LinearState | None, pos: Tensor, mode: Mode):
        """The window + linear hybrid (``ops_window``): (out [B, T, H, hd], WindowState)."""
        cfg = self.cfg
        sd = torch.promote_types(cfg.torch_state_dtype, q.dtype)
        ws = None if state is None else WindowState(state.win_k, state.win_v, state.S, state.z)
        fq = self.fmap(q, is_query=True)
        return window_attention(
            q, k, v, cfg.window, ws, pos, fq=fq, phi=self.fmap, mode=mode, chunk_size=cfg.chunk_size,
            decay=self.decay, eps=cfg.eps, state_dtype=sd,
        )  # fmt: skip

    def _attend(
        self, x: Tensor, q: Tensor, k: Tensor, v: Tensor, state: LinearState | None, mode: Mode, fmap: str | None = None
    ):
        """The op of the configured variant: (out [B, T, H, hd], AttnState); ``fmap``: φ the op applies to raw q, k."""
        cfg = self.cfg
        s = None if state is None else AttnState(state.S, state.z)
        sd = torch.promote_types(cfg.torch_state_dtype, q.dtype)  # never below the compute dtype
        log_a = self._log_gate(x, q.shape[1])
        if cfg.update == "delta":  # keys (and queries) on the unit sphere: I - β k kᵀ stays a contraction
            q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
            beta = torch.sigmoid(self.beta(x))
            return delta_rule_attention(q, k, v, beta, log_a, s, mode=mode, chunk_size=cfg.chunk_size, state_dtype=sd)
        if cfg.gate == "none" and cfg.normalizer == "z":  # the paper's op (γ fixed or 1): the reference path
            return linear_attention(
                q, k, v, s, mode=mode, chunk_size=cfg.chunk_size, decay=self.decay, eps=cfg.eps, state_dtype=sd,
                feature_map=fmap,
            )  # fmt: skip
        return gated_linear_attention(
            q, k, v, log_a, s, mode=mode, chunk_size=cfg.chunk_size, normalize=cfg.normalizer == "z",
            eps=cfg.eps, state_dtype=sd, feature_map=fmap,
        )  # fmt: skip

    def _log_gate(self, x: Tensor, T: int) -> Tensor | None:
        """log α [B, T, H]: the data-dependent gate, or the fixed log γ per head, or None (α = 1)."""
        if self.gate is not None:
            a = self.gate(x)
            a = a.to(torch.promote_types(a.dtype, torch.float32))  # α near 1: log α ~ -1e-3 needs more than bf16
            return F.logsigmoid(a) / self.cfg.gate_tau
        if self.decay is None:
            return None
        log_g = torch.tensor(self.decay, dtype=torch.float64, device=x.device).log()
        return log_g.expand(x.shape[0], T, -1)


def rope_cos_sin(positions: Tensor, head_dim: int, base: float, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """cos, sin of the rotary angles [*positions.shape, head_dim/2], computed in float64 and cast to ``dtype``."""
    inv = base ** (-torch.arange(0, head_dim, 2, device=positions.device, dtype=torch.float64) / head_dim)
    ang = positions.to(torch.float64)[..., None] * inv
    return ang.cos().to(dtype), ang.sin().to(dtype)


def rope_from(q: Tensor, k: Tensor, pos: Tensor, base: float) -> tuple[Tensor, Tensor]:
    """q, k [B, T, H, hd] rotated at each row's positions pos[b] .. pos[b]+T-1 (pos: int64 [B])."""
    positions = pos[:, None] + torch.arange(q.shape[1], device=q.device)
    cos, sin = rope_cos_sin(positions, q.shape[-1], base, q.dtype)
    cos, sin = cos[:, :, None], sin[:, :, None]  # (B, T, 1, hd/2): the same angle for every head
    return apply_rope(q, cos, sin), apply_rope(k, cos, sin)


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate-half rotary embedding of x [..., hd] with cos, sin broadcastable to [..., hd/2]."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


def _rope(x: Tensor, offset: int, base: float) -> Tensor:
    """Rotary embedding of x [B, H, T, hd] at positions offset .. offset+T-1 (the softmax baseline's)."""
    positions = torch.arange(offset, offset + x.shape[2], device=x.device)
    return apply_rope(x, *rope_cos_sin(positions, x.shape[3], base, x.dtype))


def sinusoidal_encoding(positions: Tensor, dim: int, dtype: torch.dtype) -> Tensor:
    """The paper's copy-task encoding [*positions.shape, dim]: sin at even, cos at odd channels (Vaswani et al.).

    As in idiap/linear-transformer-experiments ``causal-copy/main.py`` (``PositionalEncoding``), computed in
    float64 from the integer positions, so any split of a stream gives the same numbers.
    """
    div = torch.exp(torch.arange(0, dim, 2, device=positions.device, dtype=torch.float64) * (-math.log(10000.0) / dim))
    ang = positions.to(torch.float64)[..., None] * div
    return torch.stack([ang.sin(), ang.cos()], dim=-1).flatten(-2).to(dtype)


class SoftmaxAttention(_Mixer):
    """Causal softmax attention (SDPA) with RoPE and a KV cache: the baseline the benchmarks compare against.

    With ``window`` W each query sees its last W keys and the cache holds W tokens (``WindowKVState``).
    """

    def init_state(self, batch_size: int, device=None) -> KVState | WindowKVState:
        H, hd = self.cfg.n_heads, self.cfg.head_dim
        if self.cfg.window:
            pos = torch.zeros(batch_size, dtype=torch.long, device=device)
            return WindowKVState(
                *window_buffers(batch_size, self.cfg, device), self._init_conv(batch_size, device), pos
            )
        empty = torch.zeros(batch_size, H, 0, hd, device=device)
        return KVState(empty, empty, self._init_conv(batch_size, device))

    def forward(self, x: Tensor, state: KVState | None = None, mode: Mode = "chunked") -> tuple[Tensor, KVState]:
        B, T, D = x.shape
        if self.cfg.window:
            return self._forward_window(x, state, mode)
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

    def _forward_window(self, x: Tensor, state: WindowKVState | None, mode: Mode) -> tuple[Tensor, WindowKVState]:
        """Sliding-window softmax (``ops_window``), RoPE at each row's own position ``pos + t``."""
        B, T, D = x.shape
        h, conv = self._qkv(x, state)
        q, k, v = h.unbind(2)  # each (B, T, H, hd)
        if state is not None and not isinstance(state, WindowKVState):
            raise ValueError(f"this model has a window; the state passed is a {type(state).__name__}")
        pos = torch.zeros(B, dtype=torch.long, device=x.device) if state is None else state.pos
        q, k = rope_from(q, k, pos, self.cfg.rope_base)
        ws = None if state is None else WindowState(state.k, state.v)
        o, ws = window_attention(q, k, v, self.cfg.window, ws, pos, mode=mode)
        return self.proj(o.reshape(B, T, D)), WindowKVState(ws.k, ws.v, conv, pos + T)


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
