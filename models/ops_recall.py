"""Token-match recall: linear attention whose feature map is a hashed k-mer, a constant-size copy memory.

For one order k, with x the token stream and A the alphabet (DNA: the four bases):

    φ(q_t) = onehot(hash(x[t-k+1 .. t]))      the k-mer just read
    φ(k_s) = onehot(hash(x[s-k .. s-1]))      the k-mer before token s
    v_s    = onehot(x_s) over the alphabet     what followed it
    m_t    = Σ_{s ≤ t} γ^(t-s) φ(k_s)·φ(q_t) v_s  = S_tᵀ φ(q_t),   S_t = Σ_{s ≤ t} γ^(t-s) φ(k_s) v_sᵀ  [N, A]

so m_t[a] is the (decayed) number of times the k-mer read now was followed by symbol a earlier in the stream:
the repeat ("copy") expert of DNA compressors (XM, GeCo), written as linear attention with a fixed sparse
feature map. A k-mer or value with a symbol outside the alphabet (N, a special) is never written or read.
The state is constant in size whatever the stream's length: S per order ([N, A] counts), the last K tokens
read (K = the largest order), the token counter and the epoch that S's scale refers to. With γ < 1 the
stored counts are scaled by γ^-(pos - epoch) (an insertion at s adds γ^-(s - epoch)); the scale is moved
to the current position ("rebase", O(N·A)) before it could pass 2^40, so values never overflow and the
three modes agree up to rounding: 1e-15 relative in float64, 1e-6 in float32.

Three modes, as for every op of ``models/ops.py``: 'naive' (a dense T×T match mask: the definition),
'chunked' (a sort of the chunk's events by bucket and a segmented prefix sum, the state read by gather and
written by scatter_add) and 'recurrent' (one token at a time: write, then read). Nothing here has a
gradient: the counts depend on token ids only; what uses them (``models/recall.py``) learns.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor

from .ops import Mode

MERSENNE = 2**31 - 1
MULTIPLIERS = (48271, 69621)  # Lehmer (MINSTD) multipliers: a permutation of 1..P-1 each
MAX_SCALE_LOG2 = 40  # rebase before γ^-(pos - epoch) passes 2^40


class RecallState(NamedTuple):
    """The recall memory's state; every tensor has the batch in dim 0 (so carried-state resets apply)."""

    S: Tensor  # [B, J, N, A] per order j: decayed counts of (bucket, next symbol), times γ^-(pos - epoch)
    tail: Tensor  # [B, K] long: the last K tokens read (0 = PAD, never in the alphabet, before the start)
    pos: Tensor  # [B] long: tokens read
    epoch: Tensor  # [B] long: the position S's scale refers to


@dataclass(frozen=True)
class RecallSpec:
    """What the memory matches: the k-mer orders, the table size, the alphabet and the decay γ."""

    orders: tuple[int, ...]
    n_buckets: int
    alphabet: tuple[int, ...]
    decay: float = 1.0
    vocab_size: int = 16

    @property
    def max_order(self) -> int:
        return max(self.orders)

    @property
    def rebase_span(self) -> int | None:
        """Tokens after which the scale must move (None: γ = 1, counts are not scaled)."""
        if self.decay >= 1.0:
            return None
        return max(2, int(MAX_SCALE_LOG2 * math.log(2) / -math.log(self.decay)))

    def lut(self, device=None) -> Tensor:
        """Token id -> alphabet index, -1 for every other id."""
        lut = torch.full((max(self.vocab_size, max(self.alphabet) + 1),), -1, dtype=torch.long, device=device)
        lut[list(self.alphabet)] = torch.arange(len(self.alphabet), device=device)
        return lut


def init_recall_state(spec: RecallSpec, batch_size: int, dtype=torch.float32, device=None) -> RecallState:
    """The empty memory: no counts, no tokens read."""
    J, N, A = len(spec.orders), spec.n_buckets, len(spec.alphabet)
    zeros = torch.zeros(batch_size, dtype=torch.long, device=device)
    return RecallState(
        torch.zeros(batch_size, J, N, A, dtype=dtype, device=device),
        torch.zeros(batch_size, spec.max_order, dtype=torch.long, device=device),
        zeros,
        zeros.clone(),
    )


