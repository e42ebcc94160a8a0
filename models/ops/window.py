"""Sliding-window attention in three exact modes: softmax over the last W tokens, alone or with linear
attention over every older token (the LoLCATs hybrid, Zhang et al. 2024), with one shared normalizer.

With s_ij = q_i·k_j/√d (q, k as scored, e.g. RoPE'd) and the window i-W < j <= i:

    softmax window:  y_i = Σ_win e^(s_ij) v_j / Σ_win e^(s_ij)
    hybrid:          y_i = (Σ_win e^(s_ij) v_j + Σ_{j<=i-W} γ^(i-W-j) φ(q_i)·φ(k_j) v_j)
                           / (Σ_win e^(s_ij) + Σ_{j<=i-W} γ^(i-W-j) φ(q_i)·φ(k_j) + eps)

A key enters the linear memory when it leaves the window; a fixed decay γ counts from there. The state
(``WindowState``) is the keys and values of the last W tokens ([B, W, H, ·], oldest first) and, for the
hybrid, the linear part's S [B, H, K, V] and z [B, H, K] over every older token: constant size. Slots of
tokens a lane has not read yet are invalid; validity comes from the token counter ``seen`` [B], so lanes
at different positions (e.g. fewer than W tokens read) stay exact.

Both parts are scaled by e^(-r_i), r_i = max(max_win s_ij, log(linear denominator_i + eps)), detached:
the ratio, eps included, does not depend on r, every scaled term is <= 1 and the denominator >= 1.

Modes:
- ``naive``: the masked T×(W+T) formula, for tests.
- ``chunked``: the linear part is the unnormalized gated op (``ops_gated``, v' = [v, 1] gives numerator
  and denominator in one call) on keys and values delayed by W, the first W of them from the buffer; the
  window part is a banded softmax over [buffer; current] by blocks of queries: memory O(T·(Cq+W)), no T×T.
- ``recurrent``: one token at a time: append the token, move the oldest buffered one into S, z, attend.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from strandline.models.ops.gated import gated_linear_attention
from strandline.models.ops.linear import EPS, AttnState, Mode, _log_decay

BLOCK_ELEMS = 1 << 22
"""Scores per group of query blocks in the chunked window part (bounds the temporaries when no grad is kept)."""
RECOMPUTE_ELEMS = 1 << 24
"""With gradients, a chunked call whose window scores exceed this many elements (64 MB in float32) keeps
only its inputs and recomputes each group's scores in backward (memory O(T·d) instead of O(T·(Cq+W)));
smaller ones keep the scores: recomputing costs 10-50% more time (benchmarks/window_speed.py, T=16384)."""


class WindowState(NamedTuple):
    """The op's state: ``k`` [B, W, H, d] and ``v`` [B, W, H, V] of the last W tokens (oldest first), and for
    the hybrid ``S`` [B, H, K, V], ``z`` [B, H, K] = Σ γ^(age-W) φ(k_j) v_jᵀ, Σ γ^(age-W) φ(k_j) over older tokens."""

    k: Tensor
    v: Tensor
    S: Tensor | None = None
    z: Tensor | None = None


def init_window_state(
    batch_size: int, window: int, n_heads: int, head_dim: int, value_dim: int,
    key_dim: int | None = None, state_dtype: torch.dtype = torch.float32, device=None,
) -> WindowState:  # fmt: skip
    """The empty state (the same as None): zero buffers (all invalid at ``seen`` = 0), and S, z when ``key_dim``."""
    k = torch.zeros(batch_size, window, n_heads, head_dim, device=device)
    v = torch.zeros(batch_size, window, n_heads, value_dim, device=device)
    if key_dim is None:
        return WindowState(k, v)
    S = torch.zeros(batch_size, n_heads, key_dim, value_dim, dtype=state_dtype, device=device)
    return WindowState(k, v, S, torch.zeros(batch_size, n_heads, key_dim, dtype=state_dtype, device=device))


def window_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    window: int,
    state: WindowState | None = None,
    seen: Tensor | None = None,
    fq: Tensor | None = None,
    phi: Callable[[Tensor], Tensor] | None = None,
    mode: Mode = "chunked",
    chunk_size: int = 64,
    decay: list[float] | None = None,
    eps: float = EPS,
    state_dtype: torch.dtype | None = None,
) -> tuple[Tensor, WindowState]:
    """Causal sliding-window softmax attention, or the window + linear hybrid when ``fq`` is given.

    Args:
        q, k: [B, T, H, d] queries and keys as scored by the window's softmax (positions applied).
        v: [B, T, H, V] values.
        window: W >= 1 tokens per window (each query sees its last W keys, itself included); the hybrid
            also takes 0 (no window: the plain normalized linear attention).
        state: ``WindowState`` from a previous call, or None for the empty state.
        seen: int64 [B], tokens each lane has read before this call; decides which buffered slots hold
            tokens. Required with a state; None (0) without one.
        fq: [B, T, H, K] φ(q) for the hybrid; None for the softmax window alone.
        phi: the key feature map, [B, t, H, d] -> [B, t, H, K] token by token (hybrid only).
        mode: ``"chunked"``, ``"recurrent"`` or ``"naive"``; all three agree.
        chunk_size: C of the linear part's chunked op.
        decay: fixed γ per head of the linear part (None: 1).
        eps: added to the hybrid's denominator.
        state_dtype: accumulation dtype of S, z; defaults to the passed state's, else at least float32.

    Returns:
        out [B, T, H, V] in q's dtype and the new ``WindowState`` (buffers in at least float32).
    """
    B, T, H, d = q.shape
    hybrid = fq is not None
    _check_call(q, k, v, window, fq, phi, mode)
    if state is None:
        K = fq.shape[-1] if hybrid else None
        state = init_window_state(B, window, H, d, v.shape[-1], K, state_dtype or torch.float32, q.device)
    elif hybrid and state.S is None:
        raise ValueError("the hybrid needs a state with S and z; this state is a softmax window's")
    elif seen is None and window:  # without the counter every buffered token would silently count as unread
        raise ValueError("a state was passed without seen (the tokens each lane has read before this call)")
    if state.k.shape[1] != window:
        raise ValueError(f"the state buffers {state.k.shape[1]} tokens, the window is {window}")
    seen = torch.zeros(B, dtype=torch.long, device=q.device) if seen is None else seen.to(q.device)
    k_ext, v_ext = torch.cat([state.k.to(q.dtype), k], 1), torch.cat([state.v.to(q.dtype), v], 1)  # (B, W+T, H, ·)
    valid = torch.arange(window + T, device=q.device) >= (window - seen)[:, None]  # (B, W+T): slot holds a token
    new = _new_buffers(k_ext, v_ext, T, q.dtype)
    if not hybrid:
        fn = {"chunked": _banded, "recurrent": _recurrent_window, "naive": _naive_softmax}[mode]
        return fn(q, k_ext, v_ext, valid, window, None).to(q.dtype), new
    sd = state_dtype or state.S.dtype
    S1 = torch.cat([state.S, state.z.unsqueeze(-1)], -1).to(sd)  # S' = [S, z]
    log_g = _log_decay(decay, H, q.device)
    if mode == "naive":
        return _naive_hybrid(q, k_ext, v_ext, valid, fq, phi, S1, log_g, window, eps)
    fk = phi(k_ext[:, :T]) * valid[:, :T, None, None].to(fq.dtype)  # keys delayed by W; empty slots write 0
    v1 = torch.cat([v_ext[:, :T], v_ext.new_ones(B, T, H, 1)], -1)  # v' = [v, 1]: numerator and denominator
    log_a = None if log_g is None else log_g.expand(B, T, H)
    lin_mode = "chunked" if mode == "chunked" else "recurrent"
    o1, s1 = gated_linear_attention(
        fq, fk, v1, log_a, AttnState(S1, None), lin_mode, chunk_size, normalize=False, state_dtype=sd
    )
    lin = (o1[..., :-1], o1[..., -1], eps)  # numerator [B, T, H, V], denominator [B, T, H], eps
    if window == 0:
        o = lin[0] / (lin[1] + eps)[..., None]
    else:
        o = (_banded if mode == "chunked" else _recurrent_window)(q, k_ext, v_ext, valid, window, lin)
    return o.to(q.dtype), new._replace(S=s1.S[..., :-1], z=s1.S[..., -1])


def _check_call(q: Tensor, k: Tensor, v: Tensor, window: int, fq: Tensor | None, phi, mode: str) -> None:
    """ValueError for shapes, window or mode that the op cannot run (a programming error, not user input)."""
    hybrid = fq is not None
    if k.shape != q.shape or v.shape[:3] != q.shape[:3] or (hybrid and fq.shape[:3] != q.shape[:3]):
        raise ValueError(
            f"expected q, k [B,T,H,d], v [B,T,H,V]; got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        )
    if window < (0 if hybrid else 1) or (hybrid and phi is None):
        raise ValueError(f"window must be >= {0 if hybrid else 1} (the hybrid needs phi), got {window}")
    if mode not in ("chunked", "recurrent", "naive"):
        raise ValueError(f"unknown mode {mode!r}; expected 'chunked', 'recurrent' or 'naive'")


def _new_buffers(k_ext: Tensor, v_ext: Tensor, T: int, dt: torch.dtype) -> WindowState:
    """The last W of [buffer; current] as the next buffers (contiguous: a state is saved and sliced later)."""
    bd = torch.promote_types(dt, torch.float32)
    return WindowState(k_ext[:, T:].to(bd).contiguous(), v_ext[:, T:].to(bd).contiguous())


def _attend(q: Tensor, k: Tensor, v: Tensor, band: Tensor | None, ok: Tensor, lin_num, lin_den, eps: float) -> Tensor:
    """One block of the window part: q [..., q, d], k [..., L, d], v [..., L, V]; a key is seen where ``band``
    [q, L] (None: everywhere) and ``ok`` [..., 1, L] (slot holds a token) hold; the linear parts [..., q, V]
    and [..., q] (or None) -> out [..., q, V]. The mask is built here, so a recomputed block saves none."""
    s = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5
    s = s.masked_fill(~(ok if band is None else band & ok), -torch.inf)
    m = s.amax(-1)
    r = m
    if lin_num is not None:
        r = torch.maximum(m, (lin_den + eps).clamp_min(0).log())
    # the ratio does not depend on r (a stabilizer, not part of the formula); rows with nothing to see
    # (padding) get r = 0 so that no inf - inf reaches the backward
    r = torch.where(torch.isfinite(r), r, torch.zeros_like(r)).detach()
    p = torch.exp(s - r[..., None])
    num, den = p @ v, p.sum(-1)
    if lin_num is not None:
        c = torch.exp(-r)
        num, den = num + c[..., None] * lin_num, den + c * (lin_den + eps)
    return num / den.clamp_min(torch.finfo(den.dtype).tiny)[..., None]  # real rows have den >= 1


def _banded(q: Tensor, k_ext: Tensor, v_ext: Tensor, valid: Tensor, W: int, lin) -> Tensor:
    """The window part by blocks of Cq queries, each against the Cq+W-1 keys its band can reach.

    Query i (ext index W+i) sees ext indices i+1 .. i+W, i.e. ext'[i .. i+W-1] with ext' = ext[1:]; the
    keys of block b are ext'[b·Cq .. b·Cq+Cq+W-2] (an unfold, no copy of the whole sequence).
    """
    B, T, H, d = q.shape
    V, wdt = v_ext.shape[-1], torch.promote_types(q.dtype, torch.float32)
    Cq = min(T, max(32, min(W, 256)))  # per query Cq+W-1 scores for W needed: small Cq wastes less
    n, L = -(-T // Cq), Cq + W - 1
    P = (n - 1) * Cq + L  # padded length of ext'
    with torch.autocast(q.device.type, enabled=False):  # scores, exp and sums in float32 at least
        qb = _pad_time(q, n * Cq).to(wdt).view(B, n, Cq, H, d).permute(0, 3, 1, 2, 4)  # (B, H, n, Cq, d)
        kb = _pad_time(k_ext[:, 1:], P).to(wdt).permute(0, 2, 3, 1).unfold(-1, L, Cq)  # (B, H, d, n, L)
        vb = _pad_time(v_ext[:, 1:], P).to(wdt).permute(0, 2, 3, 1).unfold(-1, L, Cq)  # (B, H, V, n, L)
        ok = _pad_time(valid[:, 1:], P).unfold(1, L, Cq)[:, None, :, None, :]  # (B, 1, n, 1, L)
        i, j = torch.arange(Cq, device=q.device), torch.arange(L, device=q.device)
        band = ((j[None, :] - i[:, None]) >= 0) & ((j[None, :] - i[:, None]) < W)  # (Cq, L)
        if lin is not None:
            num_l = _pad_time(lin[0], n * Cq).to(wdt).view(B, n, Cq, H, V).permute(0, 3, 1, 2, 4)
            den_l = _pad_time(lin[1], n * Cq).to(wdt).view(B, n, Cq, H).permute(0, 3, 1, 2)
        g = max(1, BLOCK_ELEMS // max(1, B * H * Cq * L))
        grads = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k_ext, v_ext, *(lin or ())[:2]))
        recompute = grads and B * H * n * Cq * L > RECOMPUTE_ELEMS
        outs = []
        for b0 in range(0, n, g):
            sl = slice(b0, min(n, b0 + g))
            args = (qb[:, :, sl], kb[:, :, :, sl].permute(0, 1, 3, 4, 2), vb[:, :, :, sl].permute(0, 1, 3, 4, 2))
            args += (band, ok[:, :, sl])  # (Cq, L): in the band; (B, 1, g, 1, L): a token read
            args += (None, None, 0.0) if lin is None else (num_l[:, :, sl], den_l[:, :, sl], lin[2])
            outs.append(checkpoint(_attend, *args, use_reentrant=False) if recompute else _attend(*args))
        o = torch.cat(outs, 2).reshape(B, H, n * Cq, V)[:, :, :T]
    return o.transpose(1, 2)


def _pad_time(x: Tensor, length: int) -> Tensor:
    """x [B, t, ...] zero- (or False-) padded along time to ``length``."""
    pad = length - x.shape[1]
    return x if pad == 0 else torch.cat([x, x.new_zeros(x.shape[0], pad, *x.shape[2:])], 1)


def _recurrent_window(q: Tensor, k_ext: Tensor, v_ext: Tensor, valid: Tensor, W: int, lin) -> Tensor:
    """The window part one token at a time over a W-token buffer (the form a stream or ``step`` runs)."""
    T = q.shape[1]
    wdt = torch.promote_types(q.dtype, torch.float32)
    outs = []
    with torch.autocast(q.device.type, enabled=False):
        for t in range(T):
            kb, vb, ok = k_ext[:, t + 1 : t + 1 + W], v_ext[:, t + 1 : t + 1 + W], valid[:, t + 1 : t + 1 + W]
            qt, kt, vt = q[:, t, :, None].to(wdt), kb.to(wdt).transpose(1, 2), vb.to(wdt).transpose(1, 2)
            see = ok[:, None, None, :]  # (B, 1, 1, W): the slots that hold a token
            if lin is None:
                outs.append(_attend(qt, kt, vt, None, see, None, None, 0.0)[:, :, 0])
            else:
                num_l, den_l = lin[0][:, t].to(wdt)[:, :, None], lin[1][:, t].to(wdt)[:, :, None]
                outs.append(_attend(qt, kt, vt, None, see, num_l, den_l, lin[2])[:, :, 0])
    return torch.stack(outs, 1)  # (B, T, H, V)


def _window_mask(T: int, W: int, valid: Tensor) -> tuple[Tensor, Tensor]:
    """(window [B, 1, T, W+T], older [B, 1, T, W+T]): which ext keys query i sees by softmax / linearly."""
    i = torch.arange(T, device=valid.device)[:, None]
    e = torch.arange(W + T, device=valid.device)[None, :]
    vm = valid[:, None, None, :]
    return ((e > i) & (e <= i + W)) & vm, (e <= i) & vm


def _naive_softmax(q: Tensor, k_ext: Tensor, v_ext: Tensor, valid: Tensor, W: int, lin: None = None) -> Tensor:
    """The masked formula over all T×(W+T) pairs: softmax over each query's window."""
    T, d = q.shape[1], q.shape[-1]
    win, _ = _window_mask(T, W, valid)
    s = torch.einsum("bihd,bjhd->bhij", q, k_ext) / math.sqrt(d)
    w = s.masked_fill(~win, -torch.inf).softmax(-1)
    return torch.einsum("bhij,bjhv->bihv", w, v_ext)


