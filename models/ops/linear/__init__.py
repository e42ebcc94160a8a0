"""Causal linear attention in three exact modes: ``naive``, ``chunked`` and ``recurrent``.

With feature-mapped queries and keys (φ already applied, so q, k >= 0), causal linear attention is

    S_t = γ S_{t-1} + k_t v_tᵀ        z_t = γ z_{t-1} + k_t
    out_t = q_tᵀ S_t / (q_tᵀ z_t + eps)

(Katharopoulos et al. 2020, eq. 16-20, with an optional per-head decay γ ∈ (0, 1]; γ = 1 is the paper).
The normalizer z is the paper's extra value column v' = [v, 1] (S' = [S, z]): the reference modes carry
it that way. The chunked op computes the denominator beside the numerator (row sums of the same masked
scores, q·z for the carried part), so its products keep the value width V: 64 is a GEMM-friendly size,
65 is about 15% slower per product on CPU (measured with MKL, one thread).

Modes:
- ``naive``: the quadratic masked form, for tests.
- ``chunked``: chunks of C tokens, a masked C×C product inside a chunk and the running state across
  chunks, with a fused custom backward (``models/ops/linear/chunked.py``). Used for training and scanning.
- ``recurrent``: one token at a time, for generation and streams.

All three return the same outputs, final state and gradients (initial state included) for any split
of a sequence into calls. The state is a value: a new one is returned, the one passed in is never
modified.
"""

from __future__ import annotations

import functools
from typing import Literal, NamedTuple

import torch
from torch import Tensor

from strandline.models.feature_maps import FEATURE_MAPS, POINTWISE
from strandline.models.ops.backends import Backend, fla_additive, use_fla
from strandline.models.ops.linear.batched import batched_chunked, use_batched
from strandline.models.ops.linear.chunked import ChunkedLinearAttention, _powers

EPS = 1e-6
"""Added to the denominator q·z; the same value fast-transformers uses. φ >= 0 keeps q·z >= 0."""

Mode = Literal["chunked", "recurrent", "naive"]


class AttnState(NamedTuple):
    """State of one linear-attention op: ``S`` [B, H, K, V] = Σ γ^(t-j) φ(k_j) v_jᵀ, ``z`` [B, H, K] = Σ γ^(t-j) φ(k_j)."""

    S: Tensor
    z: Tensor


def init_attn_state(
    batch_size: int, n_heads: int, key_dim: int, value_dim: int, dtype=torch.float32, device=None
) -> AttnState:
    """Zero state: the same as no state at all."""
    S = torch.zeros(batch_size, n_heads, key_dim, value_dim, dtype=dtype, device=device)
    return AttnState(S, torch.zeros(batch_size, n_heads, key_dim, dtype=dtype, device=device))