def kmer_buckets(spec: RecallSpec, ext: Tensor) -> tuple[Tensor, Tensor]:
    """Bucket and validity of the k-mer ending at each position of ``ext`` [B, L] from index K-1 on.

    Returns (bucket, valid), each [B, J, L - K + 1]: entry i is the k-mer of order ``orders[j]`` ending at
    ``ext[:, K - 1 + i]``; valid when all of its k symbols are in the alphabet.
    """
    K, A = spec.max_order, len(spec.alphabet)
    idx = spec.lut(ext.device)[ext]
    n = ext.shape[1] - K + 1
    buckets, valids = [], []
    for k in spec.orders:
        code = torch.zeros(ext.shape[0], n, dtype=torch.long, device=ext.device)
        valid = torch.ones(ext.shape[0], n, dtype=torch.bool, device=ext.device)
        for i in range(k):  # symbol i back from the end has weight A^i
            sym = idx[:, K - 1 - i : K - 1 - i + n]
            code = code + sym.clamp(min=0) * A**i
            valid = valid & (sym >= 0)
        buckets.append(_hash(code, spec.n_buckets))
        valids.append(valid)
    return torch.stack(buckets, 1), torch.stack(valids, 1)


def _hash(code: Tensor, n: int) -> Tensor:
    """A k-mer code (< 2^62) -> bucket in [0, n); no int64 overflow on the way."""
    h = (code ^ (code >> 29)) % MERSENNE
    for m in MULTIPLIERS:
        h = (h * m) % MERSENNE
    return h % n


