"""``strandline generate``: sample from a model in recurrent mode (constant memory per token)."""

from __future__ import annotations

import sys

import torch

from app.errors import UserError


def generate(
    model: str,
    prompt: str = "",
    max_new_tokens: int = 200,
    temperature: float = 1.0,
    top_k: int | None = None,
    seed: int = 0,
) -> None:
    """Continue ``prompt`` token by token and print the result.

    Args:
        model: model directory or Lightning checkpoint.
        prompt: text (byte models) or bases (DNA models) to start from; empty starts from BOS.
        max_new_tokens: tokens to sample.
        temperature: softmax temperature (> 0).
        top_k: sample only among the k most likely tokens.
        seed: random seed, for reproducible samples.
    """
    from data.tokenizers import get_tokenizer
    from models import load

    if temperature <= 0:
        raise UserError("--temperature must be > 0")
    lm = load(model)
    tok = get_tokenizer(lm.meta.get("tokenizer") or "dna")
    try:
        ids = [tok.bos_id, *tok.encode(prompt).tolist()]
    except ValueError as e:
        raise UserError(f"prompt: {e}") from None
    g = torch.Generator().manual_seed(seed)
    out = []
    with torch.inference_mode():
        logits, state = lm(torch.tensor([ids]))
        logits = logits[:, -1]
        for _ in range(max_new_tokens):
            logits = logits.float() / temperature
            if top_k:
                kth = logits.topk(min(top_k, logits.shape[-1])).values[:, -1:]
                logits = logits.masked_fill(logits < kth, float("-inf"))
            nxt = torch.multinomial(logits.softmax(-1), 1, generator=g)[:, 0]
            out.append(int(nxt))
            logits, state = lm.step(nxt, state)
    sys.stdout.write(prompt + tok.decode(out) + "\n")
