"""Markup read as the text it renders, while the document streams: HTML, Markdown, reStructuredText."""

from __future__ import annotations

import pytest

from strandline.data.markup import detect, md_inline, to_text
from strandline.tasks.summarize.prose import is_prose

MD = """# Release notes

Some **bold** text with a [link](http://x.y), ![logo](l.png) and `code`.

```python
x = 1  # never prose
```

- item one is *here*
- item two

| a | b |
|---|---|

Title two
---------
Refer to the <em>platform</em> page.
"""
RST = """.. comment for the maintainers
   that no reader sees

Sockets HOWTO
*************

.. topic:: Abstract

   Sockets are used nearly everywhere.

This uses :func:`socket.socket` and ``bind``. See `the docs <http://x>`_ [#f1]_.

Example::

    s = socket()

.. code-block:: python

   print("left out")

Back to prose.
"""
RMD = """---
title: "Frob: sorting intervals"
author: A. Author
abstract: >
  An abstract the page shows in its header only.
output: BiocStyle::html_document
---

<!-- generated from frob.org: edit that file -->

# Overview

The frob tool sorts intervals. <!-- a note to the maintainers --> It merges them [@frob2020; see @doe99, p. 3].
<!--
A paragraph left
for later.
-->
Back to prose.

```{r setup, echo=FALSE}
x <- "<!-- not a comment: code -->"
```

After the chunk.
"""
NOT_FRONT = """---

Notes begin after a rule. They say how to use it.

---
More notes.
"""
TAG = "h" + "2"  # a heading element (spelled in pieces: the word check reads h<digit> as a session tag)
HTML = ("<!DOCTYPE html><html><head><title>T</title><script>var x = 1;</script></head><body>"
        f"<{TAG}>Head</{TAG}>"
        "<p>Linear <b>attention</b> &amp; more.</p><p>It calls <code>bc</code> first.</p><pre><code>code()</code></pre><ul><li>one</li><li>two</li></ul></body></html>")  # fmt: skip


SPHINX = (f"<html><body><div class=\"related\" role=\"navigation\"><{TAG}>Navigation</{TAG}><ul><li><a href=\"genindex.html\">"
          "index</a></li></ul><div>next |</div></div>"
          f"<div class=\"body\"><{TAG}>Tutorial<a class=\"headerlink\" href=\"#t\">\u00b6</a></{TAG}>"
          "<p>The tool reads <img src=\"x.png\">files.<br>It writes tracks.</p></div>"
          "<div class=\"sphinxsidebar\"><p>Quick search</p><input type=\"text\"></div><p>The end.</p></body></html>")  # fmt: skip

RST_DEFLIST = (".. seealso::\n\n   Module :mod:`http.cookiejar`\n      HTTP cookie handling for web clients.\n\n"
               "-v, --verbose\n   Print more output\n   than usual.\n\n- A list item that\n  goes on.\n\n"
               ".. note:: This starts\n   the body.\n")  # fmt: skip


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


@pytest.mark.parametrize(
    ("kind", "doc", "want"),
    [
        ("markdown", MD, ["Release notes", "Some bold text with a link,  and code.", "- item one is here", "- item two",
                          "Title two", "Refer to the platform page."]),
        ("rst", RST, ["Sockets HOWTO", "Abstract", "Sockets are used nearly everywhere.",
                      "This uses socket.socket and bind. See the docs.", "Example:", "Back to prose."]),
        ("html", HTML, ["Head", "Linear attention & more.", "It calls bc first.", "- one", "- two"]),  # inline code kept
        ("html", SPHINX, ["Tutorial", "The tool reads files.", "It writes tracks.", "The end."]),  # no page chrome
        ("markdown", RMD, ["Frob: sorting intervals", "Overview", "The frob tool sorts intervals.  It merges them.",
                           "Back to prose.", "After the chunk."]),  # front matter but its title, comments, chunks
        ("markdown", NOT_FRONT, ["Notes begin after a rule. They say how to use it.", "More notes."]),  # a rule
    ],
)  # fmt: skip
def test_markup_becomes_the_text_a_reader_sees(kind, doc, want):
    assert _lines("".join(to_text([doc], kind))) == want


