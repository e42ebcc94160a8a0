"""Reading a stream with bounded memory: what a model needs before a scan, a summary or a generation.

A linear (RNN) model's state has a constant size. A softmax model without a window keeps every token read in
its KV cache: memory and time per token grow with the stream without bound (a bacterial genome filled 16 GB).
``bound_memory`` gives such a model a sliding window instead (``ModelConfig.window``: each query sees its
last W keys, the cache holds W tokens), with W its training context, recorded as ``training.context`` in its
``config.json`` by ``strandline export``, or the ``window`` the caller passes. A model that was never read
beyond W tokens at training loses nothing it had learned; ``strandline convert`` makes an RNN of it instead.
"""

from __future__ import annotations

from strandline.errors import UserInputError


class UnboundedModelError(UserInputError):
    """A softmax model whose window cannot be chosen: its training context is not recorded and none was given."""


def bound_memory(model, window: int | None = None, where: str = "the model") -> str | None:
    """Give a softmax model without a window a sliding window, in place; returns the note to tell the user.

    Args:
        model: a ``LinearTransformerLM`` (its shared config is changed: every layer reads it).
        window: the window W in tokens; None: the model's training context (``meta["training"]["context"]``).
        where: the model's name in messages.

    Returns:
        None for a model whose state is already constant in size (linear, hybrid, a softmax with a window).

    Raises:
        UnboundedModelError: a softmax model with no window, no recorded context and no ``window`` given.
    """
    cfg = model.config
    if cfg.attention != "softmax" or cfg.window:
        return None
    context = window or (getattr(model, "meta", None) or {}).get("training", {}).get("context")
    if not isinstance(context, int) or context < 1:
        raise UnboundedModelError(
            f"{where}: a softmax model's KV cache grows with the stream, and its training context is not recorded; "
            "make an RNN of it with `strandline convert`, or re-export it from its checkpoint with `strandline export`"
        )
    cfg.window = context
    return (f"{where} is a softmax model: it reads with a sliding window of {context:,} tokens (its training "
            "context), so memory stays flat; `strandline convert` makes an RNN of it")  # fmt: skip
