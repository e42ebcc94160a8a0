"""The delta rule (Schlag et al. 2021) with an optional forget gate (Gated DeltaNet, Yang et al. 2025).

    S_t = α_t (I - β_t k_t k_tᵀ) S_{t-1} + β_t k_t v_tᵀ        out_t = S_tᵀ q_t

with keys (and queries) L2-normalized by the caller, a write strength β_t ∈ (0, 1] and a gate α_t =
exp(g_t) ∈ (0, 1] per head and token; no normalizer z. Each write first erases what the state held
under k_t: the state is a fast-weight memory that can overwrite an association instead of piling up.

Modes, all exact with one another:
- ``naive``: the formula as written, with the K×K transition matrix of every token (obviously correct).
- ``recurrent``: the same recurrence as a rank-1 update, u_t = β_t (v_t - (α_t S_{t-1})ᵀ k_t),
  S_t = α_t S_{t-1} + k_t u_tᵀ; for decoding and streams.
- ``chunked``: the WY / UT form of Yang et al. 2024 ("Parallelizing Linear Transformers with the Delta
  Rule over Sequence Length"). Inside a chunk of C tokens starting from state S⁰, with b_t the in-chunk
  cumulative log gate and γ_t = e^(b_t), the pseudo-values u solve one unit lower-triangular C×C system
  (I + L) u = β⊙v - (βγ⊙k) S⁰ with L_ts = β_t e^(b_t - b_s) (k_t·k_s) for s < t; then
  out = γ⊙q S⁰ + (q kᵀ ⊙ e^(b_t - b_s))_{s<=t} u and S_C = γ_C S⁰ + Σ_s e^(b_C - b_s) k_s u_sᵀ.
  The state crosses chunks with one K×K transition per chunk; the rest is vectorized over a block of
  chunks. The backward is analytic and recomputes block by block (last first) from the saved
  chunk-start states: memory is the inputs plus one K×V state per chunk (never per token) and one
  block's C×C products.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from strandline.models.ops.backends import Backend, fla_delta, use_fla_delta
from strandline.models.ops.gated import _blocks, _decay_matrix
from strandline.models.ops.linear import AttnState, Mode


def delta_rule_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    beta: Tensor,
    log_alpha: Tensor | None = None,
    state: AttnState | None = None,
    mode: Mode = "chunked",
    chunk_size: int = 64,
    state_dtype: torch.dtype | None = None,
    backend: Backend | None = None,
) -> tuple[Tensor, AttnState]:
    """The (gated) delta rule with a carried state.

    Args:
        q: [B, T, H, K] queries, L2-normalized over K.
        k: [B, T, H, K] keys, L2-normalized over K (keeps I - β k kᵀ a contraction).
        v: [B, T, H, V] values.
        beta: [B, T, H] write strength in (0, 1] (e.g. a sigmoid).
        log_alpha: [B, T, H] log of the forget gate, <= 0; None means α = 1 (the plain delta rule).
        state: ``AttnState`` (S [B, H, K, V], z None) from a previous call, or None for zeros.
        mode: ``"chunked"``, ``"recurrent"`` or ``"naive"``; all three agree.
        chunk_size: C for the chunked mode; any T works (the last chunk may be shorter).
        state_dtype: accumulation dtype; defaults to the passed state's, else at least float32.
        backend: "auto" | "torch" | "fla" (``models/ops/backends.py``: FLA's ``delta_rule`` / ``gated_delta_rule``
            on CUDA; float32 state, bf16/fp16 for the chunked kernel); None reads ``STRANDLINE_BACKEND``.

    Returns:
        out: [B, T, H, V] in q's dtype, and the new ``AttnState`` (S [B, H, K, V], z None).
    """
    if q.dim() != 4 or k.shape != q.shape or v.shape[:3] != q.shape[:3] or beta.shape != q.shape[:3]:
        raise ValueError(
            f"expected q, k [B,T,H,K], v [B,T,H,V], beta [B,T,H]; got {tuple(q.shape)}, {tuple(v.shape)}, "
            f"{tuple(beta.shape)}"
        )
    B, T, H, K = q.shape
    if state_dtype is None:
        state_dtype = state.S.dtype if state is not None else torch.promote_types(q.dtype, torch.float32)
    g = q.new_zeros(B, T, H, dtype=torch.float64) if log_alpha is None else log_alpha.to(torch.float64)
    S = q.new_zeros(B, H, K, v.shape[-1], dtype=state_dtype) if state is None else state.S.to(state_dtype)
    if mode not in ("chunked", "recurrent", "naive"):
        raise ValueError(f"unknown mode {mode!r}; expected 'chunked', 'recurrent' or 'naive'")
    if mode != "naive" and use_fla_delta(
        backend, q, state_dtype, mode, log_alpha is not None, k, v, beta, log_alpha, S
    ):
        la = None if log_alpha is None else log_alpha.float()
        out, S = fla_delta(q, k.to(q.dtype), v.to(q.dtype), beta, la, S, mode)
        return out, AttnState(S, None)
    if mode == "chunked":
        out, S = DeltaChunked.apply(q, k, v, beta, g, S, chunk_size)
    else:
        with torch.autocast(q.device.type, enabled=False):  # the state math stays in the state dtype
            out, S = (_recurrent if mode == "recurrent" else _naive)(q, k, v, beta, g, S)
    return out, AttnState(S, None)


def _naive(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, g: Tensor, S: Tensor) -> tuple[Tensor, Tensor]:
    """S_t = α_t (I - β_t k_t k_tᵀ) S_{t-1} + β_t k_t v_tᵀ literally, with a K×K matrix per token."""
    sd, K = S.dtype, q.shape[-1]
    eye = torch.eye(K, dtype=sd, device=q.device)
    outs = []
    for t in range(q.shape[1]):
        kt, bt = k[:, t].to(sd), beta[:, t].to(sd)[..., None, None]  # (B, H, K), (B, H, 1, 1)
        A = g[:, t].exp().to(sd)[..., None, None] * (eye - bt * kt[..., :, None] * kt[..., None, :])
        S = A @ S + bt * kt[..., :, None] * v[:, t, :, None, :].to(sd)
        outs.append((q[:, t, :, None, :].to(sd) @ S).squeeze(-2))
    return torch.stack(outs, 1).to(q.dtype), S


def _recurrent(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, g: Tensor, S: Tensor) -> tuple[Tensor, Tensor]:
    """The rank-1 form: erase what S holds under k, write β (v - that), read with q. Plain autograd."""
    sd = S.dtype
    outs = []
    for t in range(q.shape[1]):
        kt = k[:, t].to(sd)  # (B, H, K)
        S = g[:, t].exp().to(sd)[..., None, None] * S
        u = beta[:, t].to(sd)[..., None] * (v[:, t].to(sd) - (kt[..., None, :] @ S).squeeze(-2))  # (B, H, V)
        S = S + kt[..., :, None] * u[..., None, :]
        outs.append((q[:, t, :, None, :].to(sd) @ S).squeeze(-2))
    return torch.stack(outs, 1).to(q.dtype), S


class _WY(NamedTuple):
    """The within-chunk pieces of n chunks at once, all [B, H, n, c, ·] (``g_end`` [B, H, n])."""

    b: Tensor  # in-chunk cumulative log gate (float64)
    Dm: Tensor  # e^(b_t - b_s) for s <= t, else 0: [c, c]
    kk: Tensor  # k kᵀ
    L: Tensor  # strictly lower β_t e^(b_t - b_s) k_t·k_s: the WY system is (I + L) X = R
    X: Tensor  # [Ũ | W] = (I + L)⁻¹ [β⊙v | βγ⊙k]: pseudo-values u = Ũ - W S⁰
    Linv: Tensor  # (I + L)⁻¹, unit lower triangular (the backward's adjoint solve is a product with its transpose)
    A: Tensor  # (q kᵀ) ⊙ Dm
    k_end: Tensor  # keys decayed to the chunk's end
    g_end: Tensor  # e^(b_c): the chunk's total decay


def _wy(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, g: Tensor) -> _WY:
    """Everything inside the chunks that does not depend on the state: products in q's dtype, the solve in >= f32."""
    dt, c = q.dtype, q.shape[-2]
    b = g.cumsum(-1)
    Dm = _decay_matrix(b, dt)
    kk = k @ k.transpose(-1, -2)
    bt = beta.to(dt)[..., None]
    L = (bt * kk * Dm).tril(-1)
    R = torch.cat([bt * v, (beta.to(torch.float64) * b.exp()).to(dt)[..., None] * k], -1)
    wt = torch.promote_types(dt, torch.float32)
    # (I + L)⁻¹ once (c right-hand sides, not V + K), then products: batched triangular solves run far
    # slower than GEMMs on CPU, and the backward reuses the inverse instead of a second solve (as FLA does)
    eye = torch.eye(c, dtype=wt, device=q.device).expand(L.shape)
    Linv = torch.linalg.solve_triangular(L.to(wt), eye, upper=False, unitriangular=True)  # in >= float32
    X = (Linv @ R.to(wt)).to(dt)
    k_end = k * torch.exp(b[..., -1:] - b).to(dt)[..., None]
    return _WY(b, Dm, kk, L, X, Linv, (q @ k.transpose(-1, -2)) * Dm, k_end, b[..., -1].exp())


