"""``strandline build-summarizer --recipe RECIPE.json OUT_DIR``: fit, select and save a summarizer directory.

The work is ``strandline.tasks.summarize.build.build_summarizer`` (fit the salience head on the recipe's train
splits, select its setting on the val splits by ROUGE-2, save the LM and the head); this only parses and reports.
The data come from ``python -m strandline.data.fetch_summaries`` (``data/cache/summaries``, not in the repo).
"""

from __future__ import annotations

import sys


def build_summarizer(
    out_dir: str,
    recipe: str = "configs/summarize/summarizer.json",
    lm: str | None = None,
    data: str | None = None,
    cache: str = "runs/summarize",
    overwrite: bool = False,
) -> None:
    """Build a summarizer directory from a recipe: fit the salience head, select it on val ROUGE-2, save it.

    Args:
        out_dir: the summarizer directory to write (new or empty; an existing one only with --overwrite).
        recipe: the recipe (JSON): byte LM, domains, budget range, selection rule and grid.
        lm: the byte LM, a model directory or .ckpt (default: the recipe's).
        data: the folder of DOMAIN.jsonl pairs (default: where ``python -m strandline.data.fetch_summaries`` writes).
        cache: the LM-output cache folder (per document, keyed by the LM's weights).
        overwrite: replace an existing summarizer directory at OUT_DIR.
    """
    import torch

    from strandline.data.fetch_summaries import DEFAULT_OUT
    from strandline.tasks.summarize.build import build_summarizer as build

    torch.set_num_threads(1)  # measured faster than 2 threads on a shared 2-core machine
    facts = build(recipe, out_dir, lm=lm, data_dir=data or DEFAULT_OUT, cache=cache, overwrite=overwrite)
    chosen = ", ".join(f"{k} {v}" for k, v in facts["selected"].items())
    score = ", ".join(f"{dom} {v:.2f}" for dom, v in facts["selection_rouge2"].items())
    print(f"wrote {out_dir} (selected {chosen} on {facts['selection']}; ROUGE-2 x100 there: {score})", file=sys.stderr)
