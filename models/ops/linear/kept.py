"""Where the chunked op's backward finds what its forward kept, and where its gradients go.

The chunked op (``ops_chunked``) works on strided views of the caller's [B, T, H, D] tensors, one block of
one head at a time (``_view``). Its forward keeps, for the backward, each chunk's entering state and (when
C <= K) its masked scores; ``_Kept`` places them in the memory of dv and dq, which the backward writes over
them block by block after their last read. When q, k, v are the three slots of one [B, T, 3, H, D]
projection, the gradients are the slots of one such buffer, and ``unbind_slots`` (the layer's split) hands
it back as the projection's gradient without a copy.
"""

from __future__ import annotations

import torch
from torch import Tensor


def _view(x: Tensor, b: int, h: int, t0: int, n: int, c: int) -> Tensor:
    """Tokens t0 .. t0+n*c of sequence b, head h of x [B, T, H, D] as n chunk matrices [n, c, D].

    A strided view, no copy: rows are H*D apart, which BLAS takes as the leading dimension, so every
    product of the chunked op is a batched GEMM on the caller's memory (measured: as fast as on contiguous copies,
    and the chunk-major copies it replaces cost a third of the op's time).
    """
    return x[b, t0 : t0 + n * c, h].view(n, c, x.shape[-1])


PREFAULT_BYTES = 32 << 20
"""CPU buffers at least this big have their pages faulted in by one ``zero_`` before the head pool writes them.

glibc maps every block above its (dynamic, at most 32 MB) mmap threshold fresh, and the first write to each
4 kB page faults. The pool's threads write interleaved heads of the same rows, so both fault the same pages
at once; a parallel ``zero_`` over the whole buffer first splits the pages between the threads instead.
Measured (a fresh [1, T, 4, 64] float32 buffer written head-block by head-block from 2 threads, as the op
does; best of 8, quiet machine): 124 -> 94 ms at T=262,144 (256 MB), 31 -> 25 ms at 65,536 (64 MB). Smaller
buffers come back from glibc's heap already mapped, where a zero_ would only cost."""


def fresh(shape, like: Tensor, dtype: torch.dtype | None = None) -> Tensor:
    """``torch.empty(shape)`` on ``like``'s device (its dtype unless given), pre-faulted when big on CPU."""
    x = torch.empty(shape, dtype=like.dtype if dtype is None else dtype, device=like.device)
    if x.device.type == "cpu" and x.nbytes >= PREFAULT_BYTES:
        x.zero_()
    return x


def _slot_base(q: Tensor, k: Tensor, v: Tensor) -> Tensor | None:
    """The [B, T, 3, H, D] tensor whose three slots (along dim 2) q, k, v are, or None when they are not."""
    if any(x is None for x in (q, k, v)) or not (q.shape == k.shape == v.shape and q.dtype == k.dtype == v.dtype):
        return None
    B, T, H, D = q.shape
    step, st = H * D * q.element_size(), q.stride()  # the slots are H·D elements apart
    packed = (
        q.stride() == k.stride() == v.stride()
        and st[1:] == (3 * H * D, D, 1)
        and (B == 1 or st[0] == 3 * T * H * D)
        and q.untyped_storage().data_ptr() == k.untyped_storage().data_ptr() == v.untyped_storage().data_ptr()
        and k.data_ptr() - q.data_ptr() == step == v.data_ptr() - k.data_ptr()
    )
    return q.as_strided((B, T, 3, H, D), (3 * T * H * D, 3 * H * D, H * D, D, 1)) if packed else None


def _gradient_buffers(q: Tensor, k: Tensor, v: Tensor, which: tuple[bool, bool, bool]) -> tuple[Tensor | None, ...]:
    """Empty dq, dk, dv for the ``which`` that are wanted (None for the others), laid out like q, k, v: the
    three slots of one [B, T, 3, H, D] buffer when q, k, v are the slots of one such tensor (the layer's
    projection: ``unbind_slots`` then hands that buffer back as its gradient, with no copy), else contiguous."""
    if _slot_base(q, k, v) is not None:
        return fresh((*q.shape[:2], 3, *q.shape[2:]), q).unbind(2)
    return tuple(fresh(x.shape, x) if w else None for x, w in zip((q, k, v), which, strict=True))