def linear_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    state: AttnState | None = None,
    mode: Mode = "chunked",
    chunk_size: int | None = 64,
    decay: Tensor | float | list[float] | None = None,
    eps: float = EPS,
    state_dtype: torch.dtype | None = None,
    backend: Backend | None = None,
    feature_map: Literal["elu1", "relu"] | None = None,
) -> tuple[Tensor, AttnState]:
    """Causal linear attention with a carried state.

    Args:
        q: [B, T, H, K] feature-mapped queries (φ(q) >= 0), or raw ones with ``feature_map``.
        k: [B, T, H, K] feature-mapped keys, or raw ones with ``feature_map``.
        v: [B, T, H, V] values.
        state: ``AttnState`` from a previous call, or None for the zero state.
        mode: ``"chunked"``, ``"recurrent"`` or ``"naive"``; all three agree.
        chunk_size: C for the chunked mode; any T works (the tail is a shorter chunk). None picks one
            for the shape (``auto_chunk_size``).
        decay: per-head γ ∈ (0, 1] as a [H] tensor, a list or a float; None means γ = 1 (the paper).
            Not learnable.
        eps: added to the denominator.
        state_dtype: dtype the state accumulates in. Defaults to the passed state's dtype, else at least
            float32. Use float64 for streams beyond ~2^24 tokens without decay (float32 sums stall there).
        backend: ``"auto"`` (flash-linear-attention's kernels on CUDA when installed, else this module's
            op), ``"torch"`` or ``"fla"``; None reads ``STRANDLINE_BACKEND`` (default auto). See
            ``models/ops/backends.py``. The naive mode is always the pure-torch reference.
        feature_map: None (q, k are φ-mapped already) or the name of an elementwise φ
            (``feature_maps.POINTWISE``) to apply to q and k here. The chunked CPU/torch op applies it
            block by block inside (φ(q), φ(k) and their gradients are never full-length tensors: measured
            ~0.16 s of 0.76 s fwd+bwd at T=65,536 when applied outside); other paths apply it first.

    Returns:
        out: [B, T, H, V] in q's dtype, and the new ``AttnState`` (S [B, H, K, V], z [B, H, K]) in state_dtype.
    """
    if q.dim() != 4 or k.shape != q.shape or v.shape[:3] != q.shape[:3]:
        raise ValueError(
            f"expected q, k [B,T,H,K] and v [B,T,H,V]; got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        )
    if mode not in ("chunked", "recurrent", "naive"):
        raise ValueError(f"unknown mode {mode!r}; expected 'chunked', 'recurrent' or 'naive'")
    B, T, H, K = q.shape
    V = v.shape[-1]
    if state_dtype is None:
        state_dtype = state.S.dtype if state is not None else torch.promote_types(q.dtype, torch.float32)
    log_g = _log_decay(decay, H, q.device)
    check_feature_map(feature_map)
    if state is None:
        S0, z0 = init_attn_state(B, H, K, V, state_dtype, q.device)
    else:
        S0, z0 = state.S.to(state_dtype), state.z.to(state_dtype)
    fused = feature_map is not None and mode == "chunked" and not use_fla(backend, q, state_dtype, mode)
    if feature_map is not None and not fused:
        q, k = map_outside(feature_map, q, k)
    if mode != "naive" and use_fla(backend, q, state_dtype, mode):
        out, S, z = fla_additive(q, k.to(q.dtype), v.to(q.dtype), S0, z0, log_g, None, mode, eps)
        return out, AttnState(S, z)
    if mode == "chunked":
        C = auto_chunk_size(K, V) if chunk_size is None else chunk_size
        k, v = k.to(q.dtype), v.to(q.dtype)  # products in one dtype (a no-op when they already agree)
        if use_batched(B, T, H, C, q.device):  # many short windows: one batched pass (batched.py)
            out, S, z = batched_chunked(q, k, v, S0, z0, log_g, None, C, eps, feature_map)
            return out, AttnState(S, z)
        out, S, z = ChunkedLinearAttention.apply(q, k, v, S0, z0, log_g, C, eps, feature_map)
        return out, AttnState(S, z)
    fn = _recurrent if mode == "recurrent" else _naive
    v1 = torch.cat([v, v.new_ones(B, T, H, 1)], dim=-1)  # v' = [v, 1]
    S1 = torch.cat([S0, z0.unsqueeze(-1)], dim=-1)  # S' = [S, z]
    o, S1 = fn(q.transpose(1, 2), k.transpose(1, 2), v1.transpose(1, 2), S1, log_g)  # (B, H, T, ·)
    o = o.transpose(1, 2)
    return o[..., :V] / (o[..., V:] + eps), AttnState(S1[..., :V], S1[..., V])


def check_feature_map(feature_map: str | None) -> None:
    if feature_map is not None and feature_map not in POINTWISE:
        raise ValueError(f"feature_map must be one of {sorted(POINTWISE)} or None, got {feature_map!r}")


def map_outside(feature_map: str, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
    """φ(q), φ(k) by the feature map's module (plain autograd): for the paths that do not apply it inside."""
    if not (torch.is_grad_enabled() and (q.requires_grad or k.requires_grad)):  # no backward: the map itself
        fmap = POINTWISE[feature_map][0]
        return fmap(q), fmap(k)
    fm = FEATURE_MAPS[feature_map](q.shape[-1], q.shape[2])
    return fm(q, is_query=True), fm(k)


def auto_chunk_size(key_dim: int, value_dim: int) -> int:
    """The chunk size with the least work per token for these head dims (measured on CPU, one thread).

    Per token a chunk costs C·(K + V) multiply-adds inside the chunk and 2·K·V for the state, so the
    balance point is C ≈ 2KV/(K+V) = the head dim; GEMMs below 32 lose more to overhead than they save.
    """
    return max(32, min(256, 1 << round(2 * key_dim * value_dim / (key_dim + value_dim)).bit_length() - 1))


def _log_decay(decay: Tensor | float | list[float] | None, H: int, device) -> Tensor | None:
    """log γ per head as float64 [H], or None for γ = 1. Python numbers are checked without a device sync."""
    if decay is None:
        return None
    if isinstance(decay, Tensor):
        g = decay.detach().to(torch.float64).expand(H)
        if decay.requires_grad:
            raise ValueError("decay is a fixed per-head constant; learnable decay is not supported")
        if not bool(((g > 0) & (g <= 1)).all()):
            raise ValueError(f"decay must lie in (0, 1], got {g.tolist()}")
        return None if bool((g == 1).all()) else g.log().to(device)
    values = tuple(float(x) for x in decay) if isinstance(decay, list | tuple) else (float(decay),) * H
    if len(values) != H:
        raise ValueError(f"decay needs one value per head ({H}), got {len(values)}")
    if not all(0 < x <= 1 for x in values):
        raise ValueError(f"decay must lie in (0, 1], got {list(values)}")
    return None if all(x == 1 for x in values) else _log_decay_cached(values, torch.device(device))


@functools.lru_cache(maxsize=64)
def _log_decay_cached(values: tuple[float, ...], device: torch.device) -> Tensor:
    """One tensor per (γ values, device): built once, never modified (callers only read it)."""
    return torch.tensor(values, dtype=torch.float64, device=device).log()


def _naive(q: Tensor, k: Tensor, v: Tensor, S0: Tensor, log_g: Tensor | None) -> tuple[Tensor, Tensor]:
    """The quadratic masked form. q, k [B,H,T,K], v [B,H,T,V'], S0 [B,H,K,V'] -> (o [B,H,T,V'], S [B,H,K,V'])."""
    T = q.shape[2]
    dt = torch.promote_types(q.dtype, S0.dtype)
    qd, kd, vd = q.to(dt), k.to(dt), v.to(dt)
    pos = torch.arange(T, device=q.device)
    mask = pos[:, None] >= pos[None, :]
    A = (qd @ kd.transpose(-1, -2)) * mask
    if log_g is None:
        o = A @ vd + qd @ S0.to(dt)
        S = S0 + (kd.transpose(-1, -2) @ vd).to(S0.dtype)
        return o.to(q.dtype), S
    D = _powers(log_g, (pos[:, None] - pos[None, :]).clamp(min=0), dt) * mask  # [H, T, T]
    o = (A * D) @ vd + (qd * _powers(log_g, pos + 1, dt)[..., None]) @ S0.to(dt)
    k_dec = kd * _powers(log_g, T - 1 - pos, dt)[..., None]
    S = S0 * _powers(log_g, T, S0.dtype)[:, None, None] + (k_dec.transpose(-1, -2) @ vd).to(S0.dtype)
    return o.to(q.dtype), S


def _recurrent(q: Tensor, k: Tensor, v: Tensor, S: Tensor, log_g: Tensor | None) -> tuple[Tensor, Tensor]:
    """One token at a time: S ← γS + k vᵀ, o = Sᵀq. Plain autograd; for decoding and streams."""
    g = None if log_g is None else log_g.exp().to(S.dtype)[:, None, None]
    outs = []
    for t in range(q.shape[2]):
        kv = k[:, :, t, :, None].to(S.dtype) * v[:, :, t, None, :].to(S.dtype)  # (B, H, K, V')
        S = (S if g is None else S * g) + kv
        outs.append((q[:, :, t, None, :].to(S.dtype) @ S).squeeze(-2))
    return torch.stack(outs, dim=2).to(q.dtype), S