@pytest.mark.parametrize(
    ("kind", "doc"),
    [
        ("markdown", MD),
        ("markdown", RMD),
        ("markdown", NOT_FRONT),
        ("rst", RST),
        ("rst", RST_DEFLIST),
        ("html", HTML),
        ("html", SPHINX),
    ],
)
def test_the_text_does_not_depend_on_where_pieces_are_cut(kind, doc):
    whole = "".join(to_text([doc], kind))
    for step in (1, 7, 64):
        assert "".join(to_text([doc[i : i + step] for i in range(0, len(doc), step)], kind)) == whole


@pytest.mark.parametrize(
    ("line", "want"),
    [
        ('The `r Biocpkg("AnnotationHub")` package provides a client.', "The AnnotationHub package provides a client."),
        ("Packages like `r CRANpkg('reticulate')` run Python.", "Packages like reticulate run Python."),
        ('See `r BiocStyle::Githubpkg("user/frob")` too.', "See frob too."),  # GitHub links name user/package
        ("Compiled: `r date()`.", "Compiled: date()."),  # not run: its code, as a code span reads
        ("We kept `{r} nrow(x)` rows.", "We kept nrow(x) rows."),  # Quarto's inline R
        ("Never `rm -rf` it, nor `r`.", "Never rm -rf it, nor r."),  # code spans that are not inline R
        (r"Here url\_decode and url\_encode take \*args.", "Here url_decode and url_encode take *args."),  # escapes
        ("Docs are at <https://nodejs.org/api/>.", "Docs are at https://nodejs.org/api/."),  # autolinks: the address
        ("Write to <team@example.org> or <mailto:a@b.io>, not <b>x</b>.", "Write to team@example.org or mailto:a@b.io, not x."),
    ],
)  # fmt: skip
def test_inline_markup_reads_as_a_reader_sees_it(line, want):
    assert md_inline(line) == want


@pytest.mark.parametrize(
    ("line", "want"),
    [
        ("Use `asyncio` with `aiosignal`.", "Use asyncio with aiosignal."),  # the default role: a title reference
        ("Call `monkey\npatch()` first.", "Call monkey\npatch() first."),  # across a paragraph's lines
        (":func:`~os.path.join` and :class:`!Frob`.", "join and Frob."),  # Sphinx shows the last name; ! unlinked
        (":meth:`<protocol>_open` --- open.", "<protocol>_open --- open."),  # no space before '<': no target
        (":ref:`the guide <howto>` and `text`:func:.", "the guide and text."),
        ("A ``literal`` and `a link`_ and it`s.", "A literal and a link and it`s."),  # a lone backtick stays
        (r"Emacs\ -like keys and ``len``\ s.", "Emacs-like keys and lens."),  # an escaped space is removed
    ],
)  # fmt: skip
def test_rest_interpreted_text_reads_as_its_text(line, want):
    from strandline.data.markup import rst_inline

    assert rst_inline(line) == want


def test_a_sentence_with_interpreted_text_is_prose():
    from strandline.data.markup import rst_inline

    assert is_prose(rst_inline("The `frob` tool reads :func:`~genome.read` output."))  # no longer dropped as markup


def test_inline_markup_may_span_a_paragraphs_lines():
    doc = ("It is **the most powerful\nopen tool** there is. Get it from the [Python Package\nIndex](https://pypi.org)."
           "\n\n- one [a\n  link](u)\n- two\n\n```\n**not** [x](y)\n```\nAfter it.\n")  # fmt: skip
    want = "It is the most powerful\nopen tool there is. Get it from the Python Package\nIndex.\n\n- one a\n  link\n\n- two"  # items: paragraphs
    whole = "".join(to_text([doc], "markdown"))
    assert whole.strip() == want + "\n\nAfter it."  # the code block is left out, whatever it holds
    for step in (1, 5, 17):
        assert "".join(to_text([doc[i : i + step] for i in range(0, len(doc), step)], "markdown")) == whole