def _naive_hybrid(q, k_ext, v_ext, valid, fq, phi, S1, log_g, W: int, eps: float) -> tuple[Tensor, WindowState]:
    """The hybrid formula as written, over all T×(W+T) pairs, with the final state summed directly."""
    B, T, H, d = q.shape
    V = v_ext.shape[-1]
    dt = torch.promote_types(q.dtype, S1.dtype)
    win, old = _window_mask(T, W, valid)
    s = torch.einsum("bihd,bjhd->bhij", q.to(dt), k_ext.to(dt)) / math.sqrt(d)
    s = s.masked_fill(~win, -torch.inf)
    m = s.amax(-1, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))  # window 0: no softmax term
    fk = phi(k_ext).to(dt)  # (B, W+T, H, K)
    i, e = torch.arange(T, device=q.device)[:, None], torch.arange(W + T, device=q.device)[None, :]
    g_ie = torch.ones(H, T, W + T, dtype=dt, device=q.device) if log_g is None else _gamma(log_g, i - e, dt)
    A = torch.einsum("bihk,bjhk->bhij", fq.to(dt), fk) * old * g_ie  # linear weights of older tokens
    g_in = torch.ones(H, T, 1, dtype=dt, device=q.device) if log_g is None else _gamma(log_g, i + 1, dt)
    carried = torch.einsum("bihk,bhkv->bhiv", fq.to(dt), S1.to(dt)) * g_in  # the older-than-buffer state
    num_l = A @ v_ext.to(dt).transpose(1, 2) + carried[..., :V]
    den_l = A.sum(-1, keepdim=True) + carried[..., V:]
    p = torch.exp(s - m)
    c = torch.exp(-m)
    out = (p @ v_ext.to(dt).transpose(1, 2) + c * num_l) / (p.sum(-1, keepdim=True) + c * (den_l + eps))
    # S after T tokens: every valid ext key with e < T (it left the window), decayed to the end
    w_end = valid[:, :T, None].to(dt).expand(B, T, H)
    if log_g is not None:
        w_end = w_end * _gamma(log_g, T - 1 - e[0, :T], dt).T[None]
    fkv = torch.einsum("beh,behk,behv->bhkv", w_end, fk[:, :T], v_ext[:, :T].to(dt))
    fz = torch.einsum("beh,behk->bhk", w_end, fk[:, :T])
    g_T = 1 if log_g is None else _gamma(log_g, torch.tensor(T), S1.dtype).view(1, H, 1, 1)
    S1 = S1 * g_T + torch.cat([fkv, fz[..., None]], -1).to(S1.dtype)
    new = _new_buffers(k_ext, v_ext, T, q.dtype)._replace(S=S1[..., :V], z=S1[..., V])
    return out.transpose(1, 2).to(q.dtype), new


def _gamma(log_g: Tensor, exps: Tensor, dt: torch.dtype) -> Tensor:
    """γ_h ** max(exps, 0) as [H, *exps.shape] (float64 exponent, cast to dt)."""
    return torch.exp(log_g.view(-1, *([1] * exps.dim())) * exps.clamp(min=0).to(log_g)).to(dt)
