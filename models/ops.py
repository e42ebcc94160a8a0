"""Causal linear attention in three exact modes: ``naive``, ``chunked`` and ``recurrent``.

With feature-mapped queries and keys (φ already applied, so q, k >= 0), causal linear attention is

    S_t = γ S_{t-1} + k_t v_tᵀ        z_t = γ z_{t-1} + k_t
    out_t = q_tᵀ S_t / (q_tᵀ z_t + eps)

(Katharopoulos et al. 2020, eq. 16-20, with an optional per-head decay γ ∈ (0, 1]; γ = 1 is the paper).
The normalizer z is carried as one extra value column: v' = [v, 1] and S' = [S, z], so numerator and
denominator come out of the same products and every mode shares one code path for both.

Modes:
- ``naive``: the quadratic masked form, for tests.
- ``chunked``: chunks of C tokens, a masked C×C product inside a chunk and the running state across
  chunks; chunks are processed in blocks (vectorized over the chunks of a block, a Python loop over
  blocks, never over tokens). Its backward is a custom autograd function that keeps only q, k, v and
  the initial state and recomputes by chunks (the spirit of the paper's eq. 8-10): no T×T matrix and
  no per-token K×V state is ever stored.
- ``recurrent``: one token at a time, for generation and streams.

All three return the same outputs, final state and gradients (initial state included) for any split
of a sequence into calls. The state is a value: a new one is returned, the one passed in is never
modified.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

import torch
from torch import Tensor

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
    chunk_size: int = 64,
    decay: Tensor | float | None = None,
    eps: float = EPS,
    state_dtype: torch.dtype | None = None,
) -> tuple[Tensor, AttnState]:
    """Causal linear attention with a carried state.

    Args:
        q: [B, T, H, K] feature-mapped queries (φ(q) >= 0).
        k: [B, T, H, K] feature-mapped keys.
        v: [B, T, H, V] values.
        state: ``AttnState`` from a previous call, or None for the zero state.
        mode: ``"chunked"``, ``"recurrent"`` or ``"naive"``; all three agree.
        chunk_size: C for the chunked mode; any T works (the tail is a shorter chunk).
        decay: per-head γ ∈ (0, 1] as a [H] tensor or a float; None means γ = 1 (the paper). Not learnable.
        eps: added to the denominator.
        state_dtype: dtype the state accumulates in. Defaults to the passed state's dtype, else at least
            float32. Use float64 for streams beyond ~2^24 tokens without decay (float32 sums stall there).

    Returns:
        out: [B, T, H, V] in q's dtype, and the new ``AttnState`` (S [B, H, K, V], z [B, H, K]) in state_dtype.
    """
    if q.dim() != 4 or k.shape != q.shape or v.shape[:3] != q.shape[:3]:
        raise ValueError(
            f"expected q, k [B,T,H,K] and v [B,T,H,V]; got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        )
    B, T, H, K = q.shape
    V = v.shape[-1]
    if state_dtype is None:
        state_dtype = state.S.dtype if state is not None else torch.promote_types(q.dtype, torch.float32)
    log_g = _log_decay(decay, H, q.device)
    if state is None:
        S1 = q.new_zeros(B, H, K, V + 1, dtype=state_dtype)
    else:
        S1 = torch.cat([state.S, state.z.unsqueeze(-1)], dim=-1).to(state_dtype)  # S' = [S, z]
    if mode == "chunked":
        out, S1 = ChunkedLinearAttention.apply(q, k, v, S1, log_g, chunk_size, eps)
        return out, AttnState(S1[..., :V], S1[..., V])
    if mode not in ("recurrent", "naive"):
        raise ValueError(f"unknown mode {mode!r}; expected 'chunked', 'recurrent' or 'naive'")
    fn = _recurrent if mode == "recurrent" else _naive
    v1 = torch.cat([v, v.new_ones(B, T, H, 1)], dim=-1)  # v' = [v, 1]
    o, S1 = fn(q.transpose(1, 2), k.transpose(1, 2), v1.transpose(1, 2), S1, log_g)  # (B, H, T, ·)
    o = o.transpose(1, 2)
    return o[..., :V] / (o[..., V:] + eps), AttnState(S1[..., :V], S1[..., V])


def _log_decay(decay: Tensor | float | None, H: int, device) -> Tensor | None:
    """log γ per head as float64 [H], or None for γ = 1."""
    if decay is None:
        return None
    g = torch.as_tensor(decay, dtype=torch.float64, device=device).expand(H).clone()
    if g.requires_grad:
        raise ValueError("decay is a fixed per-head constant; learnable decay is not supported")
    if not bool(((g > 0) & (g <= 1)).all()):
        raise ValueError(f"decay must lie in (0, 1], got {g.tolist()}")
    return None if bool((g == 1).all()) else g.log()


def _powers(log_g: Tensor, exps: Tensor | int, dtype) -> Tensor:
    """γ_h ** exps for every head: [H, *exps.shape], computed in float64 and cast."""
    exps = torch.as_tensor(exps, device=log_g.device)
    return torch.exp(log_g.view(-1, *([1] * exps.dim())) * exps.to(torch.float64)).to(dtype)


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


def _to_chunks(x: Tensor, start: int, n: int, C: int, ones: bool = False) -> Tensor:
    """x[:, start : start + n*C] of [B, T, H, D] as chunk-major [n, B, H, C, D] (a block-sized copy).

    Chunk-major keeps the block contiguous, so every product below is one bmm with no hidden copy.
    With ``ones``, a column of ones is appended (D+1): the normalizer's column, built here per block
    instead of as a full-length copy of v.
    """
    B, _, H, D = x.shape
    src = x[:, start : start + n * C].reshape(B, n, C, H, D).permute(1, 0, 3, 2, 4)
    if not ones:
        return src.contiguous()
    out = x.new_empty(n, B, H, C, D + 1)
    out[..., :D] = src
    out[..., D] = 1
    return out


def _add_matmul(o: Tensor, a: Tensor, b: Tensor) -> None:
    """o += a @ b in place for [..., M, K] @ [..., K, N] (one fused baddbmm, no temporary)."""
    o.view(-1, *o.shape[-2:]).baddbmm_(a.reshape(-1, *a.shape[-2:]), b.reshape(-1, *b.shape[-2:]))


def _chunk_block(
    q: Tensor, k: Tensor, v: Tensor, S: Tensor, log_g: Tensor | None, reverse: bool
) -> tuple[Tensor, Tensor]:
    """n chunks at once. q, k [n,B,H,C,K], v [n,B,H,C,V], S [B,H,K,V] (state dtype) -> (o [n,B,H,C,V], S).

    Forward time: o_t = Σ_{s<=t} γ^(t-s) (q_t·k_s) v_s + γ^(t+1) q_tᵀ S. Reverse time is the mirror image
    (t -> C-1-t inside a chunk, chunk j -> n-1-j): o_t = Σ_{s>=t} γ^(s-t) (q_t·k_s) v_s + γ^(C-t) q_tᵀ S,
    which is what the backward pass needs.
    """
    n, C, dt, dev = q.shape[0], q.shape[3], q.dtype, q.device
    pos = torch.arange(C, device=dev)
    pos = C - 1 - pos if reverse else pos  # position inside the chunk in scan order
    j = torch.arange(n, device=dev)
    j = n - 1 - j if reverse else j  # chunk index in scan order
    A = q @ k.transpose(-1, -2)  # (n, B, H, C, C) scores inside each chunk
    U = k.transpose(-1, -2)  # (n, B, H, K, C), becomes each chunk's Σ γ^(C-1-s) k_s v_sᵀ
    mix = j[:, None] > j[None, :]  # chunk i feeds the state seen by chunk j
    if log_g is None:
        o = (A.triu_() if reverse else A.tril_()) @ v
        U = (U @ v).to(S.dtype)
        # the state each chunk starts from: S + Σ_{i before j} U_i, as one GEMM over the flattened chunk states
        S_prev = torch.addmm(S.reshape(1, -1), mix.to(S.dtype), U.view(n, -1)).view(U.shape)
        _add_matmul(o, q, S_prev.to(dt))
        return o, S + U.sum(0)
    D = _powers(log_g, (pos[:, None] - pos[None, :]).clamp(min=0), dt)  # [H, C, C] γ^(t-s)
    o = (A * D.masked_fill_(pos[:, None] < pos[None, :], 0)) @ v
    U = ((U * _powers(log_g, C - 1 - pos, dt)[:, None, :]) @ v).to(S.dtype)  # keys decayed to the chunk's end
    Dn = _powers(log_g, C * (j[:, None] - 1 - j[None, :]).clamp(min=0), S.dtype) * mix  # [H, n, n]
    S_prev = torch.einsum("hji,ibhkv->jbhkv", Dn, U)
    S_prev += _powers(log_g, C * j, S.dtype).T[:, None, :, None, None] * S  # γ^(C j) S, as [n, 1, H, 1, 1]
    _add_matmul(o, q * _powers(log_g, pos + 1, dt)[:, :, None], S_prev.to(dt))
    S_new = _powers(log_g, n * C, S.dtype)[:, None, None] * S
    S_new = S_new + torch.einsum("hi,ibhkv->bhkv", _powers(log_g, C * (n - 1 - j), S.dtype), U)
    return o, S_new


def chunk_scan(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    S: Tensor,
    log_g: Tensor | None,
    chunk_size: int,
    reverse: bool = False,
    ones: tuple[bool, bool, bool] = (False, False, False),
    block_chunks: int | None = None,
) -> tuple[Tensor, Tensor]:
    """Unnormalized decayed linear attention by chunks, with no autograd graph.

    Args:
        q, k: [B, T, H, K]; v: [B, T, H, V]; S: [B, H, K', V'] in the state dtype (K', V' count ``ones``).
        log_g: log γ per head [H] (float64) or None.
        chunk_size: C. The T % C leftover tokens form one shorter chunk (last in scan order).
        reverse: scan from the end (anti-causal), as the backward pass needs.
        ones: append a column of ones to q, k or v (the normalizer trick, without a full-size copy).
        block_chunks: chunks processed together (default: about 2^21 elements of scores and chunk states
            per block, at most 64 chunks with decay whose cross-chunk mix is an n×n product). Working
            memory is one block: only the output is full-size.

    Returns:
        o [B, T, H, V'] in q's dtype and the state after the last token in scan order.
    """
    B, T, H, _ = q.shape
    Dv = v.shape[-1] + ones[2]
    C = min(chunk_size, T)
    n_all, r = divmod(T, C)
    if block_chunks is None:
        per_chunk = B * H * (C * C + S.shape[-2] * S.shape[-1])
        block_chunks = max(1, min(64 if log_g is not None else 4096, (1 << 21) // per_chunk))
    main0 = r if reverse else 0  # the whole chunks cover [main0, main0 + n_all*C)
    starts = range(0, n_all, block_chunks)
    blocks = [(main0 + i * C, min(block_chunks, n_all - i), C) for i in (reversed(starts) if reverse else starts)]
    if r:  # the leftover chunk comes last in scan order: at the end forward, at the start in reverse
        blocks.append((0 if reverse else n_all * C, 1, r))
    o = q.new_empty(B, T, H, Dv)
    # dtypes are explicit here: products in q's dtype (bf16 under autocast), state sums in the state dtype,
    # which autocast must not round down to bf16
    with torch.autocast(q.device.type, enabled=False):
        for t0, n, c in blocks:
            qb, kb, vb = (_to_chunks(x, t0, n, c, one) for x, one in zip((q, k, v), ones, strict=True))
            ob, S = _chunk_block(qb, kb, vb, S, log_g, reverse)
            o[:, t0 : t0 + n * c].view(B, n, c, H, Dv).copy_(ob.permute(1, 0, 3, 2, 4))
    return o, S


class ChunkedLinearAttention(torch.autograd.Function):
    """Normalized chunked linear attention; backward recomputes by chunks from q, k, v and S0.

    Works on v' = [v, 1] without materializing it: ``v`` is [B, T, H, V]; the unnormalized output o' and
    the state have V+1 columns (the last is the normalizer), and out = o'[:V] / (o'[V] + eps) is taken
    here so that its backward is one fused step. With Ĝ_t = ∂L/∂S_t (Ĝ_t = q_t dO'_tᵀ + γ Ĝ_{t+1},
    Ĝ_{T-1} = q dO'ᵀ + dS_T): dq_t = S_t dO'_t (a forward scan), dk_t = Ĝ_t v'_t and dv'_t = Ĝ_tᵀ k_t
    (reverse-time scans), dS0 = γ Ĝ_0. Kept for backward: q, k, v, S0, out and the denominator; no T×T
    matrix and no per-token state.
    """

    @staticmethod
    def forward(ctx, q, k, v, S0, log_g, chunk_size, eps):
        o, S = chunk_scan(q, k, v, S0, log_g, chunk_size, ones=(False, False, True))
        V = v.shape[-1]
        den = o[..., V:] + eps  # (B, T, H, 1)
        out = o[..., :V].div_(den)  # in place: o' is not needed again
        ctx.save_for_backward(q, k, v, S0, out, den)
        ctx.log_g, ctx.chunk_size = log_g, chunk_size
        return out, S

    @staticmethod
    def backward(ctx, dout, dS):
        q, k, v, S0, out, den = ctx.saved_tensors
        log_g, C = ctx.log_g, ctx.chunk_size
        B, T, H, K = q.shape
        V = v.shape[-1]
        do = torch.empty(B, T, H, V + 1, dtype=q.dtype, device=q.device)  # dL/do' for o' = [num, den - eps]
        torch.div(dout, den, out=do[..., :V])
        do[..., V] = -(dout * out).sum(-1) / den[..., 0]
        dq = dk = dv = dS0 = None
        if ctx.needs_input_grad[0]:
            dq, _ = chunk_scan(do, v, k, S0.transpose(-1, -2), log_g, C, ones=(False, True, False))
        has_dS = bool(dS.any())  # usually the final state is not part of the loss
        # the final state's gradient reaches token t decayed by γ^(T-1-t): [H, T] -> (1, T, H, 1)
        w_end = None if log_g is None else _powers(log_g, torch.arange(T - 1, -1, -1, device=q.device), q.dtype)
        w_end = None if w_end is None else w_end.T[None, :, :, None]
        dSc = dS.to(q.dtype)
        if ctx.needs_input_grad[1]:
            zero = q.new_zeros(B, H, V + 1, K, dtype=S0.dtype)
            dk, _ = chunk_scan(v, do, q, zero, log_g, C, reverse=True, ones=(True, False, False))
            if has_dS:
                fin = torch.einsum("bthv,bhkv->bthk", v, dSc[..., :V]) + dSc[..., V].unsqueeze(1)  # v'·dS
                dk += fin if w_end is None else fin * w_end
        if ctx.needs_input_grad[2] or ctx.needs_input_grad[3]:
            zero = q.new_zeros(B, H, K, V + 1, dtype=S0.dtype)
            dv1, R0 = chunk_scan(k, q, do, zero, log_g, C, reverse=True)
            dv = dv1[..., :V]  # the ones column has no gradient to pass on
            if has_dS:
                fin = torch.einsum("bthk,bhkv->bthv", k, dSc[..., :V])
                dv += fin if w_end is None else fin * w_end
            if log_g is None:
                dS0 = R0 + dS
            else:
                dS0 = _powers(log_g, 1, S0.dtype)[:, None, None] * R0 + _powers(log_g, T, S0.dtype)[:, None, None] * dS
        return dq, dk, dv, dS0, None, None, None