def test_a_long_paragraph_is_given_out_in_bounded_parts():
    from strandline.data.markup import _PARAGRAPH_LINES, _Markdown

    conv = _Markdown()
    out = conv.feed("A line of prose.\n" * (3 * _PARAGRAPH_LINES))
    assert len(conv.para) <= _PARAGRAPH_LINES and out.count("\n") >= 2 * _PARAGRAPH_LINES  # memory bounded
    assert out + conv.close() == "A line of prose.\n" * (3 * _PARAGRAPH_LINES)


def test_rest_inline_markup_may_span_a_paragraphs_lines():
    doc = ("Title\n=====\n\nThis module defines :term:`abstract base\nclasses <abstract base class>` and links to `the\n"
           "docs <https://x>`_. A frame of 2\\*2 bytes.\n\n- item with ``a\n  literal``\n- two\n")  # fmt: skip
    out = "".join(to_text([doc], "rst"))
    assert _lines(out) == ["Title", "This module defines abstract base", "classes and links to the",
                           "docs. A frame of 2*2 bytes.", "- item with a", "literal", "- two"]  # fmt: skip
    for step in (1, 5, 17):
        assert "".join(to_text([doc[i : i + step] for i in range(0, len(doc), step)], "rst")) == out


def test_pandoc_fenced_divs_keep_their_content():
    doc = ':::: {style="display: grid;"}\n::: {.column}\nThe left column.\n:::\n::: note\nA note.\n:::\n::::\n'
    assert _lines("".join(to_text([doc], "markdown"))) == ["The left column.", "A note."]


def test_an_api_reference_keeps_its_descriptions():
    doc = (".. module:: frob\n   :synopsis: Frobnicate intervals.\n\n.. function:: merge(a, b, *, strict=False)\n"
           "   :noindex:\n\n   Merge two sorted interval lists into one.\n   For example::\n\n      >>> merge([], [])\n"
           "      []\n\n   .. versionadded:: 3.2\n      The *strict* flag.\n\n"
           "   .. code-block:: python\n\n      x = 1\n\n"
           "   The result is sorted.\n\n.. class:: Frob()\n\n   A frobnicator.\n\nBack at the top.\n")  # fmt: skip
    want = ["Merge two sorted interval lists into one.", "For example:", "New in version 3.2.", "The strict flag.",
            "The result is sorted.", "A frobnicator.", "Back at the top."]  # fmt: skip
    assert _lines("".join(to_text([doc], "rst"))) == want  # signatures, options, code and examples left out


def test_a_rest_definition_lists_term_and_definition_are_blocks_of_their_own():
    from strandline.data.segment import split_sentences

    out = "".join(to_text([RST_DEFLIST], "rst"))
    assert "Module http.cookiejar:\n\nHTTP cookie handling" in out  # as HTML renders <dt> and <dd>
    assert "-v, --verbose:\n\nPrint more output\nthan usual." in out
    assert "A list item that\ngoes on." in out and "This starts\nthe body." in out  # continuations stay
    sentences = [s.clean for s in split_sentences(out)]
    assert "HTTP cookie handling for web clients." in sentences and "Module http.cookiejar:" in sentences


DEFINITIONS = {
    "html": f"<{TAG}>File menu</{TAG}>\n<dl><dt>New <b>File </b> </dt><dd><p>Create a new file editing window.</p></dd>\n"
    "<dt>Open…</dt><dd><p>Open an existing file.</p></dd>\n"
    '<dt class="sig">json.<b>dumps</b>(obj)</dt><dd><p>Serialize obj.</p></dd><dt>Save.</dt><dd>Saved.</dd></dl>\n',
    "rst": "File menu\n=========\n\nNew File\n   Create a new file editing window.\n\nOpen…\n"
    "   Open an existing file.\n\njson.dumps(obj)\n   Serialize obj.\n\nSave.\n   Saved.\n",
}