def recall(
    x: Tensor,
    spec: RecallSpec,
    state: RecallState | None = None,
    mode: Mode = "chunked",
    dtype: torch.dtype | None = None,
    need_state: bool = True,
) -> tuple[Tensor, RecallState | None]:
    """Counts of what followed each k-mer read: x [B, T] token ids -> (m [B, T, J, A], new state).

    Args:
        state: where the stream stands (None: its start). Its dtype is the accumulation dtype.
        dtype: accumulation dtype when no state is given (default float32).
        need_state: False skips writing the table (the new state is None): a window read from the start
            whose state is thrown away (training without carried state) then costs no [B, J, N, A] table.
    """
    B, T = x.shape
    span = spec.rebase_span
    piece = T if span is None else max(1, span // 2)
    if state is None and (need_state or T > piece):  # pieces after the first continue from a state
        state = init_recall_state(spec, B, dtype or torch.float32, x.device)
    outs = []
    for s0 in range(0, max(T, 1), piece):
        xs = x[:, s0 : s0 + piece]
        if state is not None and span is not None:
            state = _rebase(spec, state, xs.shape[1])
        m, state = _MODES[mode](xs, spec, state, dtype or torch.float32)
        outs.append(m)
    return torch.cat(outs, 1), state


def _rebase(spec: RecallSpec, st: RecallState, n: int) -> RecallState:
    """Move the scale of the rows that would pass 2^40 within the next n tokens to their current position."""
    late = (st.pos - st.epoch + n) > spec.rebase_span
    if not bool(late.any()):
        return st
    shift = torch.where(late, st.pos - st.epoch, 0).to(st.S.dtype)
    S = st.S * torch.exp(shift * math.log(spec.decay)).view(-1, 1, 1, 1)
    return st._replace(S=S, epoch=torch.where(late, st.pos, st.epoch))


def _events(x: Tensor, spec: RecallSpec, st: RecallState | None, dtype: torch.dtype):
    """What every mode needs: query/insert buckets and validity, values and the scale weights of a chunk."""
    B, T = x.shape
    K = spec.max_order
    tail = st.tail if st is not None else torch.zeros(B, K, dtype=torch.long, device=x.device)
    ext = torch.cat([tail, x.long()], 1)
    bk, ok = kmer_buckets(spec, ext)  # entry i: the k-mer ending at relative position i - 1
    val = spec.lut(x.device)[x.long()]  # [B, T]
    qb, qok = bk[..., 1:], ok[..., 1:]  # read at t: the k-mer ending at t
    ib, iok = bk[..., :-1], ok[..., :-1] & (val >= 0)[:, None]  # write at s: the k-mer ending at s - 1 -> x_s
    sdt = st.S.dtype if st is not None else dtype
    if spec.decay >= 1.0:
        w = torch.ones(B, T, dtype=sdt, device=x.device)
    else:
        pos = st.pos if st is not None else torch.zeros(B, dtype=torch.long, device=x.device)
        epoch = st.epoch if st is not None else pos
        rel = (pos - epoch)[:, None] + torch.arange(T, device=x.device)
        w = torch.exp(-rel.to(sdt) * math.log(spec.decay))  # γ^-(t - epoch): write weight; 1/w scales a read
    return ext, qb, qok, ib, iok, val.clamp(min=0), w


def _next_state(st: RecallState | None, ext: Tensor, S: Tensor | None, T: int, K: int) -> RecallState | None:
    if st is None:
        return None
    return RecallState(S, ext[:, ext.shape[1] - K :], st.pos + T, st.epoch)


def _write(spec: RecallSpec, st: RecallState, ib: Tensor, iok: Tensor, val: Tensor, w: Tensor) -> Tensor:
    """S plus every valid write of the chunk (scatter_add: one row per (order, bucket))."""
    B, J, T = ib.shape
    A = len(spec.alphabet)
    contrib = torch.zeros(B, J, T, A, dtype=st.S.dtype, device=ib.device)
    contrib.scatter_(3, val[:, None, :, None].expand(B, J, T, 1), (w[:, None, :] * iok)[..., None])
    return st.S.scatter_add(2, ib[..., None].expand(B, J, T, A), contrib)


def _chunked(x, spec, st, dtype):
    B, T = x.shape
    J, A = len(spec.orders), len(spec.alphabet)
    ext, qb, qok, ib, iok, val, w = _events(x, spec, st, dtype)
    intra = _segmented_counts(qb, ib, iok, val, w, A)  # [B, J, T, A]
    if st is not None:
        intra = intra + st.S.gather(2, qb[..., None].expand(B, J, T, A))
    m = intra / w[:, None, :, None] * qok[..., None]
    S = _write(spec, st, ib, iok, val, w) if st is not None else None
    return m.permute(0, 2, 1, 3), _next_state(st, ext, S, T, spec.max_order)


def _segmented_counts(qb, ib, iok, val, w, A):
    """Σ_{s ≤ t, ib_s == qb_t} w_s onehot(val_s) per query t: events sorted by (bucket, time, write-first),
    then an inclusive prefix sum inside each bucket (Hillis-Steele, log2(2T) steps: no cancellation)."""
    B, J, T = qb.shape
    t = torch.arange(T, device=qb.device)
    key = torch.cat([(ib * T + t) * 2, (qb * T + t) * 2 + 1], -1)  # writes before reads at the same t
    key, order = key.sort(-1)
    seg = key // (2 * T)
    vals = torch.zeros(B, J, 2 * T, A, dtype=w.dtype, device=qb.device)
    vals[:, :, :T].scatter_(3, val[:, None, :, None].expand(B, J, T, 1), (w[:, None, :] * iok)[..., None])
    v = vals.gather(2, order[..., None].expand(B, J, 2 * T, A))
    d = 1
    while d < 2 * T:
        same = (seg[..., d:] == seg[..., :-d])[..., None]
        v = torch.cat([v[:, :, :d], v[:, :, d:] + v[:, :, :-d] * same], 2)
        d *= 2
    out = torch.empty_like(v).scatter_(2, order[..., None].expand(B, J, 2 * T, A), v)
    return out[:, :, T:]


def _naive(x, spec, st, dtype):
    """The definition: a dense [T, T] mask of equal buckets, s <= t."""
    B, T = x.shape
    J, A = len(spec.orders), len(spec.alphabet)
    ext, qb, qok, ib, iok, val, w = _events(x, spec, st, dtype)
    causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
    match = (qb[..., :, None] == ib[..., None, :]) & causal & iok[..., None, :]  # [B, J, t, s]
    onehot = torch.nn.functional.one_hot(val, A).to(w.dtype) * w[..., None]  # [B, T, A]
    m = match.to(w.dtype) @ onehot[:, None]
    if st is not None:
        m = m + st.S.gather(2, qb[..., None].expand(B, J, T, A))
    m = m / w[:, None, :, None] * qok[..., None]
    S = _write(spec, st, ib, iok, val, w) if st is not None else None
    return m.permute(0, 2, 1, 3), _next_state(st, ext, S, T, spec.max_order)


def _recurrent(x, spec, st, dtype):
    """One token at a time: write (the k-mer before x_t -> x_t), then read (the k-mer ending at x_t)."""
    B, T = x.shape
    J, A = len(spec.orders), len(spec.alphabet)
    ext, qb, qok, ib, iok, val, w = _events(x, spec, st, dtype)
    S = (st.S if st is not None else torch.zeros(B, J, spec.n_buckets, A, dtype=w.dtype, device=x.device)).clone()
    rows = torch.arange(B, device=x.device)[:, None].expand(B, J)
    cols = torch.arange(J, device=x.device)[None, :].expand(B, J)
    out = []
    for t in range(T):
        S.index_put_(
            (rows, cols, ib[..., t], val[:, t, None].expand(B, J)), w[:, t, None] * iok[..., t], accumulate=True
        )
        out.append(S[rows, cols, qb[..., t]] / w[:, t, None, None] * qok[..., t, None])
    m = torch.stack(out, 1) if out else torch.zeros(B, 0, J, A, dtype=w.dtype, device=x.device)
    return m, _next_state(st, ext, S if st is not None else None, T, spec.max_order)


_MODES = {"chunked": _chunked, "naive": _naive, "recurrent": _recurrent}
