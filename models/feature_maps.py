"""Feature maps φ for linear attention, selected by name from configs.

Every map is a per-token function of its input (no statistics across tokens), which is what keeps the
chunked, recurrent and naive modes exact under any split of a sequence. All outputs are >= 0, so the
normalizer q·z stays positive.

- ``elu1``: elu(x) + 1, the paper's map (Katharopoulos et al. 2020, eq. 7).
- ``relu``: max(x, 0) (used by e.g. Qin et al. 2022); rows can be all-zero, the eps in the op covers it.
- ``performer``: positive orthogonal random features, FAVOR+ (Choromanski et al. 2021), an unbiased
  estimate of the softmax kernel exp(q·k/√d). The projection is drawn once at init and saved as a buffer.
- ``hedgehog``: a learnable per-head linear map followed by softmax over [xW, -xW] (Zhang et al. 2024),
  trained to mimic softmax attention's spiky weights; output dim 2·K.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class FeatureMap(nn.Module):
    """Base class: ``forward(x [B, T, H, K], is_query) -> [B, T, H, out_dim]``."""

    out_dim: int

    def forward(self, x: Tensor, is_query: bool = False) -> Tensor:  # pragma: no cover - interface
        raise NotImplementedError


class Elu1(FeatureMap):
    def __init__(self, head_dim: int, n_heads: int, feature_dim: int | None = None):
        super().__init__()
        self.out_dim = head_dim

    def forward(self, x: Tensor, is_query: bool = False) -> Tensor:
        return F.elu(x) + 1


class ReLU(FeatureMap):
    def __init__(self, head_dim: int, n_heads: int, feature_dim: int | None = None):
        super().__init__()
        self.out_dim = head_dim

    def forward(self, x: Tensor, is_query: bool = False) -> Tensor:
        return F.relu(x)


class Performer(FeatureMap):
    """φ(x) = exp(ωᵀx' - |x'|²/2) / √m with x' = x / d^(1/4) and orthogonal Gaussian rows ω.

    Queries get a per-token stabilizer (their max logit): a per-query factor cancels in the
    normalization, so it changes nothing but overflow. Keys get none, since a per-key factor would
    change the attention weights.
    """

    def __init__(self, head_dim: int, n_heads: int, feature_dim: int | None = None):
        super().__init__()
        m = feature_dim or head_dim
        self.out_dim = m
        g = torch.Generator().manual_seed(0)  # a fixed draw; saved with the weights anyway
        self.register_buffer("omega", torch.stack([_orthogonal_gaussian(m, head_dim, g) for _ in range(n_heads)]))

    def forward(self, x: Tensor, is_query: bool = False) -> Tensor:
        x = x * x.shape[-1] ** -0.25
        logits = torch.einsum("bthk,hmk->bthm", x, self.omega.to(x.dtype)) - 0.5 * (x * x).sum(-1, keepdim=True)
        if is_query:
            logits = logits - logits.amax(-1, keepdim=True).detach()
        return torch.exp(logits) / math.sqrt(self.out_dim)


def _orthogonal_gaussian(m: int, d: int, g: torch.Generator) -> Tensor:
    """m × d rows, orthogonal within each block of d, with chi-distributed norms (as in FAVOR+)."""
    blocks = []
    for _ in range(math.ceil(m / d)):
        q, _ = torch.linalg.qr(torch.randn(d, d, generator=g))
        blocks.append(q.T)
    w = torch.cat(blocks)[:m]
    return w * torch.randn(m, d, generator=g).norm(dim=1, keepdim=True)


class Hedgehog(FeatureMap):
    """φ(x) = [softmax(xW_h), softmax(-xW_h)] per head h; W starts at the identity."""

    def __init__(self, head_dim: int, n_heads: int, feature_dim: int | None = None):
        super().__init__()
        self.out_dim = 2 * head_dim
        self.weight = nn.Parameter(torch.eye(head_dim).repeat(n_heads, 1, 1))

    def forward(self, x: Tensor, is_query: bool = False) -> Tensor:
        u = torch.einsum("bthk,hkm->bthm", x, self.weight.to(x.dtype))
        return torch.cat([u.softmax(-1), (-u).softmax(-1)], dim=-1)


FEATURE_MAPS: dict[str, type[FeatureMap]] = {"elu1": Elu1, "relu": ReLU, "performer": Performer, "hedgehog": Hedgehog}


def make_feature_map(name: str, head_dim: int, n_heads: int, feature_dim: int | None = None) -> FeatureMap:
    """Build the feature map called ``name`` (one of FEATURE_MAPS)."""
    if name not in FEATURE_MAPS:
        raise ValueError(f"unknown feature map {name!r}; choose one of {sorted(FEATURE_MAPS)}")
    return FEATURE_MAPS[name](head_dim, n_heads, feature_dim)
