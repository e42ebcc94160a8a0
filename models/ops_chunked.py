"""The chunked form of ``ops.linear_attention``: a blocked forward and one fused reverse pass for the backward.

Inside a chunk of c tokens (position t, s in 0..c-1) with γ per head, the carried state S, z entering it:

    num_t = Σ_{s<=t} γ^(t-s) (q_t·k_s) v_s + γ^(t+1) Sᵀ q_t        den_t = Σ_{s<=t} γ^(t-s) q_t·k_s + γ^(t+1) q_t·z + eps
    S ← γ^c S + Σ_s γ^(c-1-s) k_s v_sᵀ                               z ← γ^c z + Σ_s γ^(c-1-s) k_s

The chunks of a block are processed together (batched GEMMs), the states entering them come from a
prefix over the block's chunk states, and a Python loop runs over blocks only.

The backward, with g = ∂L/∂out / den and h = -(∂L/∂out · out) / den (the gradients of the numerator
and of the denominator), P[t, s] = g_t·v_s + h_t and A[t, s] = q_t·k_s (both masked and decayed), and
R = ∂L/∂(state entering the next chunk) carried from the end (it starts as the final state's gradient):

    dq = P k + γ^(t+1) (S g_t + z h_t)      dk = Pᵀ q + γ^(c-1-t) (R_S v_t + R_z)      dv = Aᵀ g + γ^(c-1-t) R_Sᵀ k_t
    R ← γ^c R + Σ_s γ^(s+1) q_s [g_s, h_s]ᵀ,   and the initial state's gradient is R after the first chunk.

One reverse pass over the blocks computes all three from shared scores and chunk states; the forward's
chunk states are recomputed from the state saved at each block start. Saved: q, k, v, out, den and one
state per block; no T×T matrix and no per-token state.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

BLOCK_ELEMS = 1 << 20
"""Working-set target of one block (elements of its scores, chunk states and chunk inputs): ~4 MB in
float32. Block-sized temporaries are reused by the allocator; full-length ones fault in fresh pages on
every call (a new 64 MB tensor costs ~25 ms here), so only inputs, outputs and gradients are full-length."""


def _powers(log_g: Tensor, exps: Tensor | int, dtype) -> Tensor:
    """γ_h ** exps for every head: [H, *exps.shape], computed in float64 and cast."""
    exps = torch.as_tensor(exps, device=log_g.device)
    return torch.exp(log_g.view(-1, *([1] * exps.dim())) * exps.to(torch.float64)).to(dtype)


class _Tables(NamedTuple):
    """Decay factors of one chunk length c (all None for γ = 1)."""

    D: Tensor | None  # [H, c, c] γ^(t-s) on and below the diagonal, 0 above
    w_in: Tensor | None  # [H, c, 1] γ^(t+1): the entering state as seen by token t
    w_out: Tensor | None  # [H, c, 1] γ^(c-1-t): token t's key at the chunk's end
    g_S: Tensor | None  # [H, 1, 1] γ^c in the state dtype, for S
    g_z: Tensor | None  # [H, 1] the same, for z


def _tables(log_g: Tensor | None, c: int, dt: torch.dtype, sd: torch.dtype) -> _Tables:
    if log_g is None:
        return _Tables(None, None, None, None, None)
    pos = torch.arange(c, device=log_g.device)
    D = _powers(log_g, (pos[:, None] - pos[None, :]).clamp(min=0), dt).masked_fill_(pos[:, None] < pos[None, :], 0)
    g = _powers(log_g, c, sd)
    return _Tables(
        D,
        _powers(log_g, pos + 1, dt)[..., None],
        _powers(log_g, c - 1 - pos, dt)[..., None],
        g[:, None, None],
        g[:, None],
    )


def _blocks(T: int, C: int, per_chunk: int, block_chunks: int | None) -> list[tuple[int, int, int]]:
    """(first token, chunks, chunk length) of each block; the T % C leftover tokens are a last, shorter chunk."""
    C = min(C, T)
    n_all, r = divmod(T, C)
    nb = block_chunks or max(1, BLOCK_ELEMS // per_chunk)
    blocks = [(i * C, min(nb, n_all - i), C) for i in range(0, n_all, nb)]
    return blocks + [(n_all * C, 1, r)] if r else blocks


def _chunks(x: Tensor, t0: int, n: int, c: int, dtype: torch.dtype) -> Tensor:
    """x[:, t0 : t0 + n*c] of [B, T, H, D] as chunk-major [n, B, H, c, D] in ``dtype`` (one block-sized copy).

    Chunk-major keeps the block contiguous, so every product below is one batched GEMM with no hidden copy.
    """
    B, _, H, D = x.shape
    out = torch.empty(n, B, H, c, D, dtype=dtype, device=x.device)
    return out.copy_(x[:, t0 : t0 + n * c].reshape(B, n, c, H, D).permute(1, 0, 3, 2, 4))


def _unchunk(dst: Tensor, t0: int, xb: Tensor) -> None:
    """Write a chunk-major block [n, B, H, c, D] back into dst [B, T, H, D] (contiguous)."""
    n, B, H, c, D = xb.shape
    dst[:, t0 : t0 + n * c].view(B, n, c, H, D).copy_(xb.permute(1, 0, 3, 2, 4))


def _bmm_(o: Tensor, a: Tensor, b: Tensor) -> Tensor:
    """o += a @ b in place for [..., M, K] @ [..., K, N] (one fused baddbmm, no temporary)."""
    o.view(-1, *o.shape[-2:]).baddbmm_(a.reshape(-1, *a.shape[-2:]), b.reshape(-1, *b.shape[-2:]))
    return o


def _carry(U: Tensor, S: Tensor, g: Tensor | None, reverse: bool) -> tuple[Tensor, Tensor]:
    """The state entering each chunk of a block: E_0 = S, E_{j+1} = γ^c E_j + U_j (mirrored with ``reverse``).

    U [n, ...] holds each chunk's own contribution; returns E [n, ...] and the state after the block.
    """
    E = torch.empty_like(U)
    first, last = (-1, 0) if reverse else (0, -1)
    E[first] = S
    if g is None:  # γ = 1: a prefix sum
        if U.shape[0] > 1:
            if reverse:
                torch.add(U[1:].flip(0).cumsum(0).flip(0), S, out=E[:-1])
            else:
                torch.add(torch.cumsum(U[:-1], 0), S, out=E[1:])
        return E, E[last] + U[last]
    order = range(U.shape[0] - 1, 0, -1) if reverse else range(U.shape[0] - 1)
    for j in order:  # a short loop over the block's chunks (decay has no cheap prefix-sum form)
        torch.addcmul(U[j], E[j], g, out=E[j - 1 if reverse else j + 1])
    return E, torch.addcmul(U[last], E[last], g)


def _mask_(A: Tensor, tab: _Tables) -> Tensor:
    """Keep s <= t of a [..., c, c] score block and decay it by γ^(t-s), in place."""
    return A.tril_() if tab.D is None else A.mul_(tab.D)


def _scale(x: Tensor, w: Tensor | None) -> Tensor:
    return x if w is None else x * w


def _states(kb: Tensor, vb: Tensor, S: Tensor, z: Tensor, tab: _Tables):
    """The block's chunk states: (S, z entering each chunk [n, B, H, K, V], [n, B, H, K]; S, z after; kw)."""
    kw = _scale(kb, tab.w_out)  # keys decayed to the chunk's end
    Sp, S = _carry((kw.transpose(-1, -2) @ vb).to(S.dtype), S, tab.g_S, False)
    zp, z = _carry(kw.sum(-2, dtype=z.dtype), z, tab.g_z, False)
    return Sp, zp, S, z, kw


