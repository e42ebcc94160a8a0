"""The k-mer memory: linear attention whose feature map is a hashed k-mer, a constant-size copy memory.

For one order k, with x the token stream and A the alphabet (DNA: the four bases):

    φ(q_t) = onehot(hash(x[t-k+1 .. t]))      the k-mer just read
    φ(k_s) = onehot(hash(x[s-k .. s-1]))      the k-mer before token s
    v_s    = onehot(x_s) over the alphabet     what followed it
    m_t    = Σ_{s ≤ t} γ^(t-s) φ(k_s)·φ(q_t) v_s  = S_tᵀ φ(q_t),   S_t = Σ_{s ≤ t} γ^(t-s) φ(k_s) v_sᵀ  [N, A]

so m_t[a] is the (decayed) number of times the k-mer read now was followed by symbol a earlier in the stream:
the repeat ("copy") expert of DNA compressors (XM, GeCo), written as linear attention with a fixed sparse
feature map. A k-mer or value with a symbol outside the alphabet (N, a special) is never written or read.
Buckets are shared by every k-mer that hashes to them: each keeps the fingerprint (a second, independent hash)
of the k-mer that wrote it last, and a read returns the bucket's counts only when it is that k-mer's
(m_t = 0 otherwise), so a chance collision reads nothing instead of another k-mer's continuations.
The state is constant in size whatever the stream's length: S per order ([N, A] counts), the last K tokens
read (K = the largest order), the token counter and the epoch that S's scale refers to. γ may differ by
order. With γ < 1 the stored counts are scaled by γ^-(pos - epoch) (an insertion at s adds γ^-(s - epoch)); the scale is moved
to the current position ("rebase", O(N·A)) before it could pass 2^40, so values never overflow and the
three modes agree up to rounding: 1e-15 relative in float64, 1e-6 in float32.

Three modes, as for every op of ``models/ops/linear/__init__.py``: 'naive' (a dense T×T match mask: the definition),
'chunked' (a sort of the chunk's events by bucket, a segmented prefix sum and a forward fill of the last
writer, the state read by gather and written by scatter_add) and 'recurrent' (one token at a time: write to a
small log, then read the table plus the log). Nothing here has a
gradient: the counts depend on token ids only; what uses them (``models/kmer_memory.py``) learns.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor

from strandline.models.ops.linear import Mode

MERSENNE = 2**31 - 1
MULTIPLIERS = (48271, 69621)  # Lehmer (MINSTD) multipliers: a permutation of 1..P-1 each
FP_MULTIPLIERS = (16807, 39373, 742938285)  # other primitive roots mod P: the fingerprint's independent hash
MAX_SCALE_LOG2 = 40  # rebase before γ^-(pos - epoch) passes 2^40


class KmerMemoryState(NamedTuple):
    """The k-mer memory's state: every field is a tensor (none is optional), each with the batch in dim 0 (so
    carried-state resets apply). An empty track record or write log is zeros (``init_kmer_state``)."""

    S: Tensor  # [B, J, N, A] per order j: decayed counts of (bucket, next symbol), times γ^-(pos - epoch)
    owner: Tensor  # [B, J, N] int32: fingerprint of the k-mer that last wrote each bucket (0: none yet)
    tail: Tensor  # [B, K] long: the last K tokens read (0 = PAD, never in the alphabet, before the start)
    pos: Tensor  # [B] long: tokens read
    epoch: Tensor  # [B] long: the position S's scale refers to
    guess: Tensor  # [B, J] long: the last token's guessed symbol, 1 + its index (0: none)
    run: Tensor  # [B, J] long: how many guessed symbols in a row were right
    misses: Tensor  # [B, J, W] long: 1 where one of the last W guessed symbols was wrong
    log_bucket: Tensor  # [B, J, L] long: writes not yet folded into S (recurrent mode) ...
    log_symbol: Tensor  # [B, J, L] long: ... their symbol index ...
    log_weight: Tensor  # [B, J, L] float: ... weight ...
    log_fp: Tensor  # [B, J, L] int32: ... and fingerprint (0: not a write)
    log_len: Tensor  # [B] long: entries of the log in use (0: empty)

    @classmethod
    def from_fields(cls, fields: dict[str, Tensor | None]) -> KmerMemoryState:
        """The state of saved fields (``complete_kmer_state``: older saves lack the track record and log)."""
        return complete_kmer_state(fields)


class KmerRead(NamedTuple):
    """What the memory reads at each position: the counts, and how its recent guesses fared (its track record)."""

    counts: Tensor  # [B, T, J, A] decayed counts of what followed the k-mer just read
    run: Tensor  # [B, T, J] long: right guesses in a row up to this token (a copy in progress grows it)
    misses: Tensor  # [B, T, J] long: wrong guesses among the last W tokens


TRACK = 32  # W: the guesses whose misses are counted
LOG = 256  # L: writes a step appends to a small log; S (megabytes) is copied once per L steps, not per step


@dataclass(frozen=True)
class KmerSpec:
    """What the memory matches: the k-mer orders, the table size, the alphabet and the decay γ: one for every
    order, or one per order (a long order that never forgets beside short ones that follow the local
    composition)."""

    orders: tuple[int, ...]
    n_buckets: int
    alphabet: tuple[int, ...]
    decay: float | tuple[float, ...] = 1.0
    vocab_size: int = 16

    @property
    def max_order(self) -> int:
        return max(self.orders)

    @property
    def decays(self) -> tuple[float, ...]:
        """γ_j of every order j."""
        if isinstance(self.decay, (tuple, list)):
            return tuple(float(g) for g in self.decay)
        return (float(self.decay),) * len(self.orders)

    @property
    def decays_anything(self) -> bool:
        return any(g < 1.0 for g in self.decays)

    @property
    def rebase_span(self) -> int | None:
        """Tokens after which the scale must move (None: every γ = 1, counts are not scaled)."""
        if not self.decays_anything:
            return None
        return max(2, int(MAX_SCALE_LOG2 * math.log(2) / -math.log(min(self.decays))))

    def log_decays(self, dtype, device=None) -> Tensor:
        """[J] log γ_j (0 for an order that never forgets)."""
        return torch.tensor([math.log(g) for g in self.decays], dtype=dtype, device=device)

    def lut(self, device=None) -> Tensor:
        """Token id -> alphabet index, -1 for every other id."""
        lut = torch.full((max(self.vocab_size, max(self.alphabet) + 1),), -1, dtype=torch.long, device=device)
        lut[list(self.alphabet)] = torch.arange(len(self.alphabet), device=device)
        return lut


def init_kmer_state(spec: KmerSpec, batch_size: int, dtype=torch.float32, device=None) -> KmerMemoryState:
    """The empty memory: no counts, no tokens read, no track record, an empty write log."""
    J, N, A = len(spec.orders), spec.n_buckets, len(spec.alphabet)
    zeros = torch.zeros(batch_size, dtype=torch.long, device=device)
    return KmerMemoryState(
        torch.zeros(batch_size, J, N, A, dtype=dtype, device=device),
        torch.zeros(batch_size, J, N, dtype=torch.int32, device=device),
        torch.zeros(batch_size, spec.max_order, dtype=torch.long, device=device),
        zeros,
        zeros.clone(),
        *_empty_track(batch_size, J, device),
        *_empty_log(batch_size, J, dtype, device),
    )


TRACK_FIELDS = ("guess", "run", "misses")
LOG_FIELDS = ("log_bucket", "log_symbol", "log_weight", "log_fp", "log_len")


def _empty_track(B: int, J: int, device) -> tuple[Tensor, ...]:
    track = torch.zeros(B, J, dtype=torch.long, device=device)
    return track, track.clone(), torch.zeros(B, J, TRACK, dtype=torch.long, device=device)


def _empty_log(B: int, J: int, dtype, device) -> tuple[Tensor, ...]:
    idx = torch.zeros(B, J, LOG, dtype=torch.long, device=device)
    return (
        idx,
        idx.clone(),
        torch.zeros(B, J, LOG, dtype=dtype, device=device),
        torch.zeros(B, J, LOG, dtype=torch.int32, device=device),
        torch.zeros(B, dtype=torch.long, device=device),
    )


def complete_kmer_state(fields: dict[str, Tensor | None]) -> KmerMemoryState:
    """A state from saved fields; a track record or write log that is absent or None (files and checkpoints
    written before those fields existed) is filled in empty, which is how the memory read such a state then.

    Raises KeyError naming a field that was always there (S, owner, tail, pos, epoch) when it is missing.
    """
    full = {f: fields.get(f) for f in KmerMemoryState._fields}
    missing = [f for f in KmerMemoryState._fields[:5] if full[f] is None]
    if missing:
        raise KeyError(f"k-mer memory state without {missing[0]}")
    S = full["S"]
    B, J = S.shape[:2]
    empty = (*_empty_track(B, J, S.device), *_empty_log(B, J, S.dtype, S.device))
    empty = dict(zip(TRACK_FIELDS + LOG_FIELDS, empty, strict=True))
    return KmerMemoryState(**{f: empty[f] if full[f] is None else full[f] for f in full})


def _folded(st: KmerMemoryState) -> tuple[Tensor, Tensor, bool]:
    """S and the owners with the write log applied, and whether S is a new tensor (then the caller may write
    into it; the owners are always a new tensor when the log was not empty)."""
    if not bool(st.log_len.any()):
        return st.S, st.owner, False
    A = st.S.shape[-1]
    used = torch.arange(LOG, device=st.S.device) < st.log_len[:, None, None]
    w = (st.log_weight * used)[..., None] * torch.nn.functional.one_hot(st.log_symbol, A).to(st.S.dtype)
    S = st.S.scatter_add(2, st.log_bucket[..., None].expand(*st.log_bucket.shape, A), w)
    slots = torch.arange(LOG, device=st.S.device).expand_as(st.log_bucket)
    owner = _last_writer(st.owner, st.log_bucket, st.log_fp, slots, used & (st.log_fp > 0))  # a new table
    return S, owner, True


def _last_writer(
    owner: Tensor, bucket: Tensor, fp: Tensor, time: Tensor, valid: Tensor, inplace: bool = False
) -> Tensor:
    """The owner table after writes (bucket, fp) at ``time`` [B, J, n] (distinct times in [0, n) per row): each
    written bucket's latest valid writer. O(n log n) per row plus one scatter: the [B, J, N] table is only read
    where a write lands, and written in place when ``inplace`` (else a copy of it is)."""
    n = bucket.shape[-1]
    if n == 0:
        return owner
    seg, order = (bucket * n + time).sort(-1)  # writes by (bucket, time)
    seg = seg // n  # the bucket of each sorted write
    ok, fps = valid.gather(2, order), fp.gather(2, order)
    i = torch.arange(n, device=bucket.device).expand_as(seg)
    last = torch.where(ok, i, -1).cummax(-1).values  # the latest valid write at or before i (any bucket)
    mine = (last >= 0) & (seg.gather(2, last.clamp(min=0)) == seg)
    value = torch.where(mine, fps.gather(2, last.clamp(min=0)), owner.gather(2, seg))
    is_end = torch.ones_like(ok)
    is_end[..., :-1] = seg[..., 1:] != seg[..., :-1]
    end = torch.where(is_end, i, n).flip(-1).cummin(-1).values.flip(-1)  # the last write of i's bucket
    out = owner if inplace else owner.clone()
    return out.scatter_(2, seg, value.gather(2, end))  # every write of a bucket carries its final value


def _cleared(st: KmerMemoryState) -> KmerMemoryState:
    return st._replace(log_len=torch.zeros_like(st.log_len))


def kmer_buckets(spec: KmerSpec, ext: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Bucket, fingerprint and validity of the k-mer ending at each position of ``ext`` [B, L] from index K-1 on.

    Returns (bucket, fp, valid), each [B, J, L - K + 1]: entry i is the k-mer of order ``orders[j]`` ending at
    ``ext[:, K - 1 + i]``; valid when all of its k symbols are in the alphabet. The fingerprint (int32 in
    [1, 2^31 - 1], from a second hash) tells two k-mers of one bucket apart. Codes are exact integers
    (Σ_i symbol(t - i) A^i < 2^62): one integer product of the K-wide windows with a [K, J] weight table.
    """
    idx = _lut(spec, ext.device)[ext]
    win = idx.unfold(1, spec.max_order, 1)  # [B, n, K]: win[..., K - 1 - i] is the symbol i back
    weights, span = _code_weights(spec, ext.device)
    if ext.device.type == "cpu" and not _BY_SUM:
        code = win.clamp(min=0) @ weights  # [B, n, J]
        valid = ((win < 0).long() @ span) == 0
    else:  # CUDA has no int64 matmul: the same sums, one order at a time
        code = torch.stack([(win.clamp(min=0) * weights[:, j]).sum(-1) for j in range(weights.shape[1])], -1)
        valid = torch.stack([((win < 0) & (span[:, j] > 0)).sum(-1) == 0 for j in range(span.shape[1])], -1)
    bucket, fp = _hash(code, spec.n_buckets)
    return bucket.transpose(1, 2), fp.transpose(1, 2), valid.transpose(1, 2)


