"""The chunked form for many short sequences: every (sequence, head, chunk) in one batched GEMM, plain autograd.

``ChunkedLinearAttention`` (``chunked.py``) walks (sequence, head, block) in Python with a fused backward: the
fastest form for long sequences, where each walk step is a large GEMM. For a batch of short windows (the TBPTT
recipes: 16+ lanes of 256 tokens) it takes B·H walks of a handful of tiny GEMMs each, and the Python overhead is
most of the time. Here the same algebra runs once for the whole batch, as [B, H, n, C, ·] tensors:

    A = (q kᵀ) ⊙ D          D[t, s] = e^(b_t - b_s) for s <= t (b: the in-chunk cumulative log gate), else 0
    num = A v + (q ⊙ e^b) S_j            den = Σ_s A + (q ⊙ e^b)·z_j + eps        (S_j, z_j: the state entering chunk j)
    S_{j+1} = e^(b_C) S_j + Σ_s e^(b_C - b_s) k_s v_sᵀ

with a Python loop over the n chunks only (the carry). Only differences of cumulative log gates are
exponentiated (all <= 0), taken in float64, as in the other forms; the state sums run in the state dtype.
Autograd gives the gradients of q, k, v, the gate and the initial state. The memory is O(B·H·T·C) (the masked
scores are kept for the backward), so ``use_batched`` routes only short windows here.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from strandline.models.feature_maps import FEATURE_MAPS

MAX_CHUNKS = 8
"""Sequences of at most this many chunks go the batched way when there are several (sequence, head) pairs.
Measured on the 2-core CPU (B=16, H=4, head dim 16, C=64, gated, forward+backward): T=256 took 3.2-3.8x less
time than the walk, T=1024 the same; at T=4096 the walk took 2.5x less, and its memory stays flat."""


def use_batched(B: int, T: int, H: int, chunk_size: int, device: torch.device) -> bool:
    """Whether ``batched_chunked`` is the faster exact form for this shape (CPU: short windows, many pairs)."""
    return device.type == "cpu" and B * H > 2 and T <= MAX_CHUNKS * chunk_size


def batched_chunked(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    S0: Tensor,
    z0: Tensor | None,
    log_g: Tensor | None,
    gate: Tensor | None,
    chunk_size: int,
    eps: float,
    phi: str | None = None,
) -> tuple[Tensor, Tensor, Tensor | None]:
    """(out [B, T, H, V], S [B, H, K, V], z [B, H, K] or None): the same result as ``ChunkedLinearAttention``.

    Args as there: q, k [B, T, H, K] (raw when ``phi`` names a pointwise φ, applied here), v [B, T, H, V]; S0,
    z0 (None: no normalizer) in the state dtype; ``log_g`` [H] float64 (a fixed γ per head) or ``gate``
    [B, T, H] float64 (per-token log gates), or neither (γ = 1).
    """
    B, T, H, K = q.shape
    V = v.shape[-1]
    dt, sd = q.dtype, S0.dtype
    if phi is not None:
        fm = FEATURE_MAPS[phi](K, H)
        q, k = fm(q, is_query=True), fm(k)
    C = max(1, min(chunk_size, T))
    n = -(-T // C)
    pad = n * C - T  # zero keys write nothing, zero log gates forget nothing, padded outputs are cut off

    def blocks(x: Tensor) -> Tensor:  # [B, T, H, D] -> [B, H, n, C, D]
        x = F.pad(x, (0, 0, 0, 0, 0, pad)) if pad else x
        return x.view(B, n, C, H, x.shape[-1]).permute(0, 3, 1, 2, 4).contiguous()  # strided bmm: a loop per matrix

    qb, kb, vb = blocks(q), blocks(k), blocks(v)
    g = gate if gate is not None else (None if log_g is None else log_g.to(torch.float64).expand(B, T, H))
    A = qb @ kb.transpose(-1, -2)  # [B, H, n, C, C]
    if g is None:
        A = A.tril()
        qw, kw, decay = qb, kb, None
    else:
        g = F.pad(g, (0, 0, 0, pad)) if pad else g
        b = g.view(B, n, C, H).permute(0, 3, 1, 2).cumsum(-1)  # [B, H, n, C] float64
        ct = torch.promote_types(dt, torch.float32)
        diff = (b[..., :, None] - b[..., None, :]).to(ct)
        A = A * diff.clamp(max=0).exp().tril().to(dt)
        qw = qb * b.exp().to(dt)[..., None]  # the entering state as token t sees it
        kw = kb * (b[..., -1:] - b).exp().to(dt)[..., None]  # token s's key at the chunk's end
        decay = b[..., -1].exp().to(sd)  # [B, H, n]: each chunk's total decay
    U = (kw.transpose(-1, -2) @ vb).to(sd)  # [B, H, n, K, V]: each chunk's own contribution
    Sp, S = _carry(U, S0, decay)
    num = A @ vb + qw @ Sp.to(dt)
    z = None
    if z0 is None:
        out = num
    else:
        zp, z = _carry(kw.sum(-2).to(sd), z0, decay)
        den = A.sum(-1, keepdim=True, dtype=torch.promote_types(dt, torch.float32))
        den = den + (qw.to(zp.dtype) * zp.unsqueeze(-2)).sum(-1, keepdim=True).to(den.dtype) + eps
        out = (num / den).to(dt)
    out = _ContiguousGrad.apply(out).permute(0, 2, 3, 1, 4).reshape(B, n * C, H, V)
    return (out[:, :T] if pad else out), S, z


def _carry(U: Tensor, S: Tensor, decay: Tensor | None) -> tuple[Tensor, Tensor]:
    """The state entering each chunk [B, H, n, ...] (E_0 = S, E_{j+1} = decay_j E_j + U_j) and the state after."""
    entering = []
    for j in range(U.shape[2]):
        entering.append(S)
        d = None if decay is None else decay[:, :, j].view(*decay.shape[:2], *([1] * (U.dim() - 3)))
        S = (S if d is None else S * d) + U[:, :, j]
    return torch.stack(entering, 2), S


class _ContiguousGrad(torch.autograd.Function):
    """Identity whose backward makes the gradient contiguous: the gradient of the output comes back through the
    [B, T, H, V] -> [B, H, n, C, V] permute as a strided view, on which CPU bmm runs one matrix at a time."""

    @staticmethod
    def forward(ctx, x: Tensor) -> Tensor:
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g: Tensor) -> Tensor:
        return g.contiguous()