@pytest.mark.parametrize("kind", sorted(DEFINITIONS))
def test_a_definition_term_is_not_a_heading_that_opens_a_section(kind):
    """A menu entry's term over its description ("New File" / "Create a new file editing window.") read as a
    heading made every description the first sentence of a section of its own, so summaries of IDLE's help
    were lists of menu entries. A term ends with a colon, unless it ends with a sentence's punctuation."""
    from strandline.data.segment import split_sentences
    from strandline.tasks.summarize.features import heading_text

    pieces = [DEFINITIONS[kind][i : i + 7] for i in range(0, len(DEFINITIONS[kind]), 7)]  # streamed in pieces
    sentences = [s.text.strip() for s in split_sentences("".join(to_text(pieces, kind)))]
    assert sentences == ["File menu", "New File:", "Create a new file editing window.", "Open…:",
                         "Open an existing file.", "json.dumps(obj):", "Serialize obj.", "Save.", "Saved."]  # fmt: skip
    assert [s for s in sentences if heading_text(s) is not None] == ["File menu"]


def test_a_definition_term_whose_end_tag_html_leaves_out_ends_at_its_definition():
    from strandline.data.segment import split_sentences

    page = (
        "<dl><dt>New File<dd>Create a new file.<dt>Open <dt>Open Module <dd>Open a module.<dt>Exit </dl><p>Done.</p>"
        f"<dl><dt><{TAG}>General notes</{TAG}>\n<dd>Notes.</dl>"
    )  # a heading inside a term: its colon after it
    sentences = [s.text.strip() for s in split_sentences("".join(to_text([page], "html")))]
    assert sentences == ["New File:", "Create a new file.", "Open:", "Open Module:", "Open a module.", "Exit:", "Done.",
                         "General notes:", "Notes."]  # fmt: skip


def test_headings_are_paragraphs_of_their_own():
    out = "".join(to_text(["# A heading\nThe first sentence follows it.\n"], "markdown"))
    assert "A heading\n\n" in out  # a blank line: the segmenter will not join it to the sentence


def test_detect_by_name_or_first_tag():
    assert detect("notes.md") == "markdown" and detect("page.HTML") == "html"
    assert detect("howto.rst.txt") == "rst" and detect("paper.txt") == "text"
    assert detect("intro.Rmd") == "markdown" and detect("guide.qmd") == "markdown"  # R Markdown, Quarto
    assert detect("README.md.gz") == "markdown" and detect("index.html.xz") == "html"  # compressed, as Debian ships
    assert detect("-", "  <!doctype html><p>x") == "html" and detect("-", "plain words") == "text"


def _summarize(tmp_path, capsys, name: str, text: str, *args: str) -> str:
    from strandline.app.cli import main

    doc = tmp_path / name
    doc.write_text(text)
    assert main(["summarize", "summarizer", str(doc), "--sentences", "2", *args]) == 0
    return capsys.readouterr().out


def test_summarize_reads_markdown_as_text(tmp_path, capsys):
    body = "\n\n".join(f"Paragraph {i} explains how the **scanner** reads [genomes](http://x) in constant memory "
                       f"and why `state` {i} matters." for i in range(12))  # fmt: skip
    out = _summarize(tmp_path, capsys, "notes.md", f"# Notes\n\n{body}\n")
    assert "**" not in out and "](" not in out and "`" not in out and "scanner reads genomes" in out
    from strandline.app.cli import main

    code = main(["summarize", "summarizer", str(tmp_path / "notes.md"), "--sentences", "2", "--markup", "text"])
    assert code in (0, 1)  # read as it is, markup and all


@pytest.mark.parametrize(
    ("kind", "doc"),
    [
        ("markdown", "Features of the tool\n- reads FASTA files\n- writes bigWig tracks\n\nMore text.\n"),
        ("rst", "Features of the tool\n\n- reads FASTA files\n- writes bigWig tracks\n\nMore text.\n"),
        ("html", "<p>Features of the tool</p><ul><li>reads FASTA files</li><li>writes bigWig tracks</li></ul>"
                 "<p>More text.</p>"),
        ("html", "<nav><ul><li>Home<li>About</ul></nav><p>Features of the tool</p><ul><li>reads FASTA files"
                 "<li><p>writes bigWig tracks</p><li><pre>x = 1</pre></ul><p>More text.</p>"),  # end tags left out
    ],
)  # fmt: skip
def test_list_items_are_sentences_of_their_own_in_every_markup(kind, doc):
    from strandline.data.segment import split_sentences

    text = "".join(to_text([doc], kind))
    sentences = [s.clean for s in split_sentences(text)]
    assert sentences == ["Features of the tool", "- reads FASTA files", "- writes bigWig tracks", "More text."]


