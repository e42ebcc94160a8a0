"""``strandline export CKPT OUT_DIR``: a Lightning checkpoint -> a model directory (config.json + safetensors)."""

from __future__ import annotations

from pathlib import Path

from strandline.errors import UserInputError


def export(ckpt: str, out_dir: str, overwrite: bool = False) -> str:
    """Convert a training checkpoint into a model directory that ``models.load`` and ``scan`` read.

    Nothing but the model's two files is ever written: OUT_DIR must be new or empty; an existing model
    directory is replaced only with ``--overwrite``, and then whole (the new directory is swapped in once
    complete, so no file of the old model, e.g. a summarizer's salience head, is left beside the new one).
    Any other non-empty directory (``.``, a run folder holding last.ckpt) is refused before anything is read.

    Args:
        ckpt: a ``.ckpt`` written by ``strandline fit`` (e.g. ``runs/dna-tiny/checkpoints/last.ckpt``),
            or an existing model directory (re-saved, e.g. to normalise it).
        out_dir: the model directory to write.
        overwrite: replace OUT_DIR if it is an existing model directory.

    Returns:
        The path of the written directory.
    """
    from strandline.models import load
    from strandline.models.persist.modeldir import check_model_dir_target

    src, out = Path(ckpt), Path(out_dir)
    if out.exists() and src.exists() and out.resolve() == src.resolve():
        raise UserInputError(f"{out_dir}: the output must differ from the input")
    check_model_dir_target(out, overwrite)  # refuse before the (possibly large) checkpoint is read
    model = load(src)  # ModelLoadError (a user error) for anything that is not a Strandline model
    training = dict(model.meta.get("training") or {})
    training.setdefault("source", str(src))
    model.save(out, tokenizer=model.meta.get("tokenizer"), training=training, overwrite=overwrite)
    print(f"wrote {out} ({model.num_params():,} parameters, tokenizer {model.meta.get('tokenizer')!r})")
    return str(out)