def _forward_block(qb, kb, vb, S, z, tab: _Tables, eps: float):
    """One block forward: (out [n,B,H,c,V], den [n,B,H,c,1] in the accumulation dtype, S, z)."""
    acc = torch.promote_types(qb.dtype, torch.float32)  # the denominator never in bf16
    Sp, zp, S, z, _ = _states(kb, vb, S, z, tab)
    A = _mask_(qb @ kb.transpose(-1, -2), tab)  # (n, B, H, c, c) scores inside each chunk
    qw = _scale(qb, tab.w_in)
    num = _bmm_(A @ vb, qw, Sp.to(qb.dtype))
    den = A.sum(-1, keepdim=True, dtype=acc).add_(qw.to(acc) @ zp.to(acc).unsqueeze(-1)).add_(eps)
    return num.div_(den), den, S, z


def _backward_block(qb, kb, vb, ob, gb, denb, S, z, R, Rz, tab: _Tables):
    """One block backward: (dq, dk, dv chunk-major; R, Rz entering this block from the left)."""
    dt = qb.dtype
    g = (gb / denb).to(dt)  # ∂L/∂num, (n, B, H, c, V)
    h = ((gb * ob).sum(-1, keepdim=True, dtype=denb.dtype) / denb).neg_().to(dt)  # ∂L/∂den, (n, B, H, c, 1)
    Sp, zp, _, _, kw = _states(kb, vb, S, z, tab)
    qw = _scale(qb, tab.w_in)
    Rn, R = _carry((qw.transpose(-1, -2) @ g).to(R.dtype), R, tab.g_S, True)  # R entering the next chunk
    Rzn, Rz = _carry((qw.transpose(-1, -2) @ h).squeeze(-1).to(Rz.dtype), Rz, tab.g_z, True)
    A = _mask_(qb @ kb.transpose(-1, -2), tab)
    P = _mask_((g @ vb.transpose(-1, -2)).add_(h), tab)
    dq = _bmm_(P @ kb, _scale(g, tab.w_in), Sp.transpose(-1, -2).to(dt))
    dq.addcmul_(_scale(h, tab.w_in), zp.unsqueeze(-2).to(dt))
    dk = _bmm_(P.transpose(-1, -2) @ qb, _scale(vb, tab.w_out), Rn.transpose(-1, -2).to(dt))
    Rzn = Rzn.unsqueeze(-2).to(dt)  # (n, B, H, 1, K): the ones column of v' meets R_z
    dk.add_(Rzn) if tab.w_out is None else dk.addcmul_(Rzn, tab.w_out)
    dv = _bmm_(A.transpose(-1, -2) @ g, kw, Rn.to(dt))
    return dq, dk, dv, R, Rz


