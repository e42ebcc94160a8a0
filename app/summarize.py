"""``strandline summarize MODEL DOC|- [-o OUT.jsonl] [--every N] [--budget WORDS | --ratio R | --sentences N]
[--standalone]``.

Reads the document once, in pieces, through the LM in its recurrent (chunk-recurrent) form; keeps the
best prose sentences under the word budget as a running summary; prints an update every N sentences and the
final summary. With ``-o OUT.jsonl`` the final summary is written as one JSON object per chosen sentence
(document order) with its character offsets ``[start, end)`` into the decoded document; the file is
written under a temporary name and renamed when complete. Memory does not grow with the document.

Exit status: 0 with a summary; 1 when the document has no sentence that qualifies (prose of 4 to BUDGET
words: e.g. ``Hi.``, a table, one endless line); the reason goes to stderr and no output file is written;
2 for bad input or options (one line on stderr).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Literal

from strandline.app.errors import STDOUT
from strandline.errors import UserInputError
from strandline.files import atomic_write_text, check_output, naming_write_errors

NO_SUMMARY = 1  # exit status: the document was read but no sentence qualifies


class SummarizeOptionError(UserInputError):
    """A bad option value of ``strandline summarize``."""


def summarize(
    model: str,
    doc: str,
    output: str | None = None,
    every: int = 0,
    budget: int | None = None,
    ratio: float | None = None,
    sentences: int | None = None,
    standalone: bool = False,
    markup: Literal["auto", "text", "markdown", "html", "rst", "vimhelp"] = "auto",
    piece_kb: int = 64,
    threads: int = 1,
    progress: bool = True,
) -> int:
    """Summarize a document incrementally with a trained summarizer.

    Args:
        model: summarizer directory (LM + salience head), e.g. data/models/summarizer.
        doc: UTF-8 text file, or '-' for standard input; a PDF file is read through its text layer (the ``pdf``
            extra: pypdf), page by page, and its JSONL offsets count that text. A gzip, xz or bzip2 file is
            read decompressed.
        output: write the final summary as JSONL here (one chosen sentence per line, with character offsets);
            '-' writes JSONL to stdout; None prints the summary as text.
        every: print the running summary every N sentences (0: only the final one). From stdin, the sentences
            are read as they arrive, so a growing stream (``tail -f``) gets its running summaries as it grows.
        budget: maximum words in the summary (default 120 when neither --ratio nor --sentences is given).
        ratio: the summary's share of the document's words, 0 < R <= 1 (of the words read so far, for --every).
        sentences: the number of sentences in the summary (1 to 64, the running pool of candidates).
        standalone: never choose a sentence that does not read on its own: one that opens by pointing back to
            the one before ("However, ...", "Otherwise, ...", "For example, ...") or only points elsewhere ("See
            CONTRIBUTING.md for details."), or a sentence of a list item (a step that needs its list) (ROUGE costs a little: see
            docs/summarizing.md).
        markup: how to read the document: 'auto' (Markdown, HTML or reST by the file's extension, e.g. x.md,
            x.html, x.rst.txt; HTML also by its first tag, Vim help by its first line), or one of them; 'text'
            reads it as it is. Headings become paragraphs of their own, list items too (with a '- ' marker); code,
            scripts and tables are left out; JSONL offsets count the text after markup is removed.
        piece_kb: kilobytes read at a time (the result does not depend on it).
        threads: torch CPU threads (1 is fastest on small shared machines).
        progress: show progress on stderr: a bar on a terminal, else a plain line every 30 seconds.

    Returns:
        0 with a summary, 1 when no sentence of the document qualifies (said on stderr).
    """
    import torch

    from strandline.data.documents import PdfText, is_pdf, iter_text
    from strandline.data.markup import rendered
    from strandline.progress import progress as show_progress
    from strandline.tasks.summarize import load_summarizer

    budget = _check_options(budget, ratio, sentences, every, piece_kb, threads)
    if output not in (None, "-"):
        model_files = [p for p in Path(model).glob("*") if p.is_file()] if Path(model).is_dir() else []
        check_output(output, [doc, *model_files], what="summary output")
    pdf = PdfText(doc) if is_pdf(doc) else None  # its text layer, page by page (a damaged PDF fails here)
    if pdf and markup not in ("auto", "text"):
        raise SummarizeOptionError(
            f"--markup {markup}: {doc} is a PDF, read through its text layer (leave --markup out)"
        )
    total = len(pdf) if pdf else _text_total(doc)  # a missing document is reported here, before the model loads
    torch.set_num_threads(threads)
    summarizer = load_summarizer(model)
    log = sys.stderr if output == "-" else sys.stdout  # running summaries never mix into JSONL on stdout
    bar = show_progress("summarize", total, "pages" if pdf else "bytes", enabled=progress)
    pieces = _pages(pdf, bar) if pdf else rendered(_counted(iter_text(doc, piece_kb * 1024), bar), doc, markup)
    try:
        live = doc == "-" and every > 0  # a pipe may grow while it is read: summarize what has arrived
        for update in summarizer.stream(
            pieces, budget=budget, every=every, ratio=ratio, sentences=sentences, live=live, standalone=standalone
        ):
            if not update.final:
                bar.clear()
                head = f"--- after {update.sentences_read} sentences ({update.chars_read} chars) ---"
                _say(f"{head}\n{update.text() or '(no sentence qualifies yet)'}\n", log)
                continue
            bar.close()
            if not update.summary:
                print(f"strandline summarize: no summary: {_why_none(update, budget)}", file=sys.stderr)
                return NO_SUMMARY
            _write_final(update, output, budget if ratio is None and sentences is None else None)
    finally:
        bar.close()
    return 0


POOL = 64  # the running pool of candidate sentences (SummaryBuffer's capacity): the most --sentences can ask


def _check_options(
    budget: int | None, ratio: float | None, sentences: int | None, every: int, piece_kb: int, threads: int
) -> int:
    """Refuse bad or contradicting options (one line); returns the word budget (120 when no length is given)."""
    given = [f"--{n}" for n, v in (("budget", budget), ("ratio", ratio), ("sentences", sentences)) if v is not None]
    if len(given) > 1:
        raise SummarizeOptionError(f"{' and '.join(given)} both set the summary's length: give one of them")
    if ratio is not None and not 0 < ratio <= 1:
        raise SummarizeOptionError(f"--ratio must be a share of the document's words, 0 < R <= 1, got {ratio}")
    if sentences is not None and not 1 <= sentences <= POOL:
        raise SummarizeOptionError(f"--sentences must be from 1 to {POOL} (the pool of candidates), got {sentences}")
    budget = 120 if budget is None else budget
    for name, value, least in (("budget", budget, 1), ("every", every, 0), ("piece_kb", piece_kb, 1)):
        if value < least:
            raise SummarizeOptionError(f"--{name} must be at least {least}, got {value}")
    if threads < 1:
        raise SummarizeOptionError(f"--threads must be at least 1, got {threads}")
    return budget


def _why_none(update, budget: int) -> str:
    n, prose = update.sentences_read, update.prose_read
    if prose:
        return f"the {prose} prose sentence(s) of {n} are all longer than the budget ({budget} words)"
    return (
        f"none of its {n} sentence(s) is prose of at least 4 words ending in . ! ? (or 。！？); "
        "headings, code, markup, tables and fragments are never summary sentences"
    )


def _text_total(doc: str) -> int | None:
    """The progress bar's total for a text document: its bytes, or None where they are unknown (stdin, a pipe,
    compressed data)."""
    from strandline.data.documents import compression_of, is_regular_file

    if doc == "-":
        return None
    size = _size(doc)  # a missing document: DocumentError
    return size if is_regular_file(doc) and not compression_of(doc) else None


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError as e:
        from strandline.data.documents import DocumentError

        raise DocumentError(f"cannot read {path}: {e.strerror or e}") from None


def _counted(pieces, bar):
    for piece in pieces:
        bar.update(len(piece.encode("utf-8")))
        yield piece


def _pages(pdf, bar):
    for page in pdf:
        yield page
        bar.update(1)


def _say(text: str, stream) -> None:
    """Write and flush ``text``; a failed write (a full disk, a closed pipe) names the stream in its one line."""
    with naming_write_errors("<stderr>" if stream is sys.stderr else STDOUT):
        stream.write(text)
        stream.flush()


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


def _write_final(update, output: str | None, limit: int | None) -> None:
    """The final summary as text (``output`` None), or JSONL to stdout ('-') or a file; ``limit``: the word budget
    (None for --ratio and --sentences), said beside the words used, since a summary may stop under it."""
    words = sum(c.sentence.n_words for c in update.summary)
    size = f"{words} words" + (f" of at most {limit}" if limit else "")
    size += f", {len(update.summary)} of {update.sentences_read} sentences"
    if output is None:
        _say(f"=== summary ({size}) ===\n{update.text()}\n", sys.stdout)
        return
    lines = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in summary_records(update))
    if output == "-":
        _say(lines, sys.stdout)
        return
    atomic_write_text(output, lines)  # a reader never sees a partial summary under the final name
    print(f"strandline summarize: wrote {output} ({size})", file=sys.stderr)
