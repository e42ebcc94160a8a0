"""Gated causal linear attention: a data-dependent forget gate per head and token, in three exact modes.

    S_t = α_t S_{t-1} + k_t v_tᵀ        z_t = α_t z_{t-1} + k_t        (α_t = exp(g_t) ∈ (0, 1])
    out_t = q_tᵀ S_t / (q_tᵀ z_t + eps)   (normalized: the paper's z, gated)   or   q_tᵀ S_t   (unnormalized)

This is the scalar gate of GLA / Mamba-2 (FLA's ``simple_gla``); a fixed per-head γ is the special case
g_t = log γ. With G_t = Σ_{s<=t} g_s, token s reaches token t with weight exp(G_t - G_s) <= 1. The chunked
mode only ever exponentiates such differences (never exp(G_t) and exp(-G_s) separately, which overflow
for strong gates), keeps the within-chunk sums in float64 and carries the state across chunks.

Backward (chunked): a custom autograd function that keeps q, k, v, g, the initial and final state and
recomputes by chunks: dq is a forward scan, dk and dv reverse-time scans with the gate shifted by one
token, and the gate's gradient follows from the identity ∂L/∂G_t = q_t·dq_t - k_t·dk_t (+ ⟨dS_T, S_T⟩ at
the last token), then a reverse cumulative sum. No T×T matrix and no per-token state is stored.

The normalizer is carried as one extra value column (v' = [v, 1], S' = [S, z]) as in ``models/ops.py``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .backends import Backend, fla_additive, use_fla
from .ops import EPS, AttnState, Mode


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
) -> tuple[Tensor, AttnState]:
    """Causal linear attention with a per-token forget gate and a carried state.

    Args:
        q: [B, T, H, K] feature-mapped queries.
        k: [B, T, H, K] feature-mapped keys.
        v: [B, T, H, V] values.
        log_alpha: [B, T, H] log of the gate, <= 0 (e.g. logsigmoid(w·x + b) / τ); None means α = 1.
        state: ``AttnState`` from a previous call (``z`` None when not normalized), or None for zeros.
        mode: ``"chunked"``, ``"recurrent"`` or ``"naive"``; all three agree.
        chunk_size: C for the chunked mode; any T works.
        normalize: divide by q·z + eps (needs φ >= 0 or a positive kernel); else return q·S and carry no z.
        eps: added to the denominator.
        state_dtype: accumulation dtype; defaults to the passed state's, else at least float32.
        backend: "auto" | "torch" | "fla" (``models/backends.py``: FLA's ``simple_gla`` on CUDA); None reads
            ``STRANDLINE_BACKEND``.

    Returns:
        out: [B, T, H, V] in q's dtype, and the new ``AttnState`` (S [B, H, K, V], z [B, H, K] or None).
    """
    if q.dim() != 4 or k.shape != q.shape or v.shape[:3] != q.shape[:3]:
        raise ValueError(f"expected q, k [B,T,H,K] and v [B,T,H,V]; got {tuple(q.shape)}, {tuple(v.shape)}")
    B, T, H, K = q.shape
    V = v.shape[-1]
    if state_dtype is None:
        state_dtype = state.S.dtype if state is not None else torch.promote_types(q.dtype, torch.float32)
    g = q.new_zeros(B, T, H, dtype=torch.float64) if log_alpha is None else log_alpha.to(torch.float64)
    S = q.new_zeros(B, H, K, V + normalize, dtype=state_dtype)
    if state is not None:
        if normalize and state.z is None:
            raise ValueError("normalize=True needs a state with z; this state was built without a normalizer")
        S = torch.cat([state.S, state.z.unsqueeze(-1)], -1) if normalize else state.S
        S = S.to(state_dtype)
    if mode != "naive" and use_fla(backend, q, state_dtype, mode):
        la = None if log_alpha is None else log_alpha.float()
        out, S, z = fla_additive(
            q, k.to(q.dtype), v.to(q.dtype), S[..., :V], S[..., V] if normalize else None, None, la, mode, eps
        )
        return out, AttnState(S, z)
    if mode == "chunked":
        out, S = GatedChunked.apply(q, k, v, g, S, chunk_size, normalize, eps)
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


def _decay_matrix(b: Tensor, causal: Tensor, dt: torch.dtype) -> Tensor:
    """e^(b_t - b_s) where ``causal`` [c, c] holds, else 0, from float64 cumulative log gates b [..., c].

    The difference is taken in float64 (exact enough for any chunk); the exp runs in float32 unless the
    compute dtype is float64, since its result is rounded to the compute dtype anyway.
    """
    diff = (b[..., :, None] - b[..., None, :]).to(torch.promote_types(dt, torch.float32))
    return diff.masked_fill_(~causal, -torch.inf).exp_().to(dt)


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


def gated_scan(q: Tensor, k: Tensor, v: Tensor, g: Tensor, S: Tensor, chunk_size: int) -> tuple[Tensor, Tensor]:
    """o_t = Σ_{s<=t} e^(G_t - G_s) (q_t·k_s) v_s + e^(G_t) q_tᵀ S and the final state, by chunks, no autograd.

    Args:
        q, k: [B, T, H, K]; v: [B, T, H, V]; g: [B, T, H] float64 log gates; S: [B, H, K, V] state dtype.
        chunk_size: C. Chunks are processed in blocks of up to 16 (vectorized inside a block: the C×C
            products of every chunk, and the block's chunk states mixed by one n×n product), blocks in a
            Python loop: working memory is one block.

    Returns:
        o [B, T, H, V] in q's dtype and the state after the last token.
    """
    B, T, H, K = q.shape
    V, dt, sd = v.shape[-1], q.dtype, S.dtype
    C = max(1, min(chunk_size, T))
    n_max = max(1, min(16, (1 << 21) // max(1, B * H * (C * C + K * V))))
    o = q.new_empty(B, T, H, V)
    tril = torch.ones(C, C, dtype=torch.bool, device=q.device).tril()
    with torch.autocast(q.device.type, enabled=False):  # dtypes are explicit: products in dt, sums in sd
        for t0 in range(0, T, n_max * C):
            t1 = min(T, t0 + n_max * C)
            qb, kb, vb, gb = (_blocks(x, t0, t1, C) for x in (q, k, v, g))  # (B, H, n, C, ·), gb (B, H, n, C)
            b = gb.cumsum(-1)  # within-chunk log decay, float64
            D = _decay_matrix(b, tril, dt)
            ob = ((qb @ kb.transpose(-1, -2)) * D) @ vb
            w_end = torch.exp(b[..., -1:] - b)[..., None].to(dt)  # keys decayed to their chunk's end
            U = ((kb * w_end).transpose(-1, -2) @ vb).to(sd)  # (B, H, n, K, V) each chunk's own write
            E = b[..., -1].cumsum(-1)  # (B, H, n): log decay from the block start to each chunk's end
            E0 = E - b[..., -1]  # ... to each chunk's start
            later = torch.ones(E.shape[-1], E.shape[-1], dtype=torch.bool, device=q.device).tril(-1)
            mix = torch.exp((E0[..., :, None] - E[..., None, :]).masked_fill(~later, -torch.inf)).to(sd)
            S_start = mix @ U.flatten(-2) + E0.exp()[..., None].to(sd) * S.flatten(-2)[:, :, None]
            ob += (qb * b.exp()[..., None].to(dt)) @ S_start.view(U.shape).to(dt)
            w_blk = torch.exp(E[..., -1:] - E).to(sd)[..., None, None]  # each chunk's write, decayed to block end
            S = E[..., -1].exp().to(sd)[..., None, None] * S + (w_blk * U).sum(2)
            n = qb.shape[2]
            o[:, t0:t1] = ob.permute(0, 2, 3, 1, 4).reshape(B, n * C, H, V)[:, : t1 - t0]
    return o, S


class GatedChunked(torch.autograd.Function):
    """Chunked gated attention (normalized or not) with a backward that recomputes by chunks.

    With do' = ∂L/∂o' for o' = [num, den - eps] (or o' = out unnormalized) and dS_T = ∂L/∂S_T:
    dq = scan(do', v', k; S0ᵀ) forward in time; R_s = ∂L/∂S_s from a reverse scan whose gate at token s is
    α_{s+1} (the gate of the token after it) started from dS_T: dk_s = R_s v'_s, dv'_s = R_sᵀ k_s,
    dS0 = α_0 R_0; and ∂L/∂g by the reverse cumsum of q·dq - k·dk (+ ⟨dS_T, S_T⟩ at the last token).
    """

    @staticmethod
    def forward(ctx, q, k, v, g, S0, chunk_size, normalize, eps):
        v1 = torch.cat([v, v.new_ones(*v.shape[:3], 1)], -1) if normalize else v
        o, S = gated_scan(q, k, v1, g, S0, chunk_size)
        V = v.shape[-1]
        den = o[..., V:] + eps if normalize else None
        out = o[..., :V] / den if normalize else o
        ctx.save_for_backward(q, k, v, g, S0, S, out, den)
        ctx.chunk_size, ctx.normalize = chunk_size, normalize
        return out, S

    @staticmethod
    def backward(ctx, dout, dS):
        q, k, v, g, S0, S_T, out, den = ctx.saved_tensors
        C, V = ctx.chunk_size, v.shape[-1]
        if ctx.normalize:
            do = torch.cat([dout / den, -(dout * out).sum(-1, keepdim=True) / den], -1)
            v1 = torch.cat([v, v.new_ones(*v.shape[:3], 1)], -1)
        else:
            do, v1 = dout, v
        do = do.to(q.dtype)
        flip = lambda x: x.flip(1)  # noqa: E731 - reverse time
        g_next = torch.cat([g[:, 1:], g.new_zeros(g[:, :1].shape)], 1)  # α_{s+1}: the gate of the reverse scan
        dq, _ = gated_scan(do, v1, k, g, S0.transpose(-1, -2), C)
        dS_q = dS.to(S0.dtype)
        dk, _ = gated_scan(flip(v1), flip(do), flip(q), flip(g_next), dS_q.transpose(-1, -2).contiguous(), C)
        dv1, R0 = gated_scan(flip(k), flip(q), flip(do), flip(g_next), dS_q, C)
        dk, dv1 = flip(dk), flip(dv1)
        dG = (q.double() * dq.double()).sum(-1) - (k.double() * dk.double()).sum(-1)  # (B, T, H)
        dG[:, -1] += (dS.double() * S_T.double()).sum((-1, -2))
        dg = dG.flip(1).cumsum(1).flip(1)  # g_u enters every G_t with t >= u
        dS0 = g[:, 0].exp().to(S0.dtype)[..., None, None] * R0
        return dq, dk, dv1[..., :V], dg, dS0, None, None, None
