"""The public API: ``load``, ``score``, ``summarize``, ``generate`` (re-exported by ``strandline``).

Each call is the library form of a command and gives the same numbers: ``score`` is ``strandline scan``'s
``logprob`` track, ``summarize`` the summary ``strandline summarize`` prints, ``generate`` the text
``strandline generate`` prints for the same seed.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from strandline.errors import UserInputError
from strandline.resources import resolve

if TYPE_CHECKING:
    from strandline.models.lm import LinearTransformerLM
    from strandline.tasks.summarize import Summarizer


def load(path: str | Path) -> LinearTransformerLM | Summarizer:
    """Load a model: a model directory, a Lightning ``.ckpt``, or the name of a shipped model.

    Args:
        path: e.g. ``"dna-corpus-tbptt"`` or ``"summarizer"`` (shipped; see ``strandline.shipped_models()``),
            ``"out/model"`` (written by ``strandline export``) or ``"runs/x/last.ckpt"``.

    Returns:
        The LM (``LinearTransformerLM``, in eval mode) or, for a directory that also holds a salience head,
        a ``Summarizer`` (its ``.model`` is the LM).

    Raises:
        ModelLoadError: not a model, damaged, or of an unknown format (one line).
    """
    path = Path(resolve(str(path)))
    if (path / "salience.json").is_file():
        from strandline.tasks.summarize import load_summarizer

        return load_summarizer(path)
    from strandline.models import load as load_lm

    return load_lm(path).eval()


def _lm(model) -> LinearTransformerLM:
    from strandline.models.lm import LinearTransformerLM

    if isinstance(model, str | Path):
        model = load(model)
    model = getattr(model, "model", model)  # a Summarizer's LM
    if not isinstance(model, LinearTransformerLM):
        raise UserInputError(f"expected a model (strandline.load(...)), got {type(model).__name__}")
    return model


def score(
    model, sequence_or_fasta: str | Path | bytes, chunk: int = 8192, state_dtype: str = "float64"
) -> np.ndarray | dict[str, np.ndarray]:
    """Per-base log2 P(observed base | the bases before it in its record): the numbers of scan's logprob track.

    Args:
        model: a DNA model (``strandline.load(...)``) or a path / shipped name.
        sequence_or_fasta: bases (``str`` or ``bytes``: ACGTN, IUPAC codes, either case), or the path of a
            FASTA / GenBank / EMBL file (plain or gzip/xz/bzip2): a ``Path``, or a ``str`` naming an existing file.
        chunk: bases per chunked call (the state is carried across calls, as in a scan).
        state_dtype: dtype the carried state accumulates in ('float64', as ``strandline scan``).

    Returns:
        For a sequence, a float32 array [n]; for a file, ``{record name: array}`` in file order. N and other
        non-ACGT bases are NaN (a gap in the track). Memory: the outputs plus one chunk.
    """
    from strandline.data.fasta import iter_records
    from strandline.data.tokenizers import BOS, get_tokenizer
    from strandline.tasks.scan.job import score_chunk

    lm = _lm(model)
    if (lm.meta.get("tokenizer") or "dna") != "dna":
        raise UserInputError(f"a {lm.meta.get('tokenizer')!r} model cannot score DNA (needs tokenizer 'dna')")
    if not (isinstance(chunk, int) and chunk >= 1):
        raise UserInputError(f"chunk must be an integer >= 1, got {chunk!r}")
    kept, lm.config.state_dtype = lm.config.state_dtype, state_dtype  # layers read it when they build a state
    try:
        if _is_file(sequence_or_fasta):
            out: dict[str, list[np.ndarray]] = {}
            for ch in iter_records(sequence_or_fasta, chunk_size=chunk):
                if ch.offset == 0:
                    state, carry = None, BOS
                    out[ch.name] = []
                s, state, carry = score_chunk(lm, ch.ids, state, carry)
                out[ch.name].append(s[:, 0])
            return {k: np.concatenate(v) if v else np.zeros(0, np.float32) for k, v in out.items()}
        try:
            ids = get_tokenizer("dna").encode(sequence_or_fasta)
        except ValueError as e:
            raise UserInputError(f"sequence: {e} (or give the path of an existing FASTA file)") from None
        parts, state, carry = [], None, BOS
        for i in range(0, len(ids), chunk):
            s, state, carry = score_chunk(lm, ids[i : i + chunk], state, carry)
            parts.append(s[:, 0])
        return np.concatenate(parts) if parts else np.zeros(0, np.float32)
    finally:
        lm.config.state_dtype = kept


def _is_file(x) -> bool:
    """A ``Path``, or a ``str`` naming an existing file (a sequence too long for a file name is a sequence)."""
    if isinstance(x, Path):
        return True
    try:
        return isinstance(x, str) and Path(x).is_file()
    except (OSError, ValueError):  # ENAMETOOLONG; a NUL in the string
        return False


def summarize(model, text: str | Path, budget: int = 120, standalone: bool = False) -> str:
    """The extractive summary of ``text`` (one chosen sentence per line, in document order).

    Args:
        model: a summarizer (``strandline.load("summarizer")``) or its path / shipped name.
        text: the document as a string, or a ``pathlib.Path`` to read it from as ``strandline summarize`` does
            (streamed; Markdown, HTML and reST by the name; gzip, xz or bzip2; a PDF's text layer).
        budget: maximum words in the summary.
        standalone: never choose a sentence that points back to the one before, only points elsewhere or belongs
            to a list item (``--standalone``).

    Returns:
        The summary, as ``strandline summarize`` prints it; '' when no sentence qualifies.
    """
    from strandline.tasks.summarize import Summarizer

    summ = load(model) if isinstance(model, str | Path) else model
    if not isinstance(summ, Summarizer):
        raise UserInputError("summarize needs a summarizer (a model directory with a salience head)")
    if not (isinstance(budget, int) and budget >= 1):
        raise UserInputError(f"budget must be an integer >= 1 word, got {budget!r}")
    if isinstance(text, Path):
        from strandline.data.documents import PdfText, is_pdf, iter_text
        from strandline.data.markup import rendered

        pieces = PdfText(text) if is_pdf(text) else rendered(iter_text(text), str(text))
        *_, final = summ.stream(pieces, budget, standalone=standalone)
        return final.text()
    return summ.summarize(text, budget, standalone).text()


def generate(
    model, prompt: str = "", max_new_tokens: int = 200, temperature: float = 1.0, top_k: int | None = None,
    seed: int = 0,
) -> str:  # fmt: skip
    """Continue ``prompt`` in recurrent mode (constant memory per token); returns prompt + continuation.

    Args:
        model: a model (``strandline.load(...)``) or its path / shipped name.
        prompt: bases (DNA models) or text (byte models); '' starts from BOS.
        max_new_tokens: tokens to sample.
        temperature: softmax temperature (> 0).
        top_k: sample among the k most likely tokens (None: all).
        seed: random seed; the same seed gives the same text as ``strandline generate``.
    """
    from strandline.app.generate import iter_text

    return "".join(iter_text(_lm(model), prompt, max_new_tokens, temperature, top_k, seed))