_BY_SUM = False  # tests set it to check the non-CPU path on a CPU


@functools.cache
def _code_weights(spec: KmerSpec, device) -> tuple[Tensor, Tensor]:
    """[K, J] long: A^i at row K - 1 - i for i < k_j (else 0), and 1 where row is inside order j's k-mer."""
    K, A = spec.max_order, len(spec.alphabet)
    weights = torch.zeros(K, len(spec.orders), dtype=torch.long)
    for j, k in enumerate(spec.orders):
        for i in range(k):
            weights[K - 1 - i, j] = A**i
    span = torch.zeros_like(weights)
    for j, k in enumerate(spec.orders):
        span[K - k :, j] = 1
    return weights.to(device), span.to(device)


@functools.cache
def _lut(spec: KmerSpec, device) -> Tensor:
    return spec.lut(device)


def _hash(code: Tensor, n: int) -> tuple[Tensor, Tensor]:
    """A k-mer code (< 2^62) -> (bucket in [0, n), int32 fingerprint in [1, 2^31 - 1]); no int64 overflow."""
    h = (code ^ (code >> 29)) % MERSENNE
    for m in MULTIPLIERS:
        h = (h * m) % MERSENNE
    f = (code ^ (code >> 31)) % MERSENNE
    for m in FP_MULTIPLIERS:
        f = (f * m) % MERSENNE
    return h % n, (f % (MERSENNE - 1) + 1).to(torch.int32)


