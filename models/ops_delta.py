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
  Its backward recomputes chunk by chunk from the saved chunk-start states, in reverse: memory is the
  inputs plus one K×V state per chunk (never per token) and one chunk's C×C products.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .ops import AttnState, Mode


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


def delta_chunk(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, g: Tensor, S: Tensor) -> tuple[Tensor, Tensor]:
    """One chunk in the WY form (differentiable). q, k [B,H,c,K], v [B,H,c,V], beta, g [B,H,c], S [B,H,K,V].

    Products run in q's dtype, the triangular solve in at least float32, the state sums in S's dtype.
    Returns (out [B,H,c,V] in q's dtype, the state after the chunk).
    """
    dt, sd, c = q.dtype, S.dtype, q.shape[2]
    wt = torch.promote_types(dt, torch.float32)
    b = g.cumsum(-1)  # (B, H, c) float64: log decay from the chunk start
    causal = torch.ones(c, c, dtype=torch.bool, device=q.device).tril()
    Dm = torch.exp((b[..., :, None] - b[..., None, :]).masked_fill(~causal, -torch.inf)).to(dt)  # e^(b_t - b_s)
    L = (beta[..., None].to(dt) * (k @ k.transpose(-1, -2)) * Dm).tril(-1)
    rhs = torch.cat([beta[..., None].to(dt) * v, (beta.to(torch.float64) * b.exp()).to(dt)[..., None] * k], -1)
    X = torch.linalg.solve_triangular(L.to(wt), rhs.to(wt), upper=False, unitriangular=True).to(dt)
    Sd = S.to(dt)
    u = X[..., : v.shape[-1]] - X[..., v.shape[-1] :] @ Sd  # (B, H, c, V) the pseudo-values
    o = (q * b.exp()[..., None].to(dt)) @ Sd + ((q @ k.transpose(-1, -2)) * Dm) @ u
    k_end = k * torch.exp(b[..., -1:] - b)[..., None].to(dt)  # keys decayed to the chunk's end
    S_end = b[..., -1].exp().to(sd)[..., None, None] * S + (k_end.transpose(-1, -2) @ u).to(sd)
    return o, S_end


def _chunks(T: int, C: int) -> list[tuple[int, int]]:
    return [(t0, min(T, t0 + C)) for t0 in range(0, T, C)]


def _head_major(*xs: Tensor) -> list[Tensor]:
    """[B, c, H, ...] -> [B, H, c, ...] for every x."""
    return [x.transpose(1, 2) for x in xs]


class DeltaChunked(torch.autograd.Function):
    """The chunked delta rule; backward recomputes each chunk (in reverse) from its saved start state."""

    @staticmethod
    def forward(ctx, q, k, v, beta, g, S0, chunk_size):
        C = max(1, chunk_size)
        outs, starts, S = [], [], S0
        with torch.autocast(q.device.type, enabled=False):
            for t0, t1 in _chunks(q.shape[1], C):
                starts.append(S)
                o, S = delta_chunk(*_head_major(q[:, t0:t1], k[:, t0:t1], v[:, t0:t1], beta[:, t0:t1], g[:, t0:t1]), S)
                outs.append(o.transpose(1, 2))
        ctx.save_for_backward(q, k, v, beta, g, torch.stack(starts))  # one K×V state per chunk
        ctx.chunk_size = C
        return torch.cat(outs, 1), S

    @staticmethod
    def backward(ctx, dout, dS):
        q, k, v, beta, g, starts = ctx.saved_tensors
        grads = [torch.zeros_like(x) for x in (q, k, v, beta, g)]
        dS = dS.to(starts.dtype)
        with torch.autocast(q.device.type, enabled=False):
            for j, (t0, t1) in reversed(list(enumerate(_chunks(q.shape[1], ctx.chunk_size)))):
                xs = [x[:, t0:t1].detach().requires_grad_() for x in (q, k, v, beta, g)]
                S_start = starts[j].detach().requires_grad_()
                with torch.enable_grad():
                    o, S_end = delta_chunk(*_head_major(*xs), S_start)
                    got = torch.autograd.grad(
                        (o, S_end), (*xs, S_start), (dout[:, t0:t1].transpose(1, 2).to(o.dtype), dS), allow_unused=True
                    )
                for acc, gr in zip(grads, got[:5], strict=True):
                    if gr is not None:
                        acc[:, t0:t1] = gr
                dS = got[5]
        return (*grads, dS, None)
