"""``strandline generate``: sample from a model in recurrent mode (constant memory per token)."""

from __future__ import annotations

import codecs
import math
import sys
from collections.abc import Iterator

import torch

from strandline.app.errors import writing_stdout
from strandline.errors import UserInputError


def _check_options(max_new_tokens: int, temperature: float, top_k: int | None, seed: int = 0) -> None:
    if max_new_tokens < 0:
        raise UserInputError(f"--max_new_tokens must be >= 0, got {max_new_tokens}")
    if not (temperature > 0 and math.isfinite(temperature)):
        raise UserInputError(f"--temperature must be > 0, got {temperature}")
    if top_k is not None and top_k < 1:
        raise UserInputError(f"--top_k must be >= 1 (or left out for no limit), got {top_k}")
    if not -(2**63) <= seed < 2**64:  # torch.Generator.manual_seed's range (beyond it: a bare ValueError)
        raise UserInputError(f"--seed must lie in [-2^63, 2^64), got {seed}")


def generate(
    model: str,
    prompt: str = "",
    max_new_tokens: int = 200,
    temperature: float = 1.0,
    top_k: int | None = None,
    seed: int = 0,
) -> None:
    """Continue ``prompt`` token by token and print the result.

    Only tokens the tokenizer can print are sampled: bases A/C/G/T for DNA models, bytes for text
    models; special tokens (BOS, EOS, padding) are masked out.

    Args:
        model: model directory or Lightning checkpoint.
        prompt: text (byte models) or bases (DNA models) to start from; empty starts from BOS.
        max_new_tokens: tokens to sample (>= 0).
        temperature: softmax temperature (> 0).
        top_k: sample only among the k most likely tokens (>= 1; default: all).
        seed: random seed, for reproducible samples.
    """
    from strandline.models import load
    from strandline.models.streaming import bound_memory

    _check_options(max_new_tokens, temperature, top_k, seed)
    lm = load(model)
    if note := bound_memory(lm, where=model):
        print(f"strandline generate: note: {note}", file=sys.stderr)
    pieces = iter_text(lm, prompt, max_new_tokens, temperature, top_k, seed, where=model)
    with writing_stdout():
        for text in pieces:  # each token is printed when made: `| head` stops it, memory stays flat
            _emit(text)
        _emit("\n")


def iter_text(
    lm, prompt: str, max_new_tokens: int, temperature: float = 1.0, top_k: int | None = None, seed: int = 0,
    where: str = "model",
) -> Iterator[str]:  # fmt: skip
    """The prompt, then each sampled token's text as it is made (recurrent mode: one state, one token at a time).

    Byte models' output is decoded incrementally: a character split across tokens comes out once it is whole,
    invalid UTF-8 as U+FFFD. Memory is constant in ``max_new_tokens``.
    """
    from strandline.data.tokenizers import get_tokenizer

    _check_options(max_new_tokens, temperature, top_k, seed)
    try:
        tok = get_tokenizer(lm.meta.get("tokenizer") or "dna")
    except ValueError as e:
        raise UserInputError(f"{where}: {e}") from None
    if lm.config.vocab_size < tok.vocab_size:
        raise UserInputError(f"{where}: vocab_size {lm.config.vocab_size} is too small for the {tok.kind!r} tokenizer")
    raw = prompt.encode("utf-8", "surrogateescape")  # a shell argument of invalid UTF-8 keeps its bytes
    try:
        ids = [tok.bos_id, *tok.encode(raw if tok.kind == "bytes" else prompt).tolist()]
    except ValueError as e:
        raise UserInputError(f"prompt: {e}") from None
    banned = torch.ones(lm.config.vocab_size, dtype=torch.bool)
    banned[list(tok.sample_ids)] = False
    g = torch.Generator().manual_seed(seed)
    decode = codecs.getincrementaldecoder("utf-8")("replace").decode  # a character split across tokens: once whole
    yield decode(raw)
    with torch.inference_mode():
        logits, state = lm(torch.tensor([ids]))
        logits = logits[:, -1]
        for _ in range(max_new_tokens):
            logits = logits.float().masked_fill(banned, float("-inf")) / temperature
            if top_k:
                kth = logits.topk(min(top_k, len(tok.sample_ids))).values[:, -1:]
                logits = logits.masked_fill(logits < kth, float("-inf"))
            nxt = torch.multinomial(logits.softmax(-1), 1, generator=g)[:, 0]
            yield decode(bytes([int(nxt)]) if tok.kind == "bytes" else tok.decode([int(nxt)]).encode())
            logits, state = lm.step(nxt, state)
    yield decode(b"", final=True)


def _emit(text: str) -> None:
    if text:
        sys.stdout.write(text)
        sys.stdout.flush()
