"""``strandline summarize MODEL DOC|- [-o OUT.jsonl] [--every N] [--budget WORDS]``.

Reads the document once, in pieces, through the LM in its recurrent (chunk-recurrent) form; keeps the
best sentences under the word budget as a running summary; prints an update every N sentences and the
final summary. With ``-o OUT.jsonl`` the final summary is written as one JSON object per chosen sentence
(document order) with its character offsets ``[start, end)`` into the decoded document; the file is
written under a temporary name and renamed when complete. Memory does not grow with the document.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

from app.errors import UserError, register_user_error
from data.documents import DocumentError, iter_text

register_user_error(DocumentError)


def summarize(
    model: str,
    doc: str,
    output: str | None = None,
    every: int = 0,
    budget: int = 120,
    piece_kb: int = 64,
    threads: int = 1,
    progress: bool = True,
) -> int:
    """Summarize a document incrementally with a trained summarizer.

    Args:
        model: summarizer directory (LM + salience head), e.g. data/models/summarizer.
        doc: UTF-8 text file, or '-' for standard input.
        output: write the final summary as JSONL here (one chosen sentence per line, with character offsets);
            '-' writes JSONL to stdout; None prints the summary as text.
        every: print the running summary every N sentences (0: only the final one).
        budget: maximum words in the summary.
        piece_kb: kilobytes read at a time (the result does not depend on it).
        threads: torch CPU threads (1 is fastest on small shared machines).
        progress: show a progress bar on stderr (only when it is a terminal).

    Returns:
        0 on success.
    """
    import torch
    from tqdm import tqdm

    from tasks.summarize import load_summarizer

    if budget < 1:
        raise UserError(f"--budget must be at least 1 word, got {budget}")
    if every < 0:
        raise UserError(f"--every must be >= 0, got {every}")
    torch.set_num_threads(max(1, threads))
    summarizer = load_summarizer(model)
    total = None if doc == "-" else _size(doc)
    bar = tqdm(total=total, unit="B", unit_scale=True, desc="summarize", disable=None if progress else True)
    pieces = _counted(iter_text(doc, piece_kb * 1024), bar)
    try:
        for update in summarizer.stream(pieces, budget=budget, every=every):
            if not update.final:
                bar.clear()
                print(f"--- after {update.sentences_read} sentences ({update.chars_read} chars) ---")
                print(update.text(), flush=True)
                continue
            bar.close()
            _write_final(update, output)
    except DocumentError as e:
        raise UserError(str(e)) from None
    finally:
        bar.close()
    return 0


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError as e:
        raise UserError(f"cannot read {path}: {e.strerror or e}") from None


def _counted(pieces, bar):
    for piece in pieces:
        bar.update(len(piece.encode("utf-8")))
        yield piece


def summary_records(update) -> list[dict]:
    """The chosen sentences as JSON-ready dicts, in document order."""
    return [
        {
            "index": c.sentence.index,
            "start": c.sentence.start,
            "end": c.sentence.end,
            "paragraph": c.sentence.paragraph,
            "score": round(float(c.score), 5),
            "words": c.sentence.n_words,
            "text": c.sentence.clean,
        }
        for c in update.summary
    ]


def _write_final(update, output: str | None) -> None:
    if output is None:
        if update.summary:
            print(
                f"=== summary ({sum(c.sentence.n_words for c in update.summary)} words, "
                f"{len(update.summary)} of {update.sentences_read} sentences) ==="
            )
        print(update.text(), flush=True)
        return
    lines = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in summary_records(update))
    if output == "-":
        sys.stdout.write(lines)
        sys.stdout.flush()
        return
    out = Path(output)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(lines)
        os.replace(tmp, out)  # atomic: a reader never sees a partial summary under the final name
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
