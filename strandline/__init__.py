"""Strandline: causal linear transformers as RNNs, for genomes and long documents.

The public API, one import for a notebook::

    import strandline
    lm = strandline.load("dna-corpus-tbptt")           # a shipped model by name, or any model directory / .ckpt
    logp = strandline.score(lm, "ACGTACGT")            # per-base log2 P(observed base), numpy
    tracks = strandline.score(lm, "genome.fa")         # {record name: array} for a FASTA/GenBank/EMBL file
    summ = strandline.load("summarizer")
    print(strandline.summarize(summ, open("paper.txt").read(), budget=120))
    print(strandline.generate(lm, "ACGT", max_new_tokens=50))

The packages: ``strandline.models`` (pure torch: the op in three modes, layers, the LM, save/load),
``strandline.data`` (tokenizers, readers, DataModules, track writers), ``strandline.tasks`` (Lightning tasks,
the scan and summarize engines), ``strandline.app`` (the ``strandline`` command). Names are imported on first
use, so ``import strandline`` is cheap and ``strandline.errors`` needs no torch.
"""

from __future__ import annotations

from importlib import import_module

__version__ = "0.1.0"

_API = {
    "load": "strandline.api",
    "score": "strandline.api",
    "summarize": "strandline.api",
    "generate": "strandline.api",
    "shipped_path": "strandline.resources",
    "shipped_models": "strandline.resources",
}
__all__ = ["__version__", *_API]


def __getattr__(name: str):
    if name in _API:
        value = getattr(import_module(_API[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'strandline' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_API))
