"""``strandline export CKPT OUT_DIR``: a Lightning checkpoint -> a model directory (config.json + safetensors)."""

from __future__ import annotations

from pathlib import Path

from app.errors import UserError


def export(ckpt: str, out_dir: str) -> str:
    """Convert a training checkpoint into a model directory that ``models.load`` and ``scan`` read.

    Args:
        ckpt: a ``.ckpt`` written by ``strandline fit`` (e.g. ``runs/dna-tiny/checkpoints/last.ckpt``),
            or an existing model directory (re-saved, e.g. to normalise it).
        out_dir: the model directory to write; replaced atomically if it exists.

    Returns:
        The path of the written directory.
    """
    from models import load

    src, out = Path(ckpt), Path(out_dir)
    if out.exists() and not out.is_dir():
        raise UserError(f"{out_dir}: exists and is not a directory")
    if out.resolve() == src.resolve():
        raise UserError(f"{out_dir}: the output must differ from the input")
    model = load(src)  # ModelLoadError (a user error) for anything that is not a Strandline model
    training = dict(model.meta.get("training") or {})
    training.setdefault("source", str(src))
    model.save(out, tokenizer=model.meta.get("tokenizer"), training=training)
    print(f"wrote {out} ({model.num_params():,} parameters, tokenizer {model.meta.get('tokenizer')!r})")
    return str(out)
