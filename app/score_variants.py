"""``strandline score-variants``: parse, call the engine (``strandline.tasks.scan.variants``), report.

The options are the fields of ``VariantArgs``, which the engine takes too; the engine raises ``UserInputError``
subclasses for user problems, which the CLI prints as one line (exit 2). This wrapper adds the last line on stderr:
what was written, and how many ALT alleles were skipped and why.
"""

from __future__ import annotations

import sys

from strandline.tasks.scan.variants import VariantArgs, VariantSummary


def score_variants(args: VariantArgs) -> VariantSummary:
    """Score the SNVs and short indels of a VCF with a DNA model: the log-likelihood ratio of ALT vs REF, in bits.

    Args:
        args: the options (``strandline.tasks.scan.variants.VariantArgs``: each field is an option).

    Returns:
        The counts of what was written.
    """
    from strandline.tasks.scan.variants import score_variants as run
    from strandline.tasks.scan.variants import summary_line

    summary = run(args)
    print(summary_line(summary), file=sys.stderr)
    return summary