def _transitions(w: _WY, V: int, sd: torch.dtype) -> tuple[Tensor, Tensor]:
    """S_end = M S⁰ + N per chunk: M = γ_c I - k_endᵀ W [.., K, K] and N = k_endᵀ Ũ [.., K, V], in the state dtype."""
    K = w.k_end.shape[-1]
    kt = w.k_end.transpose(-1, -2)
    M = w.g_end.to(sd)[..., None, None] * torch.eye(K, dtype=sd, device=kt.device) - (kt @ w.X[..., V:]).to(sd)
    return M, (kt @ w.X[..., :V]).to(sd)


def _forward_block(q, k, v, beta, g, S):
    """n chunks [B,H,n,c,·] from state S: (out [B,H,n,c,V], chunk-start states [B,H,n,K,V], state after)."""
    V, dt = v.shape[-1], q.dtype
    w = _wy(q, k, v, beta, g)
    M, N = _transitions(w, V, S.dtype)
    starts = []
    for j in range(q.shape[2]):  # the only sequential part: one K×K by K×V product per chunk
        starts.append(S)
        S = M[:, :, j] @ S + N[:, :, j]
    starts = torch.stack(starts, 2)
    u = w.X[..., :V] - w.X[..., V:] @ starts.to(dt)
    o = (q * w.b.exp().to(dt)[..., None]) @ starts.to(dt) + w.A @ u
    return o, starts, S


