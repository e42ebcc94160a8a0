"""Pieces of softmax -> linear conversion (``strandline convert``): the T2R map, LoRA, and the student builder.

A converted model keeps everything of the softmax model but its mixers' attention rule: embeddings, norms,
MLPs, the q/k/v/out projections and the short convolution carry over by name (``SoftmaxAttention`` and
``LinearAttention`` share them through ``layers._Mixer``); only the feature map φ is new.

- the T2R map φ(x) = relu(x W_h + b_h) is the ``t2r`` entry of ``strandline.models.feature_maps`` (an ordinary config
  name, so a converted directory loads anywhere).
- ``LoRALinear``: y = x Wᵀ + s · x Aᵀ Bᵀ with a frozen W and trainable rank-r A, B (Hu et al. 2021); B starts
  at zero, so adding LoRA changes nothing until it trains. ``merge_lora`` folds s·BA into W, which leaves an
  ordinary ``nn.Linear`` (the saved model directory is plain).

Pure torch (no Lightning, no ``data``), like the rest of ``models``.
"""

from __future__ import annotations

import math
from dataclasses import replace

import torch
from torch import Tensor, nn

from strandline.errors import UserInputError
from strandline.models.feature_maps import FEATURE_MAPS
from strandline.models.lm import LinearTransformerLM

LORA_TARGETS = ("qkv", "proj")
"""The mixer projections LoRA adapts (q/k/v and out, as LoLCATs does)."""


class ConvertError(UserInputError):
    """A model or data that cannot be converted (already linear, wrong tokenizer, ...); one line for users."""


class LoRALinear(nn.Module):
    """A frozen ``nn.Linear`` (no bias) plus a trainable low-rank update s · B A, with s = alpha / rank."""

    def __init__(self, base: nn.Linear, rank: int, alpha: float):
        super().__init__()
        if base.bias is not None:
            raise ValueError("LoRALinear wraps bias-free projections only")
        self.base = base
        self.base.weight.requires_grad_(False)
        self.scale = alpha / rank
        self.lora_A = nn.Parameter(torch.randn(rank, base.in_features) / math.sqrt(base.in_features))
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, rank))

    def merged_weight(self) -> Tensor:
        """W + s · B A, [out, in]: the weight of the equivalent plain Linear."""
        return self.base.weight + self.scale * (self.lora_B @ self.lora_A)

    def forward(self, x: Tensor) -> Tensor:
        return self.base(x) + self.scale * ((x @ self.lora_A.T.to(x.dtype)) @ self.lora_B.T.to(x.dtype))


def add_lora(model: LinearTransformerLM, rank: int, alpha: float) -> list[str]:
    """Wrap every block's ``LORA_TARGETS`` projections in ``LoRALinear``; returns the wrapped module names."""
    names = []
    for i, block in enumerate(model.blocks):
        for target in LORA_TARGETS:
            setattr(block.mixer, target, LoRALinear(getattr(block.mixer, target), rank, alpha))
            names.append(f"blocks.{i}.mixer.{target}")
    return names


def merge_lora(model: LinearTransformerLM) -> LinearTransformerLM:
    """Replace every ``LoRALinear`` by a plain ``nn.Linear`` holding the merged weight (in place); returns model."""
    for block in model.blocks:
        for target in LORA_TARGETS:
            mod = getattr(block.mixer, target)
            if isinstance(mod, LoRALinear):
                plain = nn.Linear(mod.base.in_features, mod.base.out_features, bias=False)
                plain.weight = nn.Parameter(mod.merged_weight().detach().clone())
                setattr(block.mixer, target, plain)
    return model


def to_linear(
    softmax_model: LinearTransformerLM,
    feature_map: str = "hedgehog",
    feature_dim: int | None = None,
    decay: str | list[float] | None = None,
    window: int = 0,
) -> LinearTransformerLM:
    """A linear-attention student initialized from a softmax model: every shared weight copied by name.

    Args:
        softmax_model: a ``LinearTransformerLM`` with ``attention: softmax`` (RoPE, KV cache).
        feature_map: φ of the student: a name of ``FEATURE_MAPS`` (``t2r``, ``hedgehog``, ...).
        feature_dim: output features per head for maps that take it (t2r, performer).
        decay: per-head γ of the student (None: γ = 1, the paper; the softmax model has none).
        window: W > 0 makes the student the LoLCATs hybrid (``ModelConfig.window``): exact softmax over the
            last W tokens, φ over every older one, one normalizer; it equals the softmax model on the first W
            tokens of a sequence and keeps a W-token buffer besides S, z. 0: pure linear attention.

    Returns:
        The student (training mode off), with ``meta`` copied from the softmax model. Its config keeps the
        softmax model's rotary positions (``position: rope``, φ(RoPE(q))) when ``ModelConfig`` has that option.

    Raises:
        ConvertError: the model is not a softmax model.
    """
    cfg = softmax_model.config
    if cfg.attention != "softmax":
        raise ConvertError(f"the model is already {cfg.attention!r} attention; convert needs a softmax model")
    if feature_map not in FEATURE_MAPS:
        raise ConvertError(f"unknown feature map {feature_map!r}; choose one of {sorted(FEATURE_MAPS)}")
    # the softmax model's rotary positions are kept: φ(RoPE(q)), positions from the state's token counter
    student_cfg = replace(
        cfg, attention="linear", feature_map=feature_map, feature_dim=feature_dim, decay=decay, position="rope",
        window=window,
    )  # fmt: skip
    student = LinearTransformerLM(student_cfg)
    missing, unexpected = student.load_state_dict(softmax_model.state_dict(), strict=False)
    new = [k for k in missing if ".fmap." not in k]
    if new or unexpected:  # only φ may be new: anything else means the two layouts drifted apart
        raise RuntimeError(f"softmax -> linear weight layout mismatch: missing {new[:3]}, unexpected {unexpected[:3]}")
    student.meta = dict(softmax_model.meta)
    return student.eval()


def feature_map_parameters(model: LinearTransformerLM) -> list[nn.Parameter]:
    """The parameters of every layer's φ (what attention distillation trains)."""
    return [p for block in model.blocks for p in block.mixer.fmap.parameters()]