@pytest.mark.parametrize(
    ("kind", "doc"),
    [
        ("markdown", "Each test does three things:\n\n1. Set up the data.\n2. Run the code you want\n   to test.\n"
                     "   It may take a while.\n* [ ] A task.\n\nThe end.\n"),
        ("rst", "Each test does three things:\n\n1. Set up the data.\n2. Run the code you want\n   to test.\n"
                "   It may take a while.\n* [ ] A task.\n\nThe end.\n"),
        ("html", "<p>Each test does three things:</p><ol><li> Set up the <b>data</b>.</li><li><p>Run the code you want"
                 "\nto test.\nIt may take a while.</p></li><li><pre>code</pre></li></ol><ul><li>[ ] A task.</li></ul>"
                 "<p>The end.</p>"),
    ],
)  # fmt: skip
def test_a_list_item_keeps_its_marker_and_only_its_first_line_has_it(kind, doc):
    from strandline.data.segment import item_body, split_sentences
    from strandline.tasks.summarize.prose import non_prose

    text = "".join(to_text([doc], kind))
    sentences = split_sentences(text)
    clean = [s.clean for s in sentences]
    assert clean == ["Each test does three things:", "- Set up the data.", "- Run the code you want to test.",
                     "It may take a while.", "- [ ] A task.", "The end."]  # fmt: skip
    assert sentences[2].paragraph == sentences[3].paragraph != sentences[4].paragraph  # the item's second sentence
    assert [s.n_words for s in sentences[1:3]] == [4, 7]  # the marker is not a word
    assert item_body(clean[2]) == "Run the code you want to test."
    assert non_prose(clean[1]) is None and non_prose(clean[4]) is not None  # a task list's box is no prose


def test_a_code_block_or_comment_ends_the_paragraph_before_it():
    from strandline.data.segment import split_sentences

    doc = ("We start by defining the objective\n```{r}\nf <- function(x) x^2\n```\nWe then minimize it\n"
           "<!-- a note -->\nThe end.\n")  # fmt: skip
    sentences = [s.clean for s in split_sentences("".join(to_text([doc], "markdown")))]
    assert sentences == ["We start by defining the objective", "We then minimize it", "The end."]


def test_footnotes_are_not_part_of_the_sentence():
    doc = "NLopt is a library.^[It is in beta, see [the docs](u).] It has a note[^n] here.\n\n[^n]: The note.\n"
    assert _lines("".join(to_text([doc], "markdown"))) == ["NLopt is a library. It has a note here."]
    nested = "A sentence.^[See [the [older] docs](u) and [this [one [too]]].] Next one.^[Open [note.\n"
    assert _lines("".join(to_text([nested], "markdown"))) == ["A sentence. Next one.^[Open [note."]


def test_numbered_roles_read_as_sphinx_shows_them():
    from strandline.data.markup import rst_inline

    assert rst_inline(":pep:`498` adds f-strings (:rfc:`2616`, :gh:`12`, :issue:`7`, :pep:`8#names`).") == (
        "PEP 498 adds f-strings (RFC 2616, gh-12, bpo-7, PEP 8)."
    )
    assert rst_inline(":pep:`the f-string PEP <498>`") == "the f-string PEP"  # an explicit title is shown