def _backward_block(q, k, v, beta, g, starts, do, G, gate_grad: bool = True):
    """Gradients of n chunks given do [B,H,n,c,V] and G = ∂L/∂(state after the block); see the class docstring.
    The gate's (``dg``) is None unless ``gate_grad``."""
    V, dt, sd = v.shape[-1], q.dtype, starts.dtype
    w = _wy(q, k, v, beta, g)
    M, _ = _transitions(w, V, sd)
    gam = w.b.exp().to(dt)[..., None]  # (.., c, 1)
    W, Sd = w.X[..., V:], starts.to(dt)
    H_do = ((q * gam - w.A @ W).transpose(-1, -2) @ do).to(sd)  # ∂L/∂S⁰ through the outputs
    Gs = []
    for j in reversed(range(q.shape[2])):
        Gs.append(G)
        G = M[:, :, j].transpose(-1, -2) @ G + H_do[:, :, j]
    Gd = torch.stack(Gs[::-1], 2).to(dt)  # ∂L/∂(each chunk's end state)
    u = w.X[..., :V] - W @ Sd
    du = w.A.transpose(-1, -2) @ do + w.k_end @ Gd
    dk_end = u @ Gd.transpose(-1, -2)
    dA_raw = do @ u.transpose(-1, -2)
    dA = dA_raw * w.Dm  # masked by Dm's zeros above the diagonal
    dSdo = do @ Sd.transpose(-1, -2)  # (.., c, K)
    dq = dA @ k + gam * dSdo
    dk = dA.transpose(-1, -2) @ q
    # the WY solve: X = (I + L)⁻¹ R, so dR = (I + L)⁻ᵀ dX and dL = -dR Xᵀ (strictly lower). With dX = [du, -du S⁰ᵀ]
    # that is dR = [dRv, -dRv S⁰ᵀ] and dR Xᵀ = dRv (Ũ - W S⁰)ᵀ = dRv uᵀ: three products with V columns (the
    # concatenated form took five and a copy)
    dRv = (w.Linv.transpose(-1, -2) @ du.to(w.Linv.dtype)).to(dt)
    dRk = -(dRv @ Sd.transpose(-1, -2))
    dL = -(dRv @ u.transpose(-1, -2)).tril(-1)
    bt = beta.to(dt)[..., None]
    bg = (beta.to(torch.float64) * w.b.exp()).to(dt)[..., None]
    e_end = torch.exp(w.b[..., -1:] - w.b).to(dt)[..., None]
    P = bt * dL * w.Dm
    dk = dk + bg * dRk + (P + P.transpose(-1, -2)) @ k + e_end * dk_end
    dv = bt * dRv
    kdRk = (k * dRk).sum(-1)
    dbeta = (v * dRv).sum(-1) + (w.b.exp().to(dt) * kdRk) + (dL * w.kk * w.Dm).sum(-1)
    if not gate_grad:  # the plain delta rule (α = 1): its zero log gates need no gradient
        return dq, dk, dv, dbeta, None, G
    # the gate: every e^(b) factor, then g = the in-chunk differences of b (a reverse cumsum); sums in float64
    E = dA_raw * w.A + dL * w.L  # ∂L/∂Dm_ts · Dm_ts: +1 for b_t, -1 for b_s
    db = E.sum(-1, dtype=torch.float64) - E.sum(-2, dtype=torch.float64)
    db += (gam * q * dSdo).sum(-1, dtype=torch.float64) + (bg[..., 0] * kdRk).double()
    t_end = (e_end * k * dk_end).sum(-1, dtype=torch.float64)
    db -= t_end
    db[..., -1] += t_end.sum(-1) + w.g_end * (starts * Gd.to(sd)).sum((-1, -2), dtype=torch.float64)
    dg = db.flip(-1).cumsum(-1).flip(-1)
    return dq, dk, dv, dbeta, dg, G


