"""PDF documents: ``strandline summarize`` reads a PDF file's text layer page by page (pypdf, the pdf extra)."""

import json
import sys

import pytest

from strandline.data.documents import DocumentError, PdfText, is_pdf


def _escape(line: str) -> str:
    return line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


def make_pdf(pages: list[list[str]]) -> bytes:
    """A valid PDF 1.4 with one Helvetica text line per entry of each page (an empty page has no text)."""
    n = len(pages)
    objs = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        f"<< /Type /Pages /Kids [{' '.join(f'{4 + 2 * i} 0 R' for i in range(n))}] /Count {n} >>".encode(),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    for i, lines in enumerate(pages):
        ops = " ".join(f"({_escape(line)}) Tj T*" for line in lines)
        stream = f"BT /F1 10 Tf 12 TL 72 740 Td {ops} ET" if lines else ""
        objs.append(f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >> "
                    f"/Contents {5 + 2 * i} 0 R >>".encode())  # fmt: skip
        objs.append(f"<< /Length {len(stream)} >>\nstream\n{stream}\nendstream".encode())
    out, offsets = b"%PDF-1.4\n", []
    for i, obj in enumerate(objs, 1):
        offsets.append(len(out))
        out += f"{i} 0 obj\n".encode() + obj + b"\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objs) + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{o:010d} 00000 n \n".encode() for o in offsets)
    return out + f"trailer\n<< /Size {len(objs) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()


PAGE_1 = ["The Frobnicator Manual", "Contents . . . 3", "Index ........ iv",
          "The frobnicator reads genome files in constant memory and writes per-base tracks for every",
          "record it finds, with a progress bar on long work and a clear one-line error for bad input.",
          "It was written for long sequences, and its man-", "agement of state is exact."]  # fmt: skip
PAGE_2 = ["Chapter 2: Usage", "2.1 Reading a genome from a file or from standard input", "The scanner keeps a fixed state whatever the length of the genome it reads.",
          "Users run it on whole assemblies from a file or from standard input."]  # fmt: skip


def test_pdf_text_page_by_page(tmp_path):
    path = tmp_path / "manual.pdf"
    path.write_bytes(make_pdf([PAGE_1, [], PAGE_2]))
    assert is_pdf(path) and not is_pdf("-") and not is_pdf(tmp_path / "missing.pdf")
    pdf = PdfText(path)
    pages = list(pdf)
    assert len(pdf) == 3 and len(pages) == 2  # the empty page gives nothing
    first = pages[0]
    assert "management of state" in first  # a word hyphenated at a line's end is joined
    assert ". . ." not in first and ".." not in first and "\n\nContents\n\nIndex\n\n" in first  # no dot leaders
    assert first.startswith("The Frobnicator Manual\n\n")  # a heading is its own paragraph
    assert "\n\nChapter 2: Usage\n\n2.1 Reading a genome from a file or from standard input\n\nThe" in "\n\n" + pages[1]
    assert "every\nrecord it finds" in first  # a long wrapped line still continues its sentence


def test_summarize_reads_a_pdf(tmp_path, capsys):
    from strandline.app.cli import main

    path = tmp_path / "manual.pdf"
    path.write_bytes(make_pdf([PAGE_1, PAGE_2]))
    out = tmp_path / "s.jsonl"
    assert main(["summarize", "summarizer", str(path), "--sentences", "2", "-o", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 2 and all(r["text"].endswith(".") for r in rows)
    assert not any("Contents" in r["text"] or "Chapter 2" in r["text"] for r in rows)


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (b"%PDF-1.4\n" + b"\x00garbage" * 50, "not a readable PDF"),
        (None, "without a text layer"),  # pages, but no text on any
    ],
)
def test_bad_pdfs_get_one_line(tmp_path, capsys, data, words):
    from strandline.app.cli import main

    path = tmp_path / "bad.pdf"
    path.write_bytes(make_pdf([[], []]) if data is None else data)
    out = tmp_path / "s.jsonl"
    assert main(["summarize", "summarizer", str(path), "-o", str(out)]) != 0
    err = capsys.readouterr().err.strip()
    assert words in err and len(err.splitlines()) == 1 and "Traceback" not in err
    assert not out.exists()


def test_markup_contradicting_a_pdf_is_one_line(tmp_path, capsys):
    from strandline.app.cli import main

    path = tmp_path / "m.pdf"
    path.write_bytes(make_pdf([PAGE_1]))
    assert main(["summarize", "summarizer", str(path), "--markup", "html"]) == 2
    err = capsys.readouterr().err.strip()
    assert "is a PDF" in err and len(err.splitlines()) == 1


def test_without_pypdf_the_error_says_how_to_install_it(tmp_path, monkeypatch):
    path = tmp_path / "m.pdf"
    path.write_bytes(make_pdf([PAGE_1]))
    monkeypatch.setitem(sys.modules, "pypdf", None)  # import fails
    with pytest.raises(DocumentError, match=r"strandline\[pdf\].*pdftotext"):
        PdfText(path)


def test_a_pdf_on_stdin_is_named(monkeypatch, capsys):
    import io

    from strandline.app.cli import main

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(make_pdf([PAGE_1]))))
    assert main(["summarize", "summarizer", "-"]) != 0
    assert "a PDF file, not text" in capsys.readouterr().err


def test_an_encrypted_pdf_is_named(tmp_path):
    import io

    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter()
    for page in PdfReader(io.BytesIO(make_pdf([PAGE_1]))).pages:
        writer.add_page(page)
    writer.encrypt(user_password="secret", algorithm="RC4-128")  # pure Python: no cryptography package needed
    path = tmp_path / "locked.pdf"
    with open(path, "wb") as f:
        writer.write(f)
    with pytest.raises(DocumentError, match="an encrypted PDF; decrypt it first"):
        PdfText(path)
    open_one = tmp_path / "open.pdf"  # encrypted with an empty user password: readable as it is
    writer.encrypt(user_password="", algorithm="RC4-128")
    with open(open_one, "wb") as f:
        writer.write(f)
    assert "constant memory" in "".join(PdfText(open_one))


def test_a_gzipped_pdf_is_read(tmp_path, capsys):
    import gzip

    from strandline.app.cli import main

    path = tmp_path / "manual.pdf.gz"
    path.write_bytes(gzip.compress(make_pdf([PAGE_1, PAGE_2])))
    assert is_pdf(path) and "".join(PdfText(path)) == "".join(PdfText(_plain(tmp_path)))
    assert main(["summarize", "summarizer", str(path), "--sentences", "1"]) == 0
    out = capsys.readouterr().out
    assert "=== summary" in out and "1 of" in out


def _plain(tmp_path):
    p = tmp_path / "plain.pdf"
    p.write_bytes(make_pdf([PAGE_1, PAGE_2]))
    return p