class ChunkedLinearAttention(torch.autograd.Function):
    """Normalized chunked linear attention: (q, k, v, S0, z0, log γ, C, eps) -> (out, S, z).

    q, k [B, T, H, K] (φ applied), v [B, T, H, V]; S0 [B, H, K, V], z0 [B, H, K] in the state dtype;
    log γ [H] float64 or None. Products run in q's dtype (bf16 under autocast), states and the
    denominator in at least float32. Autocast is off inside: it would round the state sums down.
    """

    @staticmethod
    def forward(ctx, q, k, v, S0, z0, log_g, chunk_size, eps, block_chunks=None):
        B, T, H, K = q.shape
        V, dt, sd = v.shape[-1], q.dtype, S0.dtype
        blocks = _blocks(T, chunk_size, B * H * (chunk_size * (chunk_size + 2 * K + 2 * V) + 2 * K * V), block_chunks)
        out = q.new_empty(B, T, H, V)
        den = q.new_empty(B, T, H, 1, dtype=torch.promote_types(dt, torch.float32))
        S, z, starts = S0, z0, []
        with torch.autocast(q.device.type, enabled=False):
            tabs = {c: _tables(log_g, c, dt, sd) for c in {c for _, _, c in blocks}}
            for t0, n, c in blocks:
                starts.append((S, z))
                chunks = (_chunks(x, t0, n, c, dt) for x in (q, k, v))
                ob, db, S, z = _forward_block(*chunks, S, z, tabs[c], eps)
                _unchunk(out, t0, ob)
                _unchunk(den, t0, db)
        S_starts = torch.stack([s for s, _ in starts])
        z_starts = torch.stack([s for _, s in starts])
        ctx.save_for_backward(q, k, v, out, den, S_starts, z_starts)
        ctx.log_g, ctx.blocks = log_g, blocks
        return out, S, z

    @staticmethod
    def backward(ctx, dout, dS, dz):
        q, k, v, out, den, S_starts, z_starts = ctx.saved_tensors
        dt = q.dtype
        dq, dk, dv = (torch.empty(x.shape, dtype=x.dtype, device=x.device) for x in (q, k, v))  # contiguous
        R, Rz = dS.to(S_starts.dtype), dz.to(z_starts.dtype)  # ∂L/∂(state after the last chunk)
        with torch.autocast(q.device.type, enabled=False):
            tabs = {c: _tables(ctx.log_g, c, dt, R.dtype) for c in {c for _, _, c in ctx.blocks}}
            for i in range(len(ctx.blocks) - 1, -1, -1):
                t0, n, c = ctx.blocks[i]
                qb, kb, vb, ob, gb = (_chunks(x, t0, n, c, dt) for x in (q, k, v, out, dout))
                db = _chunks(den, t0, n, c, den.dtype)
                dqb, dkb, dvb, R, Rz = _backward_block(qb, kb, vb, ob, gb, db, S_starts[i], z_starts[i], R, Rz, tabs[c])
                for dst, xb in ((dq, dqb), (dk, dkb), (dv, dvb)):
                    _unchunk(dst, t0, xb)
        return dq, dk, dv, R, Rz, None, None, None, None
