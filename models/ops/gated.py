"""Gated causal linear attention: a data-dependent forget gate per head and token, in three exact modes.

    S_t = α_t S_{t-1} + k_t v_tᵀ        z_t = α_t z_{t-1} + k_t        (α_t = exp(g_t) ∈ (0, 1])
    out_t = q_tᵀ S_t / (q_tᵀ z_t + eps)   (normalized: the paper's z, gated)   or   q_tᵀ S_t   (unnormalized)

This is the scalar gate of GLA / Mamba-2 (FLA's ``simple_gla``); a fixed per-head γ is the special case
g_t = log γ. With G_t = Σ_{s<=t} g_s, token s reaches token t with weight exp(G_t - G_s) <= 1. The chunked
mode only ever exponentiates such differences (never exp(G_t) and exp(-G_s) separately, which overflow
for strong gates), keeps the within-chunk sums in float64 and carries the state across chunks.

Chunked mode: the paper's chunked op (``models/ops/linear/chunked.py``) with decay tables built per block from
the gates (``_GateTables``): the same strided-view GEMMs, thread pool over heads and fused reverse pass,
saving q, k, v, g, out and one state per block. The gate's gradient follows from the identity
∂L/∂G_t = q_t·dq_t - k_t·dk_t (+ ⟨dS_T, S_T⟩ + ⟨dz_T, z_T⟩ at the last token), then a reverse cumulative
sum. No T×T matrix and no per-token state is stored.

The reference modes carry the normalizer as one extra value column (v' = [v, 1], S' = [S, z]) as in
``models/ops/linear/__init__.py``.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import Tensor

from strandline.models.ops.backends import Backend, fla_additive, use_fla
from strandline.models.ops.linear import EPS, AttnState, Mode, check_feature_map, map_outside
from strandline.models.ops.linear.batched import batched_chunked, use_batched
from strandline.models.ops.linear.chunked import ChunkedLinearAttention


def gated_linear_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    log_alpha: Tensor | None = None,
    state: AttnState | None = None,
    mode: Mode = "chunked",
    chunk_size: int = 64,
    normalize: bool = True,
    eps: float = EPS,
    state_dtype: torch.dtype | None = None,
    backend: Backend | None = None,
    feature_map: Literal["elu1", "relu"] | None = None,
) -> tuple[Tensor, AttnState]:
    """Causal linear attention with a per-token forget gate and a carried state.

    Args:
        q: [B, T, H, K] feature-mapped queries, or raw ones with ``feature_map``.
        k: [B, T, H, K] feature-mapped keys, or raw ones with ``feature_map``.
        v: [B, T, H, V] values.
        log_alpha: [B, T, H] log of the gate, <= 0 (e.g. logsigmoid(w·x + b) / τ); None means α = 1.
        state: ``AttnState`` from a previous call (``z`` None when not normalized), or None for zeros.
        mode: ``"chunked"``, ``"recurrent"`` or ``"naive"``; all three agree.
        chunk_size: C for the chunked mode; any T works.
        normalize: divide by q·z + eps (needs φ >= 0 or a positive kernel); else return q·S and carry no z.
        eps: added to the denominator.
        state_dtype: accumulation dtype; defaults to the passed state's, else at least float32.
        backend: "auto" | "torch" | "fla" (``models/ops/backends.py``: FLA's ``simple_gla`` on CUDA); None reads
            ``STRANDLINE_BACKEND``.
        feature_map: None, or an elementwise φ applied to q, k here (inside the chunked op, block by
            block), as in ``ops.linear_attention``.

    Returns:
        out: [B, T, H, V] in q's dtype, and the new ``AttnState`` (S [B, H, K, V], z [B, H, K] or None).
    """
    if q.dim() != 4 or k.shape != q.shape or v.shape[:3] != q.shape[:3]:
        raise ValueError(f"expected q, k [B,T,H,K] and v [B,T,H,V]; got {tuple(q.shape)}, {tuple(v.shape)}")
    B, T, H, K = q.shape
    V = v.shape[-1]
    if state_dtype is None:
        state_dtype = state.S.dtype if state is not None else torch.promote_types(q.dtype, torch.float32)
    check_feature_map(feature_map)
    g = q.new_zeros(B, T, H, dtype=torch.float64) if log_alpha is None else log_alpha.to(torch.float64)
    S = q.new_zeros(B, H, K, V + normalize, dtype=state_dtype)
    if state is not None:
        if normalize and state.z is None:
            raise ValueError("normalize=True needs a state with z; this state was built without a normalizer")
        S = torch.cat([state.S, state.z.unsqueeze(-1)], -1) if normalize else state.S
        S = S.to(state_dtype)
    fla = mode != "naive" and use_fla(backend, q, state_dtype, mode)
    if feature_map is not None and (fla or mode != "chunked"):
        q, k = map_outside(feature_map, q, k)
        feature_map = None
    if fla:
        la = None if log_alpha is None else log_alpha.float()
        out, S, z = fla_additive(
            q, k.to(q.dtype), v.to(q.dtype), S[..., :V], S[..., V] if normalize else None, None, la, mode, eps
        )
        return out, AttnState(S, z)
    if mode == "chunked":  # the paper's chunked op with per-block gate tables (models/ops/linear/chunked.py)
        S0, z0 = (S[..., :V].contiguous(), S[..., V].contiguous()) if normalize else (S, None)
        gate = None if log_alpha is None else g
        dt = q.dtype
        if use_batched(B, T, H, chunk_size, q.device):  # many short windows: one batched pass (batched.py)
            out, S, z = batched_chunked(q, k.to(dt), v.to(dt), S0, z0, None, gate, chunk_size, eps, feature_map)
            return out, AttnState(S, z)
        args = (S0, z0, None, chunk_size, eps, feature_map, gate)
        out, S, z = ChunkedLinearAttention.apply(q, k.to(dt), v.to(dt), *args)
        return out, AttnState(S, z)
    elif mode in ("recurrent", "naive"):
        v1 = torch.cat([v, v.new_ones(B, T, H, 1)], -1) if normalize else v
        with torch.autocast(q.device.type, enabled=False):  # the state math stays in the state dtype
            o, S = (_recurrent if mode == "recurrent" else _naive)(q, k, v1, g, S)
        out = o[..., :V] / (o[..., V:] + eps) if normalize else o
    else:
        raise ValueError(f"unknown mode {mode!r}; expected 'chunked', 'recurrent' or 'naive'")
    return out, AttnState(S[..., :V], S[..., V]) if normalize else AttnState(S, None)


def _naive(q: Tensor, k: Tensor, v: Tensor, g: Tensor, S0: Tensor) -> tuple[Tensor, Tensor]:
    """The quadratic masked form over the whole sequence, in the wider of q's and the state's dtype."""
    T, dt = q.shape[1], torch.promote_types(q.dtype, S0.dtype)
    G = g.cumsum(1).transpose(1, 2)  # (B, H, T), float64
    qd, kd, vd = (x.transpose(1, 2).to(dt) for x in (q, k, v))  # (B, H, T, ·)
    causal = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    D = torch.exp((G[..., :, None] - G[..., None, :]).masked_fill(~causal, -torch.inf)).to(dt)
    o = ((qd @ kd.transpose(-1, -2)) * D) @ vd + (qd * G.exp()[..., None].to(dt)) @ S0.to(dt)
    w_end = torch.exp(G[..., -1:] - G)[..., None].to(dt)  # (B, H, T, 1): each key decayed to the end
    S = S0 * G[..., -1].exp()[..., None, None].to(S0.dtype) + ((kd * w_end).transpose(-1, -2) @ vd).to(S0.dtype)
    return o.transpose(1, 2).to(q.dtype), S


def _recurrent(q: Tensor, k: Tensor, v: Tensor, g: Tensor, S: Tensor) -> tuple[Tensor, Tensor]:
    """One token at a time: S ← α S + k vᵀ, o = Sᵀ q. Plain autograd; for decoding and streams."""
    outs = []
    for t in range(q.shape[1]):
        a = g[:, t].exp().to(S.dtype)[..., None, None]  # (B, H, 1, 1)
        S = a * S + k[:, t, :, :, None].to(S.dtype) * v[:, t, :, None, :].to(S.dtype)
        outs.append((q[:, t, :, None, :].to(S.dtype) @ S).squeeze(-2))
    return torch.stack(outs, 1).to(q.dtype), S


def _decay_matrix(b: Tensor, dt: torch.dtype) -> Tensor:
    """e^(b_t - b_s) for s <= t, else 0 ([..., c, c]), from float64 cumulative log gates b [..., c].

    The difference is taken in float64 (exact enough for any chunk); the exp runs in float32 unless the
    compute dtype is float64, since its result is rounded to the compute dtype anyway, as 2^(x·log2 e)
    (~2x faster than exp on this CPU) with s > t clamped to 0, then zeroed.
    """
    diff = (b[..., :, None] - b[..., None, :]).to(torch.promote_types(dt, torch.float32))
    return diff.clamp_(max=0).mul_(1 / math.log(2)).exp2_().tril_().to(dt)


def _blocks(x: Tensor, t0: int, t1: int, C: int) -> Tensor:
    """x[:, t0:t1] of [B, T, H, *D] as [B, H, n, C, *D], zero-padded to whole chunks.

    Zero padding is exact: a zero key writes nothing and a zero log-gate (α = 1) forgets nothing.
    """
    xb = x[:, t0:t1]
    pad = -(t1 - t0) % C
    if pad:
        xb = torch.cat([xb, xb.new_zeros(xb.shape[0], pad, *xb.shape[2:])], 1)
    B, L, H = xb.shape[:3]
    xb = xb.reshape(B, L // C, C, H, *xb.shape[3:])
    return xb.permute(0, 3, 1, 2, *range(4, xb.dim())).contiguous()
