"""Feature maps φ for linear attention, selected by name from configs.

Every map is a per-token function of its input (no statistics across tokens), which is what keeps the
chunked, recurrent and naive modes exact under any split of a sequence. For the maps with
``positive_kernel`` the kernel φ(q)·φ(k) is positive, so the paper's normalizer q·z stays positive: their
outputs are >= 0, but for ``taylor``, whose kernel is 1 + s + s²/2 >= 1/2. ``silu`` and ``identity`` are
signed (no positive kernel): they serve the rules without z (the delta rule, or a normalizer 'rmsnorm' /
'none'), and the config refuses them with ``normalizer: z``.

- ``elu1``: elu(x) + 1, the paper's map (Katharopoulos et al. 2020, eq. 7).
- ``relu``: max(x, 0) (used by e.g. Qin et al. 2022); rows can be all-zero, the eps in the op covers it.
- ``performer``: positive orthogonal random features, FAVOR+ (Choromanski et al. 2021), an unbiased
  estimate of the softmax kernel exp(q·k/√d). The projection is drawn once at init and saved as a buffer.
- ``hedgehog``: a learnable per-head linear map followed by softmax over [xW, -xW] (Zhang et al. 2024),
  trained to mimic softmax attention's spiky weights; output dim 2·K.
- ``taylor``: Based's 2nd-order Taylor expansion of exp(q·k/√d) (Arora et al. 2024), after an optional
  learned projection to a small feature dim d: more recall per state byte than elu1 at equal K.
- ``silu``: x·sigmoid(x), DeltaNet's / Gated DeltaNet's q, k activation (FLA: ``qk_activation='silu'``) before
  the delta rule's L2 norm. Signed, so normalized keys spread over the whole sphere; elu1's positive
  outputs put them all in one orthant (cosine ~0.7 between random keys), where every erase-and-write of the
  delta rule disturbs every other key.
- ``identity``: q, k as projected (GLA / RetNet: no φ, an output norm instead of z).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class FeatureMap(nn.Module):
    """Base class: ``forward(x [B, T, H, K], is_query) -> [B, T, H, out_dim]``.

    ``pointwise`` names the map in ``POINTWISE`` when it is one (elementwise, no parameters), else None.
    ``positive_kernel``: φ(q)·φ(k) >= 0 for all inputs, which the normalizer q·z needs.
    """

    out_dim: int
    pointwise: str | None = None
    positive_kernel: bool = True

    def forward(self, x: Tensor, is_query: bool = False) -> Tensor:  # pragma: no cover - interface
        raise NotImplementedError


def elu1(x: Tensor) -> Tensor:
    """elu(x) + 1 = max(x, 0) + e^min(x, 0): any shape, x's dtype.

    Written so, not as ``F.elu(x) + 1``: for x << 0 that is (e^x - 1) + 1, whose float32 rounding loses
    e^x's digits (8e-4 relative at x = -12), while the chunked op computes e^x itself; the two must agree."""
    return torch.clamp(x, min=0).add_(torch.clamp(x, max=0).exp_())


def _elu1_(y: Tensor) -> Tensor:
    """``elu1`` in place on ``y``."""
    e = torch.clamp(y, max=0).exp_()
    return y.clamp_(min=0).add_(e)


def elu1_grad(phi: Tensor) -> Tensor:
    """dφ/dx of elu(x) + 1 from its output: 1 where x > 0 (φ > 1), e^x = φ where x <= 0, i.e. min(φ, 1)."""
    return phi.clamp(max=1)


def relu_grad(phi: Tensor) -> Tensor:
    """dφ/dx of relu from its output: 1 where φ > 0, else 0."""
    return (phi > 0).to(phi.dtype)


def _in_place_on_copy(fn):
    """fn on a contiguous copy, in place: out-of-place elementwise ops on a strided block (rows H·K apart)
    ran ~2x slower than the copy plus in-place ops (measured on CPU, one thread)."""
    return lambda x: fn(x.clone(memory_format=torch.contiguous_format))


POINTWISE = {
    "elu1": (_in_place_on_copy(_elu1_), elu1_grad),
    "relu": (_in_place_on_copy(F.relu_), relu_grad),
}
"""Elementwise maps whose derivative is a function of their output: (φ of a block, no autograd; φ' from
φ). The chunked op (``linear_attention(..., feature_map=name)``) applies these inside, block by block,
so neither φ(q), φ(k) nor their gradients are ever full-length tensors."""


class _Elu1Fn(torch.autograd.Function):
    """elu(x) + 1 saving only its output (the op keeps that tensor anyway): backward is grad · min(φ, 1).

    Autograd's ``F.elu(x) + 1`` keeps x as well, allocates two outputs and recomputes e^x in backward.
    """

    @staticmethod
    def forward(ctx, x):
        phi = elu1(x)
        ctx.save_for_backward(phi)
        return phi

    @staticmethod
    def backward(ctx, grad):
        (phi,) = ctx.saved_tensors
        return elu1_grad(phi).mul_(grad)


class _Elementwise(FeatureMap):
    """A map of each channel alone: out_dim = head_dim, no parameters (``feature_dim`` is ignored)."""

    def __init__(self, head_dim: int, n_heads: int, feature_dim: int | None = None):
        super().__init__()
        self.out_dim = head_dim