VIM = (
    "*usr_01.txt*\tFor Vim version 9.0.  Last change: 2019 Nov 21\n\n"
    "\t\t     VIM USER MANUAL - by Bram Moolenaar\n\n"
    "==============================================================================\n"
    "*01.1*\tTwo manuals\n\n"
    "The notation used in these manuals is explained here: |notation|.  Links\n"
    "are in vertical bars, like this: |bars|.  You can make them visible with: >\n"
    "\t:set conceallevel=0\n"
    "\t:hi link HelpBar Normal\n"
    "The bars and stars are usually hidden.\n\n"
    "Support for Vim expression evaluation in a string. |interpolated-string|\n"
    "Support for fuzzy matching.  |fuzzy-matching| |matchfuzzy()|\n\n"
    "CTRL-W N\tgo to Terminal-Normal mode\t\t*t_CTRL-W_N*\n\n"
    "Patch 8.2.0063\nProblem:    Wrong size argument to vim_snprintf(). (Dominique Pell\u00e9)\n"
    "Solution:   Reduce the size by the length.\nFiles:      src/ops.c\n\n"
    "Patch 6.2.124 (after 6.2.121)(extra)\nProblem:    Vim9: leaking memory.\nSolution:   Free it.\n\n"
    "Patch 8.2 brought many fixes.\n\n"
    "Copyright: see |manual-copyright|  vim:tw=78:ts=8:noet:ft=help:norl:\n"
)


def test_vim_help_reads_as_a_help_window_shows_it():
    from strandline.data.segment import split_sentences

    assert detect("usr_01.txt", VIM) == "vimhelp" and detect("-", VIM) == "vimhelp"
    assert detect("notes.txt", "*Stars* begin this note.") == "text"  # no *name.txt* tag: plain text
    text = "".join(to_text([VIM], "vimhelp"))
    assert "*" not in text and "|" not in text and "conceallevel" not in text and "vim:" not in text
    assert "Last change" not in text  # the header line: name, version and date, as front matter
    assert "".join(to_text(["*x.txt*\tv1\n\nDifferences from vi: see ex:\n"], "vimhelp")).strip() == (
        "Differences from vi: see ex:"
    )  # a modeline is one word of colon-separated settings: a sentence that ends in a colon is kept
    sentences = [s.clean for s in split_sentences(text)]
    assert "The notation used in these manuals is explained here: notation." in sentences
    assert "Links are in vertical bars, like this: bars." in sentences
    assert "You can make them visible with:" in sentences  # the example ends the paragraph before it
    assert "The bars and stars are usually hidden." in sentences  # a line in the first column ends the example
    assert "Two manuals" in sentences and "CTRL-W N go to Terminal-Normal mode" in sentences  # their own
    assert "Copyright: see manual-copyright" in sentences
    assert "Problem" not in text and "src/ops.c" not in text and "leaking" not in text  # patch records: out
    assert "Patch 8.2 brought many fixes." in sentences  # prose that opens with "Patch" is kept
    # links after a line's sentence end are read inside that sentence, which ends before the next line's
    assert "Support for Vim expression evaluation in a string (interpolated-string)." in sentences
    assert "Support for fuzzy matching (fuzzy-matching, matchfuzzy())." in sentences
    for step in (1, 7, 64):  # streamed in pieces of any size: the same text
        assert "".join(to_text([VIM[i : i + step] for i in range(0, len(VIM), step)], "vimhelp")) == text
    long = "*x.txt*\tv1\n\n" + "".join(f"word{i} goes on\n" for i in range(64)) + "Run it: >\n\t:run\n"
    kept = "".join(to_text([long], "vimhelp"))
    # 64 lines held when the example starts: none lost
    assert all(f"word{i} " in kept for i in range(64)) and "Run it:" in kept


def test_summarize_reads_vim_help_without_its_tags(tmp_path, capsys):
    body = "\n\n".join(f"Section {i} explains how the |scanner| reads genomes in constant memory and why\n"
                       f"the state matters for track {i}.\t\t\t*scan-{i}*" for i in range(12))  # fmt: skip
    out = _summarize(
        tmp_path, capsys, "scan.txt", f"*scan.txt*\tFor Vim version 9.0.\n\n{body}\n\n vim:tw=78:ft=help:\n"
    )
    assert "*" not in out and "|" not in out and "scanner reads genomes" in out and "Vim version" not in out