BLOCK_ELEMS = 1 << 19
"""Elements of one block's C×C, K×K and K×V pieces over all sequences and heads."""


class DeltaChunked(torch.autograd.Function):
    """The chunked delta rule in blocks of chunks; backward recomputes each block (last first).

    Forward per block: the WY pieces of every chunk at once, then the state through the chunks with one
    K×K transition each (S_end = M S⁰ + N, M = γ_c I - k_endᵀW, N = k_endᵀŨ). Saved: the inputs and one
    K×V state per chunk. Backward per block: ∂L/∂S⁰ runs back through the chunks as G ← Mᵀ G + (γ⊙q -
    A W)ᵀ do, then every other gradient is vectorized over the block's chunks (the solve's adjoint is one
    upper-triangular solve; the gate's gradient collects every e^(b) factor, then a reverse cumsum).
    """

    @staticmethod
    def forward(ctx, q, k, v, beta, g, S0, chunk_size):
        B, T, H, K = q.shape
        V = v.shape[-1]
        C = max(1, min(chunk_size, T))
        n_max = max(1, min(64, BLOCK_ELEMS // max(1, B * H * (C * C + K * K + K * V))))
        spans = [(t0, min(T, t0 + n_max * C)) for t0 in range(0, T, n_max * C)]
        o, S, starts = q.new_empty(B, T, H, V), S0, []
        with torch.autocast(q.device.type, enabled=False):
            for t0, t1 in spans:
                ob, st, S = _forward_block(*(_blocks(x, t0, t1, C) for x in (q, k, v, beta, g)), S)
                starts.append(st)
                o[:, t0:t1] = ob.permute(0, 2, 3, 1, 4).flatten(1, 2)[:, : t1 - t0]
        ctx.save_for_backward(q, k, v, beta, g, *starts)
        ctx.spans, ctx.C = spans, C
        return o, S

    @staticmethod
    def backward(ctx, dout, dS):
        q, k, v, beta, g, *starts = ctx.saved_tensors
        C = ctx.C
        gate_grad = ctx.needs_input_grad[4]
        grads = [torch.empty_like(x) for x in (q, k, v, beta)] + [torch.empty_like(g) if gate_grad else None]
        G = dS.to(starts[0].dtype)
        with torch.autocast(q.device.type, enabled=False):
            for (t0, t1), st in reversed(list(zip(ctx.spans, starts, strict=True))):
                blk = [_blocks(x, t0, t1, C) for x in (q, k, v, beta, g)]
                *gb, G = _backward_block(*blk, st, _blocks(dout.to(q.dtype), t0, t1, C), G, gate_grad)
                for acc, gr in zip(grads, gb, strict=True):
                    if acc is None:
                        continue
                    flat = gr.permute(0, 2, 3, 1, *range(4, gr.dim())).flatten(1, 2)
                    acc[:, t0:t1] = flat[:, : t1 - t0].to(acc.dtype)
        return (*grads, G, None)