class Elu1(_Elementwise):
    pointwise = "elu1"  # the op can apply it itself (``linear_attention(..., feature_map="elu1")``)

    def forward(self, x: Tensor, is_query: bool = False) -> Tensor:
        return _Elu1Fn.apply(x) if torch.is_grad_enabled() and x.requires_grad else elu1(x)


class ReLU(_Elementwise):
    pointwise = "relu"

    def forward(self, x: Tensor, is_query: bool = False) -> Tensor:
        return F.relu(x)


class SiLU(_Elementwise):
    """φ(x) = x·sigmoid(x) (signed): the q, k activation of DeltaNet / Gated DeltaNet, before their L2 norm.

    Not ``pointwise``: its derivative is not a function of its output (silu is not monotone), so it is
    applied outside the op, by autograd.
    """

    positive_kernel = False

    def forward(self, x: Tensor, is_query: bool = False) -> Tensor:
        return F.silu(x)


class Identity(_Elementwise):
    """φ(x) = x (signed): q, k as projected, as GLA and RetNet use them (with an output norm, no z)."""

    positive_kernel = False

    def forward(self, x: Tensor, is_query: bool = False) -> Tensor:
        return x


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


class Taylor(FeatureMap):
    """Based's 2nd-order Taylor map (Arora et al. 2024): φ(q)·φ(k) = 1 + s + s²/2 with s = q·k/√d.

    φ(x) = [1, x/d^(1/4), x_i x_j/√d (i < j), x_i²/√(2d)] on x projected to d = ``feature_dim`` channels
    per head (a learned [H, head_dim, d] map, orthogonal at init; no projection when feature_dim is None).
    Only the upper triangle of x xᵀ is kept (x xᵀ is symmetric): out_dim = 1 + d + d(d+1)/2, about half
    the state of the full outer product for the same kernel. Single features can be negative, but the
    kernel 1 + s + s²/2 >= 1/2, so the normalizer q·z stays positive.
    """

    def __init__(self, head_dim: int, n_heads: int, feature_dim: int | None = None):
        super().__init__()
        d = feature_dim or head_dim
        self.proj = None
        if feature_dim is not None:
            q = torch.linalg.qr(torch.randn(n_heads, max(head_dim, d), max(head_dim, d)))[0]
            self.proj = nn.Parameter(q[:, :head_dim, :d].contiguous())
        self.out_dim = 1 + d + d * (d + 1) // 2
        i, j = torch.triu_indices(d, d)
        self.register_buffer("i", i, persistent=False)
        self.register_buffer("j", j, persistent=False)
        self.register_buffer("diag", i == j, persistent=False)

    def forward(self, x: Tensor, is_query: bool = False) -> Tensor:
        if self.proj is not None:
            x = torch.einsum("bthk,hkd->bthd", x, self.proj.to(x.dtype))
        x = x * x.shape[-1] ** -0.25  # x·y = q·k/√d = s
        # s²/2 = Σ_i (x_i²/√2)(y_i²/√2) + Σ_{i<j} (x_i x_j)(y_i y_j): the upper triangle, diagonal / √2
        second = x[..., self.i] * x[..., self.j]
        second = torch.where(self.diag, second * 2**-0.5, second)
        return torch.cat([torch.ones_like(x[..., :1]), x, second], dim=-1)


class T2R(FeatureMap):
    """φ(x) = relu(x W_h + b_h) per head (Kasai et al. 2021, "Finetuning Pretrained Transformers into RNNs").

    [B, T, H, K] -> [B, T, H, m], m = ``feature_dim`` or K; W starts at the identity when m = K, so the
    untrained map is plain ``relu`` (what ``strandline convert --method t2r`` starts from).
    """

    def __init__(self, head_dim: int, n_heads: int, feature_dim: int | None = None):
        super().__init__()
        m = feature_dim or head_dim
        self.out_dim = m
        w = torch.eye(head_dim, m) if m == head_dim else torch.randn(head_dim, m) / math.sqrt(head_dim)
        self.weight = nn.Parameter(w.repeat(n_heads, 1, 1))  # (H, K, m)
        self.bias = nn.Parameter(torch.zeros(n_heads, m))

    def forward(self, x: Tensor, is_query: bool = False) -> Tensor:
        u = torch.einsum("bthk,hkm->bthm", x, self.weight.to(x.dtype))
        return torch.relu(u + self.bias.to(x.dtype))


FEATURE_MAPS: dict[str, type[FeatureMap]] = {
    "elu1": Elu1,
    "relu": ReLU,
    "performer": Performer,
    "hedgehog": Hedgehog,
    "taylor": Taylor,
    "t2r": T2R,
    "silu": SiLU,
    "identity": Identity,
}


def make_feature_map(name: str, head_dim: int, n_heads: int, feature_dim: int | None = None) -> FeatureMap:
    """Build the feature map called ``name`` (one of FEATURE_MAPS)."""
    if name not in FEATURE_MAPS:
        raise ValueError(f"unknown feature map {name!r}; choose one of {sorted(FEATURE_MAPS)}")
    return FEATURE_MAPS[name](head_dim, n_heads, feature_dim)
