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

One reverse pass over the blocks computes all three from shared scores and the chunk states the forward
kept. Saved: q, k, v, out, den, the state entering each chunk (T/C·K·V floats per head: as many as v
when C = K) and, when C <= K, every chunk's masked scores A (T·C per head); no T×T matrix and no per-token
state. Both are stored in the memory of the gradients written over them (``ops_kept._Kept``: dv's rows hold the
states, dq's the scores), so the op's peak memory does not grow and the backward faults in fewer fresh pages.

The same blocks serve three generalizations: a per-token gate (``ops_gated``: γ^(t-s) becomes
e^(G_t - G_s), with tables built per block from the gate, and the gate's gradient is q·dq - k·dk per
token, reverse-summed), no normalizer (z None: out = num, and h, R_z vanish), and an elementwise φ applied
inside (q, k raw: φ of each block is taken where it is used and recomputed in the backward, whose dq, dk
writes apply φ's derivative), so that φ(q), φ(k) and their gradients are never full-length tensors.
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor

import torch
from torch import Tensor

from strandline.models.feature_maps import POINTWISE
from strandline.models.ops.linear.kept import _Kept, _view, fresh

BLOCK_ELEMS = {"cpu": 1 << 19, "cuda": 1 << 26}
"""Working-set target of one block of one head (elements of its scores, chunk states and inputs). On CPU
~2 MB in float32 (the fastest of 2^16..2^23 at T=65,536, H=4, head dim 64, one thread): temporaries stay in cache and are reused by the allocator, while a fresh
full-length one faults in new pages on every call (~25 ms for 64 MB here). On CUDA: big, few launches."""


_LOG2E = 1 / math.log(2)


def _elu1_block(x: Tensor) -> tuple[Tensor, Tensor]:
    """(elu(x) + 1, its derivative min(φ, 1) = e^min(x, 0)) of one block [n, c, K], sharing the exponential.

    e^x as 2^(x·log2 e): on this CPU (AVX512, torch 2.13) ``exp2`` ran ~3x faster than ``exp`` (22 against
    62 µs per 73,728 float32 elements, one thread) and ``F.elu_`` slower still, so φ of a block takes
    59 µs instead of 122. It agrees with ``F.elu`` to ~1e-6 relative in float32 and ~2e-15 in float64.
    """
    y = x.clone(memory_format=torch.contiguous_format)  # in place on a contiguous copy (strided: ~2x slower)
    e = torch.clamp(y, max=0).mul_(_LOG2E).exp2_()
    return y.clamp_(min=0).add_(e), e


def _phi_fns(phi: str | None, dtype: torch.dtype):
    """(φ of a block, (φ, dφ/dx) of a block) for the op's ``phi``; (None, None) without one."""
    if phi is None:
        return None, None
    if phi == "elu1" and dtype in (torch.float32, torch.float64):  # bf16/fp16: x·log2 e would round too coarsely
        return (lambda x: _elu1_block(x)[0]), _elu1_block
    fmap, dfmap = POINTWISE[phi]

    def both(x: Tensor) -> tuple[Tensor, Tensor]:
        y = fmap(x)
        return y, dfmap(y)

    return fmap, both


def _powers(log_g: Tensor, exps: Tensor | int, dtype) -> Tensor:
    """γ_h ** exps for every head: [H, *exps.shape], computed in float64 and cast."""
    exps = torch.as_tensor(exps, device=log_g.device)
    return torch.exp(log_g.view(-1, *([1] * exps.dim())) * exps.to(torch.float64)).to(dtype)


class _Tables:
    """Decay factors of one head and one chunk length c (the γ = 1 ones are None: no multiply at all).

    ``D`` [c, c]: γ^(t-s) on and below the diagonal, 0 above; ``w_in`` [c, 1]: γ^(t+1), the entering
    state as seen by token t; ``w_out`` [c, 1]: γ^(c-1-t), token t's key at the chunk's end; ``g_c``
    [1]: γ^c in the state dtype.
    """

    def __init__(self, log_g: Tensor | None, c: int, dt: torch.dtype, sd: torch.dtype, device):
        self.log_g, self.c, self.sd, self.device, self._mix = log_g, c, sd, device, {}
        self.D = self.w_in = self.w_out = self.g_c = None
        if log_g is not None:
            pos = torch.arange(c, device=device)
            self.D = _powers(log_g, (pos[:, None] - pos[None, :]).clamp(min=0), dt)[0]
            self.D.masked_fill_(pos[:, None] < pos[None, :], 0)
            self.w_in, self.w_out = _powers(log_g, pos + 1, dt)[0, :, None], _powers(log_g, c - 1 - pos, dt)[0, :, None]
            self.g_c = _powers(log_g, c, sd)

    def mix(self, n: int) -> tuple[Tensor, Tensor]:
        """For n chunks: M [n, n] with M[j, i] = γ^(c(j-1-i)) for i < j (else 0), and w [n, 1] = γ^(cj) (None: γ = 1)."""
        if n not in self._mix:
            j = torch.arange(n, device=self.device)
            if self.log_g is None:  # γ = 1: every entering state is the block's own, undecayed (w None)
                M, w = torch.ones(n, n, dtype=self.sd, device=self.device), None
            else:
                M = _powers(self.log_g, self.c * (j[:, None] - 1 - j[None, :]).clamp(min=0), self.sd)[0]
                w = _powers(self.log_g, self.c * j, self.sd)[0, :, None]
            self._mix[n] = (M.tril_(-1), w)
        return self._mix[n]

    def carry(self, n: int, reverse: bool) -> tuple[Tensor, Tensor, Tensor | None]:
        """(M, w, decay of the chunk the block's state leaves by) for ``_carry``; reversed: Mᵀ, w flipped."""
        M, w = self.mix(n)
        return (M.T, None if w is None else w.flip(0), self.g_c) if reverse else (M, w, self.g_c)


class _GateTables:
    """The same factors for one block of one head under per-token gates: log α [n, c] float64 -> D [n, c, c],
    w_in, w_out [n, c, 1], and the carry across the block's chunks from each chunk's total decay.

    Only differences of cumulative log gates are exponentiated (all <= 0): strong gates cannot overflow.
    """

    def __init__(self, g: Tensor, dt: torch.dtype, sd: torch.dtype):
        b = g.cumsum(-1)  # in-chunk cumulative log gate, float64
        diff = (b[:, :, None] - b[:, None, :]).to(torch.promote_types(dt, torch.float32))  # exp in >= f32
        # e^x as 2^(x·log2 e) (as in _elu1_block: ~2x faster than exp_); s > t (x >= 0) clamped, then zeroed
        self.D = diff.clamp_(max=0).mul_(_LOG2E).exp2_().tril_().to(dt)
        self.w_in, self.w_out = b.exp().to(dt)[..., None], (b[:, -1:] - b).exp().to(dt)[..., None]
        tot = b[:, -1]  # each chunk's log decay
        self.E = tot.cumsum(0)  # block start -> each chunk's end
        self.E0, self.g_c, self.sd, self._carry = self.E - tot, tot.exp().to(sd), sd, {}

    def carry(self, n: int, reverse: bool) -> tuple[Tensor, Tensor, Tensor]:
        """M[j, i] = Π_{i<l<j} α-decay of chunk l (i < j), w_j = decay from the block start to chunk j (reversed: Mᵀ
        and the decay from chunk j's end to the block's end). Built once per direction (S and z share it)."""
        if reverse not in self._carry:
            later = torch.ones(n, n, dtype=torch.bool, device=self.E.device).tril(-1)
            M = (self.E0[:, None] - self.E[None, :]).masked_fill_(~later, -torch.inf).exp_().to(self.sd)
            if reverse:
                self._carry[True] = M.T, (self.E[-1] - self.E).exp().to(self.sd)[:, None], self.g_c[0]
            else:
                self._carry[False] = M, self.E0.exp().to(self.sd)[:, None], self.g_c[-1]
        return self._carry[reverse]


def _tables(log_g: Tensor | None, H: int, c: int, dt: torch.dtype, sd: torch.dtype, device) -> list[_Tables]:
    """The decay factors of every head for chunk length c."""
    if log_g is None:
        return [_Tables(None, c, dt, sd, device)] * H
    return [_Tables(log_g[h : h + 1], c, dt, sd, device) for h in range(H)]


def _blocks(T: int, C: int, per_chunk: int, budget: int) -> list[tuple[int, int, int]]:
    """(first token, chunks, chunk length) of each block; the T % C leftover tokens are a last, shorter chunk."""
    C = min(C, T)
    n_all, r = divmod(T, C)
    nb = max(1, budget // per_chunk)
    blocks = [(i * C, min(nb, n_all - i), C) for i in range(0, n_all, nb)]
    return blocks + [(n_all * C, 1, r)] if r else blocks


def _carry(U: Tensor, S: Tensor, tab: _Tables, reverse: bool, out: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """The state entering each chunk of a block: E_0 = S, E_{j+1} = γ^c E_j + U_j (mirrored with ``reverse``).

    U [n, ...] holds each chunk's own contribution; returns E [n, ...] (also copied into ``out`` if given) and
    the state after the block.
    One GEMM with the n×n decay matrix: n·K·V multiply-adds per chunk, against a loop of n small adds
    (Python overhead per add) or ``torch.cumsum`` over dim 0 (measured 4x slower than the loop on CPU).
    The entering state is added after the GEMM in one pass (as addmm's bias it cost a multiply and a copy).
    """
    n = U.shape[0]
    M, w, g_last = tab.carry(n, reverse)  # reversed: E_j = Σ_{i>j} γ^(c(i-1-j)) U_i + γ^(c(n-1-j)) S
    flat = out is not None and out.is_contiguous()  # the GEMM writes a contiguous kept view itself
    E = torch.mm(M, U.reshape(n, -1), out=out.view(n, -1) if flat else None)
    S1 = S.reshape(1, -1)
    E = (E.add_(S1) if w is None else E.addcmul_(w, S1)).view(U.shape)
    if out is not None and not flat:
        out.copy_(E)
    last = 0 if reverse else n - 1
    return E, (E[last] + U[last] if g_last is None else torch.addcmul(U[last], E[last], g_last))


def _mask_(A: Tensor, tab: _Tables) -> Tensor:
    """Keep s <= t of [n, c, c] scores and decay them by γ^(t-s), in place."""
    return A.tril_() if tab.D is None else A.mul_(tab.D)


def _scale(x: Tensor, w: Tensor | None) -> Tensor:
    return x if w is None else x * w


def _states(k: Tensor, v: Tensor, S: Tensor, z: Tensor | None, tab: _Tables, out=(None, None)):
    """Chunk states of a block: (S [n, K, V] and z [n, K] entering each chunk, written into ``out`` if given;
    S, z after; decayed keys). z None (no normalizer): the z parts are None."""
    kw = _scale(k, tab.w_out)  # keys decayed to the chunk's end
    Sp, S = _carry(torch.bmm(kw.transpose(1, 2), v).to(S.dtype), S, tab, False, out[0])
    zp, z = (None, None) if z is None else _carry(kw.sum(1, dtype=z.dtype), z, tab, False, out[1])
    return Sp, zp, S, z, kw


def _forward_block(q, k, v, S, z, tab: _Tables, eps: float, o: Tensor, den: Tensor, keep=(None, None, None)):
    """One head's block: fills o [n, c, V] and den [n, c, 1] (views into the outputs), and the chunk states
    and masked scores into ``keep`` (views for the backward, each None: not kept) if given; returns S, z after.
    z None: no normalizer, o is the numerator and den is not used."""
    Sp, zp, S, z, _ = _states(k, v, S, z, tab, keep[:2])
    A = _mask_(torch.bmm(q, k.transpose(1, 2)), tab)  # (n, c, c) scores inside each chunk
    if keep[2] is not None:
        keep[2].copy_(A)
    qw = _scale(q, tab.w_in)
    num = torch.bmm(A, v).baddbmm_(qw, Sp.to(q.dtype))  # contiguous: in-place GEMMs on a strided view run per matrix
    if z is None:
        o.copy_(num)
        return S, None
    # q·z as a product and a sum: a batched matrix-vector bmm ran ~4x slower (66 against 18 µs per block)
    d = A.sum(-1, keepdim=True, dtype=den.dtype).add_((qw * zp.to(den.dtype).unsqueeze(1)).sum(-1, keepdim=True))
    den.copy_(d.add_(eps))
    torch.div(num, d, out=o)  # the one strided write, fused with the normalization
    return S, z


def _backward_block(q, k, v, o, go, den, Sp, zp, A, R, Rz, tab, dq, dk, dv, dphi_q=None, dphi_k=None, dG=None):
    """One head's block backward: fills dq, dk, dv [n, c, ·] (views); returns R, Rz entering it from the left.

    Sp [n, K, V], zp [n, K]: the states entering the block's chunks, kept by the forward; A [n, c, c]: its
    masked scores, or None (recomputed). Sp and A may share memory with this block's dv and dq (``_Kept``):
    both are read before dq and dv are written. q, k are φ-mapped;
    with ``dphi_q``, ``dphi_k`` (dφ/dx at this block's raw inputs) dq, dk are the gradients of the raw
    inputs. den, zp, Rz None: no normalizer. ``dG`` [n, c]: filled with the gate's
    per-token gradient (``ops_gated``).
    """
    dt = q.dtype
    norm = den is not None  # else no normalizer: go is ∂L/∂num and there is no z, h or R_z
    g = (go / den).to(dt) if norm else go.to(dt)  # ∂L/∂num, (n, c, V)
    h = ((go * o).sum(-1, keepdim=True, dtype=den.dtype) / den).neg_().to(dt) if norm else None  # ∂L/∂den
    kw = _scale(k, tab.w_out)  # keys decayed to the chunk's end
    qw = _scale(q, tab.w_in)
    Rn, R = _carry(torch.bmm(qw.transpose(1, 2), g).to(R.dtype), R, tab, True)  # R entering the next chunk
    if norm:
        Rzn, Rz = _carry((qw * h).sum(1, dtype=Rz.dtype), Rz, tab, True)  # Σ_t q_t h_t: bmm as slow as above
    if A is None:
        A = _mask_(torch.bmm(q, k.transpose(1, 2)), tab)
    tv = torch.bmm(A.transpose(1, 2), g).baddbmm_(kw, Rn.to(dt))  # A's last read: dq may overwrite it now
    P = torch.bmm(g, v.transpose(1, 2))
    P = _mask_(P.add_(h) if norm else P, tab)
    # products land in contiguous temporaries; each gradient gets one strided write, fused with its last term
    t = torch.bmm(P, k).baddbmm_(_scale(g, tab.w_in), Sp.transpose(1, 2).to(dt))  # Sp's last read
    gq = _write(dq, t, *((_scale(h, tab.w_in), zp.unsqueeze(1).to(dt)) if norm else (None, None)), dphi_q)
    t = torch.bmm(P.transpose(1, 2), q).baddbmm_(_scale(v, tab.w_out), Rn.transpose(1, 2).to(dt))
    gk = _write(dk, t, *((Rzn.unsqueeze(1).to(dt), tab.w_out) if norm else (None, None)), dphi_k)  # v' 's ones column
    dv.copy_(tv)
    if dG is not None:  # the gate's per-token gradient: q·∂L/∂q - k·∂L/∂k (w.r.t. φ-mapped q, k)
        torch.sub((q * gq).sum(-1, dtype=dG.dtype), (k * gk).sum(-1, dtype=dG.dtype), out=dG)
    return R, Rz


def _write(out: Tensor, t: Tensor, a: Tensor | None, b: Tensor | None, dphi: Tensor | None) -> Tensor:
    """out = t + a·b (b None: t + a; a None: t), times dφ/dx when φ is applied inside: one strided write.
    Returns the gradient before φ's chain rule (``out`` itself without φ)."""
    if dphi is None:
        if a is None:
            out.copy_(t)
        else:
            torch.add(t, a, out=out) if b is None else torch.addcmul(t, a, b, out=out)
        return out
    if a is not None:
        t = t.add_(a) if b is None else t.addcmul_(a, b)
    torch.mul(t, dphi, out=out)
    return t


def _for_each_head(fn, B: int, H: int, device: torch.device) -> None:
    """fn(b, h) for every sequence and head; on CPU the pairs are shared out over a pool of threads.

    Each worker runs torch single-threaded on its own heads (disjoint outputs, no locks). The default,
    intra-op threading, splits every small op of a block over the cores and waits at a barrier after
    each one: on a machine shared with other work one descheduled thread stalls every op (measured,
    2 threads at load 8 on 2 cores: the forward at T=65,536 took 7-19 s instead of 0.3 s).
    """
    pairs = [(b, h) for b in range(B) for h in range(H)]
    threads = torch.get_num_threads()
    n = min(threads, len(pairs)) if device.type == "cpu" else 1
    if n <= 1:
        for b, h in pairs:
            fn(b, h)
        return

    inference = torch.is_inference_mode_enabled()  # per thread, like grad and autocast modes: carried over

    def work(group: list[tuple[int, int]]) -> None:
        torch.set_num_threads(1)  # this thread's ops
        with torch.inference_mode(inference), torch.no_grad(), torch.autocast("cpu", enabled=False):
            for b, h in group:
                fn(b, h)

    try:
        with ThreadPoolExecutor(n) as pool:
            list(pool.map(work, [pairs[i::n] for i in range(n)]))  # list(): re-raises a worker's error
    finally:
        torch.set_num_threads(threads)


class ChunkedLinearAttention(torch.autograd.Function):
    """Chunked linear attention: (q, k, v, S0, z0, log γ, C, eps, φ, gate) -> (out, S, z).

    q, k [B, T, H, K] (φ applied, or raw when φ names a ``POINTWISE`` map: then it is applied to each
    block here and dq, dk are the raw inputs' gradients), v [B, T, H, V], all in one dtype; S0 [B, H, K, V],
    z0 [B, H, K] in the state dtype, or z0 None for no normalizer (then out = q·S and z is None); log γ
    [H] float64 or None; ``gate`` None or per-token log gates [B, T, H] float64 (``ops_gated``; with it
    log γ is None, and the gate gets a gradient). Products run in q's dtype (bf16 under autocast), states
    and the denominator in at least float32. Autocast is off inside: it would round the state sums down.
    A Python loop runs over (sequence, head, block), the heads shared out over threads on CPU; each step
    is a handful of batched GEMMs on strided views of the caller's tensors.
    """

    @staticmethod
    def forward(ctx, q, k, v, S0, z0, log_g, chunk_size, eps, phi=None, gate=None):
        per_chunk = chunk_size * (chunk_size + 2 * q.shape[-1] + 2 * v.shape[-1]) + 2 * q.shape[-1] * v.shape[-1]
        blocks = _blocks(q.shape[1], chunk_size, per_chunk, BLOCK_ELEMS.get(q.device.type, BLOCK_ELEMS["cuda"]))
        # what the backward needs beyond the inputs, kept whenever some input needs a gradient (the backward
        # recomputed the chunk states from one state per block: a GEMM and the carry per chunk, ~15% of it)
        kept = _Kept.allocate(q, k, v, S0, z0, chunk_size) if any(ctx.needs_input_grad) else None
        out, den, S_end, z_end = _forward(q, k, v, S0, z0, log_g, chunk_size, eps, phi, gate, blocks, kept)
        ctx.save_for_backward(q, k, v, S0, z0, out, den, gate, S_end, z_end, *(kept.tensors() if kept else ()))
        ctx.log_g, ctx.blocks, ctx.phi, ctx.chunk_size, ctx.eps, ctx.used = log_g, blocks, phi, chunk_size, eps, False
        ctx.layout = None if kept is None else (kept.C, kept.K, kept.scores)
        return out, S_end, z_end

    @staticmethod
    def backward(ctx, dout, dS, dz):
        q, k, v, S0, z0, out, den, gate, S_end, z_end, *saved = ctx.saved_tensors
        B, T, H, _ = q.shape
        norm, C = den is not None, ctx.chunk_size
        if ctx.used:  # a second backward (retain_graph): the first wrote its gradients over the kept buffers
            kept = _Kept.allocate(q, k, v, S0, z0, C)
            _forward(q, k, v, S0, z0, ctx.log_g, C, ctx.eps, ctx.phi, gate, ctx.blocks, kept)
        else:
            # .data: the gradients written over them must not bump the saved tensors' versions (ctx.used guards)
            kept = _Kept(*ctx.layout, *(None if x is None else x.data for x in saved))
        ctx.used = True
        dq, dk, dv = kept.gradients(q, k, v)
        dS0 = torch.zeros_like(S_end) if dS is None else dS.to(S_end.dtype, copy=True)
        dz0 = (torch.zeros_like(z_end) if dz is None else dz.to(z_end.dtype, copy=True)) if norm else None
        dG = None if gate is None else torch.empty_like(gate)  # the gate's per-token gradient: all written below
        fmap_grad = _phi_fns(ctx.phi, q.dtype)[1]
        with torch.autocast(q.device.type, enabled=False):
            tabs = _table_fn(ctx.log_g, gate, H, ctx.blocks, q.dtype, dS0.dtype, q.device)

            def head(b: int, h: int) -> None:
                R, Rz = dS0[b, h], dz0[b, h] if norm else None  # ∂L/∂(state after the last chunk)
                for i in range(len(ctx.blocks) - 1, -1, -1):
                    t0, n, c = ctx.blocks[i]
                    qb, kb, *ins = (
                        _view(x, b, h, t0, n, c) if x is not None else None for x in (q, k, v, out, dout, den)
                    )
                    dphi = (None, None)
                    if fmap_grad is not None:  # recompute φ of the block; the chain rule lands in dq, dk's write
                        (qb, dq_phi), (kb, dk_phi) = fmap_grad(qb), fmap_grad(kb)
                        dphi = (dq_phi, dk_phi)
                    grads = (_view(x, b, h, t0, n, c) for x in (dq, dk, dv))
                    dG_b = None if dG is None else dG[b, t0 : t0 + n * c, h].view(n, c)
                    Sp, zp, A = kept.block(b, h, t0, n, c)
                    R, Rz = _backward_block(qb, kb, *ins, Sp, zp, A, R, Rz, tabs(b, h, i), *grads, *dphi, dG_b)
                dS0[b, h] = R
                if norm:
                    dz0[b, h] = Rz

            _for_each_head(head, B, H, q.device)
        dg = None
        if dG is not None:  # g_u enters every cumulative gate G_t with t >= u; the final state is decayed by G_T
            if dS is not None:
                dG[:, -1] += (dS.to(torch.float64) * S_end.to(torch.float64)).sum((-1, -2))
            if norm and dz is not None:
                dG[:, -1] += (dz.to(torch.float64) * z_end.to(torch.float64)).sum(-1)
            dg = dG.flip(1).cumsum(1).flip(1)
        return dq, dk, dv, dS0, dz0, None, None, None, None, dg


def _forward(q, k, v, S0, z0, log_g, chunk_size, eps, phi, gate, blocks, kept: _Kept | None):
    """The forward's walk over (sequence, head, block): (out, den, S, z after), filling ``kept`` if given."""
    B, T, H, _ = q.shape
    dt, sd, norm = q.dtype, S0.dtype, z0 is not None
    out = fresh((B, T, H, v.shape[-1]), q)
    den = fresh((B, T, H, 1), q, torch.promote_types(dt, torch.float32)) if norm else None
    S_end, z_end = torch.empty_like(S0), torch.empty_like(z0) if norm else None
    fmap = _phi_fns(phi, dt)[0]
    with torch.autocast(q.device.type, enabled=False):
        tabs = _table_fn(log_g, gate, H, blocks, dt, sd, q.device)

        def head(b: int, h: int) -> None:
            S, z = S0[b, h], z0[b, h] if norm else None
            for i, (t0, n, c) in enumerate(blocks):
                keep = kept.block(b, h, t0, n, c) if kept is not None else (None, None, None)
                qb, kb, vb = (_view(x, b, h, t0, n, c) for x in (q, k, v))
                if fmap is not None:  # φ of one block: in cache, never a full-length tensor
                    qb, kb = fmap(qb), fmap(kb)
                dv_ = _view(den, b, h, t0, n, c) if norm else None
                ob = _view(out, b, h, t0, n, c)
                S, z = _forward_block(qb, kb, vb, S, z, tabs(b, h, i), eps, ob, dv_, keep)
            S_end[b, h] = S
            if norm:
                z_end[b, h] = z

        _for_each_head(head, B, H, q.device)
    return out, den, S_end, z_end


def _table_fn(log_g: Tensor | None, gate: Tensor | None, H: int, blocks, dt: torch.dtype, sd: torch.dtype, device):
    """tables(b, h, i): the decay factors of block i of sequence b, head h (shared per head and chunk
    length for a fixed γ, built per block from the gate otherwise)."""
    if gate is None:
        tabs = {c: _tables(log_g, H, c, dt, sd, device) for c in {c for _, _, c in blocks}}
        return lambda b, h, i: tabs[blocks[i][2]][h]
    return lambda b, h, i: _GateTables(_gate_view(gate, b, h, *blocks[i]), dt, sd)


def _gate_view(g: Tensor, b: int, h: int, t0: int, n: int, c: int) -> Tensor:
    """Log gates of tokens t0 .. t0+n*c of sequence b, head h of g [B, T, H] as [n, c]."""
    return g[b, t0 : t0 + n * c, h].reshape(n, c)
