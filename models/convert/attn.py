"""Layer-by-layer attention of a softmax teacher and its linear student, for conversion by distillation.

Both sides read the SAME layer input, the teacher's normalized residual stream before each mixer, so all
layers train at once and independently (as Hedgehog and LoLCATs do). q, k, v come from the teacher's
projections (identical to the student's at the start of conversion). The teacher rotates q, k (RoPE); the
student's φ maps the rotated q, k when its config has ``position: rope`` (φ(RoPE(q)), what its forward
computes), the raw ones otherwise.

- ``softmax_weights`` / ``linear_weights``: the causal attention matrices [B, H, T, T] of either side. The
  student's comes from its own op (values = one-hot rows), so it includes exactly the model's decay and eps;
  for a student with ``window`` W (the LoLCATs hybrid: softmax over the last W tokens, φ over older ones,
  one normalizer) that op is ``ops_window.window_attention``, and the window part reads the rotated q, k.
- ``hedgehog_loss``: KL(softmax weights || linear weights) per query row (the cross-entropy of Zhang et al.
  2024 minus the teacher's entropy, so a perfect match reads 0).
- ``transfer_loss``: MSE between the attention outputs (before the shared out projection), the
  "attention transfer" of LoLCATs (Zhang et al. 2024).
"""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from strandline.models.layers import LinearAttention, SoftmaxAttention, _rope
from strandline.models.lm import LinearTransformerLM
from strandline.models.ops.linear import linear_attention
from strandline.models.ops.window import window_attention

DistillLoss = Literal["hedgehog", "transfer"]


@torch.no_grad()
def mixer_inputs(teacher: LinearTransformerLM, tokens: Tensor) -> list[Tensor]:
    """The input of every block's mixer (after ``norm1``), [B, T, D] each, running the teacher once."""
    x = teacher.embed(tokens)
    inputs = []
    for block in teacher.blocks:
        inputs.append(block.norm1(x))
        x, _ = block(x)
    return inputs


@torch.no_grad()
def teacher_qkv(mixer: SoftmaxAttention, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """x [B, T, D] -> q, k, v, each [B, T, H, hd], before RoPE (the conv, if any, applied)."""
    h, _ = mixer._qkv(x, None)
    return h.unbind(2)


def rotate(x: Tensor, base: float) -> Tensor:
    """RoPE of x [B, T, H, hd] at positions 0..T-1, exactly as the softmax layer applies it."""
    return _rope(x.transpose(1, 2), 0, base).transpose(1, 2)


def uses_rope(mixer: LinearAttention) -> bool:
    """Whether a linear layer rotates q, k before φ (``position: rope``, when ModelConfig has it)."""
    return getattr(mixer.cfg, "position", "none") == "rope"


def softmax_weights(q: Tensor, k: Tensor) -> Tensor:
    """Causal softmax attention weights [B, H, T, T] of q, k [B, T, H, hd] (scale 1/√hd, as SDPA)."""
    T = q.shape[1]
    s = torch.einsum("bihd,bjhd->bhij", q, k) / math.sqrt(q.shape[-1])
    mask = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    return s.masked_fill(~mask, float("-inf")).softmax(-1)


def linear_weights(mixer: LinearAttention, q: Tensor, k: Tensor) -> Tensor:
    """Causal attention weights [B, H, T, T] of the student's layer on q, k [B, T, H, hd].

    Row i is out_i of the layer's op when v_j is the one-hot e_j: φ(q_i)·φ(k_j)γ^(i-j) / (φ(q_i)·z_i + eps)
    for a linear layer; for a hybrid (``window`` W) the softmax weights of the last W keys and the φ weights
    of older ones over their shared normalizer.
    """
    B, T, H, _ = q.shape
    onehot = torch.eye(T, dtype=q.dtype, device=q.device).expand(B, H, T, T).transpose(1, 2)  # (B, T, H, T)
    w = _student_attend(mixer, q, k, onehot, "naive")
    return w.transpose(1, 2)  # (B, H, T, T)


def linear_output(mixer: LinearAttention, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """The student's attention output [B, T, H, hd] (before the out projection) for q, k, v [B, T, H, hd]."""
    return _student_attend(mixer, q, k, v, "chunked")


def _student_attend(mixer: LinearAttention, q: Tensor, k: Tensor, v: Tensor, mode: str) -> Tensor:
    """The student layer's attention of q, k (as its forward scores them: rotated when it uses RoPE), v."""
    cfg, fq = mixer.cfg, mixer.fmap(q, is_query=True)
    sd = torch.promote_types(cfg.torch_state_dtype, q.dtype)  # as the layer: never below the compute dtype
    kw = dict(mode=mode, chunk_size=cfg.chunk_size, decay=mixer.decay, eps=cfg.eps, state_dtype=sd)
    if cfg.window:  # the hybrid: φ of a key is taken inside the op, when it leaves the window
        return window_attention(q, k, v, cfg.window, fq=fq, phi=mixer.fmap, **kw)[0]
    return linear_attention(fq, mixer.fmap(k), v, **kw)[0]


@torch.no_grad()
def softmax_output(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """The teacher's attention output [B, T, H, hd] for rotated q, k and v [B, T, H, hd]."""
    o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
    return o.transpose(1, 2)


def hedgehog_loss(teacher_w: Tensor, student_w: Tensor) -> Tensor:
    """Mean over query rows of KL(teacher row || student row); weights [B, H, T, T], rows sum to ~1."""
    log_ratio = teacher_w.clamp_min(1e-30).log() - student_w.clamp_min(1e-30).log()
    return (teacher_w * log_ratio).sum(-1).mean()


def transfer_loss(teacher_out: Tensor, student_out: Tensor) -> Tensor:
    """MSE between attention outputs [B, T, H, hd] (before the out projection, which both share)."""
    return F.mse_loss(student_out, teacher_out)


def distill_loss(
    teacher: LinearTransformerLM, student: LinearTransformerLM, tokens: Tensor, kind: DistillLoss
) -> Tensor:
    """Mean over layers of the layer-wise loss; gradients reach only the student's feature maps.

    Args:
        teacher: the softmax model (frozen).
        student: its linear student (same projections).
        tokens: [B, T] ids; T is the distillation length (the T×T weight matrices are formed for ``hedgehog``).
        kind: ``hedgehog`` (attention weights, KL) or ``transfer`` (layer outputs, MSE).
    """
    losses = []
    for x, t_block, s_block in zip(mixer_inputs(teacher, tokens), teacher.blocks, student.blocks, strict=True):
        q, k, v = teacher_qkv(t_block.mixer, x)
        qr, kr = rotate(q, t_block.mixer.cfg.rope_base), rotate(k, t_block.mixer.cfg.rope_base)
        sq, sk = (qr, kr) if uses_rope(s_block.mixer) else (q, k)  # what the student's forward will map
        if kind == "hedgehog":
            losses.append(hedgehog_loss(softmax_weights(qr, kr), linear_weights(s_block.mixer, sq, sk)))
        else:
            losses.append(transfer_loss(softmax_output(qr, kr, v), linear_output(s_block.mixer, sq, sk, v)))
    return torch.stack(losses).mean()
