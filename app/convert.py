"""``strandline convert SOFTMAX_MODEL OUT_DIR --method t2r|hedgehog|lolcats --data ...``: train softmax, run as an RNN.

A Lightning run of ``strandline.tasks.convert.ConvertTask`` (checkpoints every ``ckpt_every`` steps to
``RUN_DIR/checkpoints/last.ckpt``, CSV logs in ``RUN_DIR/logs``, a progress bar), then the student with any
LoRA merged is written as an ordinary linear model directory that ``scan``, ``summarize``, ``generate`` and
``models.load`` use unchanged. ``--resume`` continues a killed run from its last checkpoint.

    strandline convert my-softmax-model my-rnn --config configs/convert/dna-tiny.yaml --method hedgehog

Everything that can be refused is refused before any data is read or anything is written: a model that is not
a softmax model, a data module whose tokenizer differs from the model's, an OUT_DIR that exists and is not
empty, a RUN_DIR that holds another run (without ``--resume``) or none (with it). The options are the fields of
``ConvertArgs`` (``strandline.tasks.convert_args``), which ``run_conversion`` takes too.
"""

from __future__ import annotations

from strandline.tasks.convert_args import ConvertArgs


def convert(args: ConvertArgs) -> str:
    """Convert a softmax model into a linear-attention (RNN) model directory.

    Args:
        args: the options (``strandline.tasks.convert_args.ConvertArgs``: each field is an option of
            ``strandline convert``).

    Returns:
        The path of the written model directory.
    """
    from pathlib import Path

    from strandline.tasks.convert import run_conversion

    data = args.check()
    student = run_conversion(args, data)
    out = Path(args.out_dir)
    student.save(out)
    tokenizer = student.meta.get("tokenizer")
    print(f"wrote {out} ({args.method}, {student.num_params():,} parameters, tokenizer {tokenizer!r})")
    return str(out)