class _Slots(torch.autograd.Function):
    """h [B, T, 3, H, D] -> its three slots q, k, v [B, T, H, D] (views), like ``h.unbind(2)``, whose backward
    hands back the buffer the three gradients already share (the chunked op's, see ``_gradient_buffers``)
    instead of stacking them into a new one (a copy and fresh pages: 90 ms per layer at T=65,536)."""

    @staticmethod
    def forward(ctx, h: Tensor):
        return h.unbind(2)

    @staticmethod
    def backward(ctx, dq, dk, dv):
        base = _slot_base(dq, dk, dv)
        if base is not None:
            return base
        ref = next(x for x in (dq, dk, dv) if x is not None)
        return torch.stack([torch.zeros_like(ref) if x is None else x for x in (dq, dk, dv)], 2)


def unbind_slots(h: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """q, k, v = h.unbind(2) for h [B, T, 3, H, D], with a backward that does not copy the chunked op's gradients."""
    if not (torch.is_grad_enabled() and h.requires_grad):  # no backward: plain views (a generation step)
        return h.unbind(2)
    return _Slots.apply(h)


class _Kept:
    """What the forward keeps for the backward, placed where it can be in the gradients' own memory.

    Kept: the state entering every chunk (S [K, V], z [K]) and, when C <= K, every chunk's masked scores
    A [C, C] (so the backward skips q kᵀ). The backward reads a block's kept S and A before it writes that
    block's rows of dv and dq, and only head h's thread touches head h's rows, so when K <= C (and S has
    v's dtype) chunk j's state lives in dv's first K rows of chunk j, and A in dq's first C columns: the
    backward then faults no fresh pages for dq and dv (the forward with grad faults them instead; at
    T=262,144 fresh pages were a fifth of the backward's CPU). A tail chunk shorter than C keeps its state
    apart; otherwise S is [B, H, n_chunks, K, V] of its own. z is always [B, H, n_chunks, K].
    """

    def __init__(self, C: int, K: int, scores: bool, dq, dk, dv, S, S_tail, z):
        self.C, self.K, self.scores, self.grads, self.S, self.S_tail, self.z = C, K, scores, (dq, dk, dv), S, S_tail, z

    @classmethod
    def allocate(cls, q: Tensor, k: Tensor, v: Tensor, S0: Tensor, z0: Tensor | None, C: int) -> _Kept:
        B, T, H, K = q.shape
        n_chunks, in_dv, scores = -(-T // C), K <= C and S0.dtype == v.dtype, C <= K
        dq, dk, dv = _gradient_buffers(q, k, v, (scores, False, in_dv))
        S = None if in_dv else fresh((B, H, n_chunks, K, v.shape[-1]), S0)
        S_tail = S0.new_empty(B, H, K, v.shape[-1]) if in_dv and T % C else None
        z = None if z0 is None else z0.new_empty(B, H, n_chunks, K)
        return cls(C, K, scores, dq, dk, dv, S, S_tail, z)

    def tensors(self) -> tuple[Tensor | None, ...]:
        """For ``save_for_backward``; ``_Kept(*layout, *tensors)`` rebuilds it."""
        return (*self.grads, self.S, self.S_tail, self.z)

    def block(self, b: int, h: int, t0: int, n: int, c: int) -> tuple[Tensor, Tensor | None, Tensor | None]:
        """Views of block (t0, n, c) of sequence b, head h: S [n, K, V], z [n, K] (None without z), A [n, c, c]
        (None when not kept)."""
        j, (dq, _, dv) = t0 // self.C, self.grads
        z = None if self.z is None else self.z[b, h, j : j + n]
        if self.S is not None:
            S = self.S[b, h, j : j + n]
        else:  # rows t0 + jC .. t0 + jC + K of dv; the tail chunk (a block of its own) apart
            S = self.S_tail[b, h].unsqueeze(0) if c < self.C else _view(dv, b, h, t0, n, c)[:, : self.K]
        return S, z, _view(dq, b, h, t0, n, c)[..., :c] if self.scores else None

    def gradients(self, q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """dq, dk, dv: the kept buffers, and fresh contiguous ones where none was kept."""
        return tuple(fresh(x.shape, x) if g is None else g for g, x in zip(self.grads, (q, k, v), strict=True))