def kmer_memory(
    x: Tensor,
    spec: KmerSpec,
    state: KmerMemoryState | None = None,
    mode: Mode = "chunked",
    dtype: torch.dtype | None = None,
    need_state: bool = True,
    donate: bool = False,
) -> tuple[KmerRead, KmerMemoryState | None]:
    """What followed each k-mer read: x [B, T] token ids -> (``KmerRead`` [B, T, ...], new state).

    Besides the counts, each position gets the memory's track record, computed from the tokens and the counts
    alone (so, like them, exact in every mode): ``run``, how many of its guesses in a row were right (the
    guess at a position is the most counted symbol, when anything was counted), and ``misses``, how many of
    the last W = 32 were wrong. A copy in progress has a long run and no misses; a chance match of a k-mer
    has neither. A DNA compressor weighs its copy expert by the same evidence (XM: its recent record).

    Args:
        state: where the stream stands (None: its start). Its dtype is the accumulation dtype.
        dtype: accumulation dtype when no state is given (default float32).
        need_state: False skips writing the table (the new state is None): a window read from the start
            whose state is thrown away (training without carried state) then costs no [B, J, N, A] table.
        donate: the caller gives ``state`` up (it will not read it again): the chunked and naive modes then
            write the tables in place instead of copying them (tens of MB per lane and call). The results are
            the same either way; without it the state passed in is never changed.
    """
    B, T = x.shape
    span = spec.rebase_span
    piece = T if span is None else max(1, span // 2)
    own = donate or state is None  # may the tables be written in place? (a state of our own, or one given up)
    if state is None and (need_state or T > piece):  # pieces after the first continue from a state
        state = init_kmer_state(spec, B, dtype or torch.float32, x.device)
    outs = []
    for s0 in range(0, max(T, 1), piece):
        xs = x[:, s0 : s0 + piece]
        if state is not None and span is not None:
            state = _rebase(spec, state, xs.shape[1])
        prior = state
        m, state = _MODES[mode](xs, spec, state, dtype or torch.float32, own)
        own = True  # from the second piece on, the state is this call's own
        r, state = _track(xs, spec, m, prior, state)
        outs.append(r)
    return KmerRead(*(torch.cat(parts, 1) for parts in zip(*outs, strict=True))), state


def _track(x: Tensor, spec: KmerSpec, m: Tensor, prior: KmerMemoryState | None, st: KmerMemoryState | None):
    """The track record (``run``, ``misses``) of a chunk's guesses, continued from the state before it."""
    B, T, J, _ = m.shape
    dev = x.device
    guess = torch.where(m.sum(-1) > 0, m.argmax(-1) + 1, 0)  # [B, T, J]: 1 + the guessed index, 0: none
    if prior is None:  # the start of a stream whose state is not kept: no guess, run or miss yet
        zeros = torch.zeros(B, J, dtype=torch.long, device=dev)
        g0, r0, w0 = zeros, zeros, zeros[..., None].expand(B, J, TRACK)
    else:
        g0, r0, w0 = prior.guess, prior.run, prior.misses
    prev = torch.cat([g0[:, None], guess[:, :-1]], 1)  # what was guessed for token t, at t - 1
    val = _lut(spec, dev)[x.long()][..., None]  # [B, T, 1]
    hit = (prev > 0) & (prev - 1 == val)
    miss = ((prev > 0) & (val >= 0) & ~hit).long()
    t = torch.arange(T, device=dev)[None, :, None]
    last_break = torch.where(~hit, t, -1).cummax(1).values
    run = torch.where(last_break >= 0, t - last_break, r0[:, None] + t + 1)
    ext = torch.cat([w0.transpose(1, 2), miss], 1)  # [B, W + T, J] in time order
    c = torch.nn.functional.pad(ext.cumsum(1), (0, 0, 1, 0))
    misses = c[:, TRACK + 1 :] - c[:, 1 : T + 1]
    if st is not None and T:
        st = st._replace(guess=guess[:, -1], run=run[:, -1], misses=ext[:, -TRACK:].transpose(1, 2).contiguous())
    return (m, run, misses), st


def _rebase(spec: KmerSpec, st: KmerMemoryState, n: int) -> KmerMemoryState:
    """Move the scale of the rows that would pass 2^40 within the next n tokens to their current position."""
    late = (st.pos - st.epoch + n) > spec.rebase_span
    if not bool(late.any()):
        return st
    shift = torch.where(late, st.pos - st.epoch, 0).to(st.S.dtype)
    scale = torch.exp(shift[:, None] * spec.log_decays(st.S.dtype, st.S.device))  # [B, J]
    S, log_weight = st.S * scale[..., None, None], st.log_weight * scale[..., None]
    return st._replace(S=S, log_weight=log_weight, epoch=torch.where(late, st.pos, st.epoch))


def _events(x: Tensor, spec: KmerSpec, st: KmerMemoryState | None, dtype: torch.dtype):
    """What every mode needs: read/write buckets, fingerprints and validity, values and the scale weights."""
    B, T = x.shape
    K = spec.max_order
    tail = st.tail if st is not None else torch.zeros(B, K, dtype=torch.long, device=x.device)
    ext = torch.cat([tail, x.long()], 1)
    bk, fp, ok = kmer_buckets(spec, ext)  # entry i: the k-mer ending at relative position i - 1
    val = _lut(spec, x.device)[x.long()]  # [B, T]
    rd = Side(bk[..., 1:], fp[..., 1:], ok[..., 1:])  # read at t: the k-mer ending at t
    wr = Side(bk[..., :-1], fp[..., :-1], ok[..., :-1] & (val >= 0)[:, None])  # write at s: k-mer ending at s-1 -> x_s
    sdt = st.S.dtype if st is not None else dtype
    J = len(spec.orders)
    if not spec.decays_anything:
        w = torch.ones(B, J, T, dtype=sdt, device=x.device)
    else:
        pos = st.pos if st is not None else torch.zeros(B, dtype=torch.long, device=x.device)
        epoch = st.epoch if st is not None else pos
        rel = (pos - epoch)[:, None] + torch.arange(T, device=x.device)
        # γ_j^-(t - epoch) [B, J, T]: write weight; 1/w scales a read
        w = torch.exp(-rel.to(sdt)[:, None, :] * spec.log_decays(sdt, x.device)[:, None])
    return ext, rd, wr, val.clamp(min=0), w


class Side(NamedTuple):
    """The reads or the writes of a chunk, [B, J, T] each."""

    bucket: Tensor
    fp: Tensor
    ok: Tensor


def _next_state(st: KmerMemoryState | None, ext: Tensor, S, owner, T: int, K: int) -> KmerMemoryState | None:
    if st is None:
        return None
    return st._replace(S=S, owner=owner, tail=ext[:, ext.shape[1] - K :], pos=st.pos + T)


def _write(S: Tensor, fresh: bool, wr: Side, val: Tensor, w: Tensor) -> Tensor:
    """S plus every valid write of the chunk (scatter_add: one row per (order, bucket)); in place if ``fresh``."""
    B, J, T = wr.bucket.shape
    A = S.shape[-1]
    contrib = torch.zeros(B, J, T, A, dtype=S.dtype, device=S.device)
    contrib.scatter_(3, val[:, None, :, None].expand(B, J, T, 1), (w * wr.ok)[..., None])
    index = wr.bucket[..., None].expand(B, J, T, A)
    return S.scatter_add_(2, index, contrib) if fresh else S.scatter_add(2, index, contrib)


def _finish(x, spec, st, ext, rd, wr, val, w, counts, owner_at_read, S0, O0, fresh):
    """Mask the reads whose bucket's last writer is another k-mer, unscale, and write the chunk into the state
    (in place when ``fresh``: S0 and O0 are this call's own, or their owner gave them up)."""
    T = x.shape[1]
    m = counts / w[..., None] * (rd.ok & (owner_at_read == rd.fp))[..., None]
    if st is None:
        return m.permute(0, 2, 1, 3), None
    t = torch.arange(T, device=x.device).expand_as(wr.bucket)
    S, owner = _write(S0, fresh, wr, val, w), _last_writer(O0, wr.bucket, wr.fp, t, wr.ok, inplace=fresh)
    return m.permute(0, 2, 1, 3), _next_state(_cleared(st), ext, S, owner, T, spec.max_order)


def _chunked(x, spec, st, dtype, own=False):
    B, T = x.shape
    J, A = len(spec.orders), len(spec.alphabet)
    ext, rd, wr, val, w = _events(x, spec, st, dtype)
    S0, O0, fresh = _folded(st) if st is not None else (None, None, False)
    fresh = fresh or own
    counts, owner = _segmented(rd, wr, val, w, A, O0)  # [B, J, T, A], [B, J, T]
    if st is not None:
        counts = counts + S0.gather(2, rd.bucket[..., None].expand(B, J, T, A))
    return _finish(x, spec, st, ext, rd, wr, val, w, counts, owner, S0, O0, fresh)


def _segmented(rd: Side, wr: Side, val, w, A, O0):
    """Per read t: Σ_{s ≤ t, same bucket} w_s onehot(val_s) and the fingerprint of the bucket's last writer.

    Events sorted by (bucket, time, writes first), then an inclusive prefix sum inside each bucket
    (Hillis-Steele, log2(2T) steps: no cancellation) and a forward fill of the last valid write's fingerprint
    (the state's owner table where the chunk has not written the bucket yet)."""
    B, J, T = rd.bucket.shape
    dev = rd.bucket.device
    t = torch.arange(T, device=dev)
    key = torch.cat([(wr.bucket * T + t) * 2, (rd.bucket * T + t) * 2 + 1], -1)
    key, order = key.sort(-1)
    seg = key // (2 * T)  # the bucket
    vals = torch.zeros(B, J, 2 * T, A, dtype=w.dtype, device=dev)
    vals[:, :, :T].scatter_(3, val[:, None, :, None].expand(B, J, T, 1), (w * wr.ok)[..., None])
    v = vals.gather(2, order[..., None].expand(B, J, 2 * T, A))
    d = 1
    while d < 2 * T:
        same = (seg[..., d:] == seg[..., :-d])[..., None]
        v = torch.cat([v[:, :, :d], v[:, :, d:] + v[:, :, :-d] * same], 2)
        d *= 2
    is_write = torch.cat([wr.ok, torch.zeros_like(rd.ok)], -1).gather(2, order)
    fp = torch.cat([wr.fp, rd.fp], -1).gather(2, order)
    i = torch.arange(2 * T, device=dev).expand_as(seg)
    last = torch.where(is_write, i, -1).cummax(-1).values.clamp(min=0)
    mine = is_write.gather(2, last) & (seg.gather(2, last) == seg)
    before = O0.gather(2, seg) if O0 is not None else torch.zeros_like(fp)
    own = torch.where(mine, fp.gather(2, last), before)
    unsort = torch.empty_like(order).scatter_(2, order, i)
    reads = unsort[..., T:]
    return v.gather(2, reads[..., None].expand(B, J, T, A)), own.gather(2, reads)


def _naive(x, spec, st, dtype, own=False):
    """The definition: a dense [T, T] mask of equal buckets, s <= t."""
    B, T = x.shape
    J, A = len(spec.orders), len(spec.alphabet)
    ext, rd, wr, val, w = _events(x, spec, st, dtype)
    S0, O0, fresh = _folded(st) if st is not None else (None, None, False)
    fresh = fresh or own
    causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
    match = (rd.bucket[..., :, None] == wr.bucket[..., None, :]) & causal & wr.ok[..., None, :]  # [B, J, t, s]
    onehot = torch.nn.functional.one_hot(val, A).to(w.dtype)[:, None] * w[..., None]  # [B, J, T, A]
    counts = match.to(w.dtype) @ onehot
    latest = torch.where(match, torch.arange(T, device=x.device), -1).amax(-1)  # [B, J, t]
    before = O0.gather(2, rd.bucket) if O0 is not None else torch.zeros_like(rd.fp)
    owner = torch.where(latest >= 0, wr.fp.gather(2, latest.clamp(min=0)), before)
    if st is not None:
        counts = counts + S0.gather(2, rd.bucket[..., None].expand(B, J, T, A))
    return _finish(x, spec, st, ext, rd, wr, val, w, counts, owner, S0, O0, fresh)


def _recurrent(x, spec, st, dtype, donated=False):  # never writes S in place: the log spares the copies
    """One token at a time: write (the k-mer before x_t -> x_t) to the log, then read (the k-mer ending at x_t)
    from S plus the log. The log holds L writes; when full it is folded into a new S, so a step copies S (the
    state is a value: the one passed in is never changed) once per L tokens instead of every token."""
    B, T = x.shape
    J, A = len(spec.orders), len(spec.alphabet)
    ext, rd, wr, val, w = _events(x, spec, st, dtype)
    own = st is None  # a state of our own to run on (none is returned)
    if own:
        st = init_kmer_state(spec, B, w.dtype, x.device)
    lb, ls, lw, lf, n = (getattr(st, f).clone() for f in LOG_FIELDS)
    S, O = st.S, st.owner
    rows = torch.arange(B, device=x.device)
    slots = torch.arange(LOG, device=x.device)
    out = []
    for t in range(T):
        if bool((n >= LOG).any()):  # fold the full log into a new S and owner table
            S, O, _ = _folded(
                st._replace(S=S, owner=O, log_bucket=lb, log_symbol=ls, log_weight=lw, log_fp=lf, log_len=n)
            )
            n = torch.zeros_like(n)
        lb[rows, :, n], ls[rows, :, n] = wr.bucket[..., t], val[:, t, None].expand(B, J)
        lw[rows, :, n] = w[..., t] * wr.ok[..., t]
        lf[rows, :, n] = torch.where(wr.ok[..., t], wr.fp[..., t], 0)
        n = n + 1
        q = rd.bucket[..., t]  # [B, J]
        read = S.gather(2, q[..., None, None].expand(B, J, 1, A))[:, :, 0]
        hit = (lb == q[..., None]) & (slots < n[:, None, None])
        read = read.scatter_add(2, ls, lw * hit)
        latest = torch.where(hit & (lf > 0), slots, -1).amax(-1)
        owner = torch.where(
            latest >= 0, lf.gather(2, latest.clamp(min=0)[..., None])[..., 0], O.gather(2, q[..., None])[..., 0]
        )
        ok = rd.ok[..., t] & (owner == rd.fp[..., t])
        out.append(read / w[..., t, None] * ok[..., None])
    m = torch.stack(out, 1) if out else torch.zeros(B, 0, J, A, dtype=w.dtype, device=x.device)
    if own:
        return m, None
    st = st._replace(log_bucket=lb, log_symbol=ls, log_weight=lw, log_fp=lf, log_len=n)
    return m, st._replace(owner=O, S=S, tail=ext[:, ext.shape[1] - spec.max_order :], pos=st.pos + T)


_MODES = {"chunked": _chunked, "naive": _naive, "recurrent": _recurrent}
