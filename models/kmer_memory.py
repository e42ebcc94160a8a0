"""The k-mer memory as a model part: the op's counts (``models/ops/kmer.py``) mixed into the LM's logits.

For each order j the memory gives m_j[a], the decayed number of times the k-mer just read was followed by
symbol a, and its track record: r_j, how many of its guesses in a row were right, and e_j, how many of the last
32 were wrong. The head turns the counts into a smoothed distribution p_j = (m_j + α_j) / (n_j + A α_j) and adds
g_j · log(A p_j) to the alphabet's logits, with a learned, context-dependent trust

    g_j = softplus(w_j · h_t + u_j · log(1 + n_j) + v_j · log(1 + r_j) + x_j · e_j / 32 + c_j) · [n_j > 0]

(h_t the final hidden state, n_j = Σ_a m_j[a]). log(A p_j) is 0 for a uniform p_j, so a k-mer never seen
changes nothing; a k-mer seen before, followed by G, moves mass towards G as far as the model has learned to
trust such a match against what its own context says: little for a chance match of a short k-mer, much inside
a copy that has been right for the last hundred bases (a repeat, a paralog, a tandem copy). This is the mixing
of a DNA compressor's copy expert with its context model (weighted by its recent record, as XM does), learned
end to end. Without the track record, a model trained on synthetic repeats trusted every chance match and lost
0.044 bits/base on natural sequence (docs/variants.md).

``KmerMemory`` follows the ``Memory`` protocol (``models/state.py``): its state is a ``KmerMemoryState``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from strandline.models.config import ModelConfig
from strandline.models.ops.kmer import TRACK, KmerMemoryState, KmerRead, KmerSpec, init_kmer_state, kmer_memory
from strandline.models.ops.linear import Mode
from strandline.models.state import Memory

GATE_INIT = -2.0  # softplus(-2) = 0.13: a match starts as a small nudge
ALPHA_INIT = 0.1  # pseudo-count per symbol


def kmer_spec(cfg: ModelConfig) -> KmerSpec:
    return KmerSpec(
        orders=tuple(cfg.kmer_orders),
        n_buckets=cfg.kmer_buckets,
        alphabet=tuple(cfg.kmer_alphabet),
        decay=tuple(cfg.kmer_decay) if isinstance(cfg.kmer_decay, (list, tuple)) else cfg.kmer_decay,
        vocab_size=cfg.vocab_size,
    )


class KmerMemory(Memory):
    """The k-mer tables (state) and g_j · log(A p_j) added to the alphabet's logits, summed over the orders j."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        J = len(cfg.kmer_orders)
        self.cfg = cfg  # shared with the LM: a scan sets its state_dtype before building states
        self.spec = kmer_spec(cfg)
        self.gate = nn.Linear(cfg.d_model, J)
        self.count_weight = nn.Parameter(torch.zeros(J))
        self.run_weight = nn.Parameter(torch.zeros(J))
        self.miss_weight = nn.Parameter(torch.zeros(J))
        self.log_alpha = nn.Parameter(torch.full((J,), math.log(ALPHA_INIT)))
        self.register_buffer("alphabet", torch.tensor(cfg.kmer_alphabet, dtype=torch.long), persistent=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """The gate starts at zero weight and a small bias (the LM builds the memory after its GPT-2 init)."""
        nn.init.zeros_(self.gate.weight)
        nn.init.constant_(self.gate.bias, GATE_INIT)

    def init_state(self, batch_size: int, dtype=None, device=None) -> KmerMemoryState:
        """The empty tables [B, J, N, A] (and track record, write log), accumulating in ``dtype``."""
        return init_kmer_state(self.spec, batch_size, dtype or self.cfg.torch_state_dtype, device)

    def forward(
        self,
        tokens: Tensor,
        state: KmerMemoryState | None,
        mode: Mode,
        need_state: bool = True,
        donate: bool = False,
    ) -> tuple[KmerRead, KmerMemoryState | None]:
        """tokens [B, T] -> (counts and track record [B, T, ...], new state); see ``ops.kmer.kmer_memory``.

        ``need_state=False`` skips the [B, J, N, A] tables of a window read from the start (state None) and
        returns None for the new state. ``donate=True``: the caller gives ``state`` up, so its tables are
        updated in place instead of copied.
        """
        return kmer_memory(tokens, self.spec, state, mode, self.cfg.torch_state_dtype, need_state, donate)

    def mix(self, logits: Tensor, h: Tensor, r: KmerRead) -> Tensor:
        """logits [B, T, V], hidden h [B, T, D], what the memory read -> logits with the matches mixed in."""
        dt = torch.promote_types(logits.dtype, torch.float32)
        m = r.counts.to(dt)
        A = m.shape[-1]
        n = m.sum(-1)  # [B, T, J]
        alpha = self.log_alpha.to(dt).exp()
        logp = torch.log((m + alpha[:, None]) / (n + A * alpha)[..., None]) + math.log(A)
        pre = self.gate(h).to(dt) + self.count_weight.to(dt) * torch.log1p(n)
        pre = pre + self.run_weight.to(dt) * torch.log1p(r.run.to(dt)) + self.miss_weight.to(dt) * (r.misses / TRACK)
        g = F.softplus(pre) * (n > 0)
        delta = (g[..., None] * logp).sum(-2)  # [B, T, A]
        return logits.to(dt).index_add(-1, self.alphabet, delta).to(logits.dtype)
