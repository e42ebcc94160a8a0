"""The non-prose filter: what may never be a summary sentence, and prose of any domain that must pass."""

import random

import pytest

from strandline.data.segment import SentenceSegmenter, split_sentences
from strandline.tasks.summarize.prose import REASONS, RstComments, comment_flags, is_prose, non_prose

PROSE = [
    "Linear attention turns a transformer into a recurrent network with a state of constant size.",
    "Sockets are used nearly everywhere, but are one of the most severely misunderstood technologies around.",
    "This module provides a portable way of using operating system dependent functionality.",
    "Our model improves BLEU by 2.3 points on WMT14 English-German over the strongest baseline.",
    "The len() function returns the number of items in a container.",
    '"Quoted speech can open a sentence," she said.',
    "Python was created by Guido van Rossum at CWI in the Netherlands.",  # who did it, with a subject: prose
    "Thanks to Python 3.12, the interpreter starts faster.",
    "Patches are reviewed by two maintainers before they are merged.",
    "Note that the default value is evaluated only once, when the function is defined.",
    "我们提出了一种新的方法，它在三个数据集上取得了最好的结果。",
    "2019 was the year the assembly reached a contiguous chromosome for every record.",  # a year, then lowercase
    "Why would a scanner read a genome one base at a time when its state already holds all that came before?",
    "It is now around 20% faster when dividing an int by a value smaller than 2**30.",  # a power, not bold
    "pandas is a Python package that provides fast, flexible and expressive data structures.",  # a lowercase name
    "h11 provides a pure-Python implementation of HTTP/1.1 that does no I/O of its own.",
    "json exposes an API familiar to users of the standard library marshal and pickle modules.",
]

NON_PROSE = [
    ("Hi.", "fragment"),
    ("Introduction", "fragment"),  # one word
    ("rounding subscripts and superscripts.", "fragment"),  # the tail of a cut sentence
    ("it is the tail of a sentence cut after an abbreviation.", "fragment"),  # an ordinary word: not a name
    ("showed that the model is a good fit for the data.", "fragment"),
    ("Related Work and Background Material", "heading"),
    ("1.1 What is Biopython?", "heading"),  # numbered headings that end like a sentence (PDF text)
    ("2.4.3 I love parsing, please do not stop talking about it!", "heading"),
    (r"\ifdim \dp4>\dp8 \dp8=\dp4\else \dp4=\dp8\fi", "code"),  # a line once found in a summary
    (">>> import os; os.getcwd() returns the path.", "code"),
    ("$ pip install strandline and then run the demo.", "code"),
    ("If x == 0 then the loop returns early and stops.", "code"),
    ("def summarize(text): return the best sentences.", "code"),
    ("Call it as action(*argument, **kwargs) to pass everything on.", "code"),  # found in a chosen sentence
    (r"The pattern \*.py matches every module in the folder.", "code"),
    ("Use the pattern *.txt to match every text file here.", "code"),
    ("Use the following call to open the file::", "markup"),
    (".. note:: This directive holds a note for readers.", "markup"),
    ("Installation\n============ follows in the next few lines.", "markup"),
    ("See <a href='x.html'>the page</a> for all the details.", "markup"),
    ("Read [the guide](https://example.org/guide) before you start.", "markup"),
    ("| name | value | unit | note | are the columns here.", "markup"),
    ("The `cloudpickle` module makes it possible to serialize lambdas.", "markup"),
    ("It is useful mainly for **system monitoring** of processes.", "markup"),
    ("<!-- nonlinear.Rmd is generated from nonlinear.org, edit that one.", "markup"),  # a comment no reader sees
    ("The definitive Fortran code was published as @Zhu1997LBFGS.", "reference"),  # R Markdown citation key
    ("How do TOML types map into Python types?", "heading"),  # a FAQ entry: Markdown's "### ..." once rendered
    ("```\nIn contrast to the previous figure, Figure 5 shows the reordered tree.", "markup"),  # a fence run in
    ("`python\nimport sentry_sdk\nsentry_sdk.init(...)", "markup"),  # a fence's language line, its backticks cut
    ("This makes it harder to combine results.** For example, R stores them as a matrix.", "markup"),  # cut bold
    ("**Note that the figure below is not generated from the above example.", "markup"),
    ("`bash\npip install mkl-static mkl-include\n# Add these packages if torch.distributed is needed.", "markup"),
    ("> While model inputs usually need tidy data, outputs do not.", "markup"),  # a quote marker
    ("Model   BLEU   chrF   TER   are   reported   below.", "table"),
    ("[12] A. Smith and B. Jones. Attention is all you need again.", "reference"),
    ("Vaswani, A., Shazeer, N. and Parmar, N. (2017). Attention is all you need.", "reference"),
    ("In Proceedings of the 60th Annual Meeting of the Association for Computational Linguistics.", "reference"),
    ("The code is available at https://github.com/example/repo for everyone.", "reference"),
    ("Copyright 2001-2023 the Python Software Foundation and its contributors.", "boilerplate"),
    ("Permission is hereby granted, free of charge, to any person obtaining a copy.", "boilerplate"),
    ("The origin of this software must not be misrepresented; you must not claim that you wrote it.", "boilerplate"),
    ("Redistribution and use in source and binary forms, with or without modification, are permitted.", "boilerplate"),
    ("Patch by Roger Serwy and Zackery Spytz.", "boilerplate"),  # a changelog's credit lines
    ("Original patch by Alecsandru Patrascu of Intel in 26359.)", "boilerplate"),
    ("Revisions by Terry Jan Reedy.", "boilerplate"),
    ("Many thanks to John W. Eaton, Jr.", "boilerplate"),
    ("The results were 45.3, 47.1, 48.9, 51.2 and 53.0 in 2019, 2020, 2021 and 2022.", "symbols"),
]


@pytest.mark.parametrize("text", PROSE, ids=[t[:24] for t in PROSE])
def test_prose_of_any_domain_passes(text):
    assert non_prose(text) is None and is_prose(text)


@pytest.mark.parametrize(("text", "reason"), NON_PROSE, ids=[t[:24] for t, _ in NON_PROSE])
def test_non_prose_is_rejected_with_its_reason(text, reason):
    assert reason in REASONS
    assert non_prose(text) == reason
    assert not is_prose(text)


def test_a_credit_line_is_matched_in_linear_time():
    # a name is one word whatever its capitals: before, each word of 26 capitals was tried as every split of it
    # (about ten seconds for one word, exponential in their number)
    text = "Thanks to " + " ".join(["ABCDEFGHIJKLMNOPQRSTUVWXYZ"] * 40) + " for the idea."
    assert non_prose(text) is None
    assert non_prose("Thanks to " + " ".join(["ABCDEFGHIJKLMNOPQRSTUVWXYZ"] * 3) + ".") == "boilerplate"


def test_wrapped_lines_are_prose_but_an_indented_block_is_code():
    assert is_prose("This sentence is wrapped\nacross two lines of a text file.")
    assert non_prose("The example below shows it.\n    x = compute(1, 2)\n    print(x) ends here.") == "code"


def test_every_reason_is_exercised():
    assert {r for _, r in NON_PROSE} == set(REASONS)


# a CPython page's head: a reST comment to the maintainers (never rendered), then what readers see
RST = """What's New In Python 3.9
************************

.. Rules for maintenance:

   * Anyone can add text to this document.  Your text might get
   rewritten to some degree.

   * This is not a complete list of every single change; completeness
   is the purpose of Misc/NEWS.

This article explains the new features in Python 3.9, compared to 3.8.

.. note:: This note is shown to every reader of the page.

   Its second paragraph is shown as well.

.. XXX Describe the new parser here.
Python 3.9 uses a new parser, based on PEG instead of LL(1).

.. _whatsnew-target:

The target above names this paragraph for links elsewhere.

.. [1] A footnote is rendered at the bottom of the page.

..

    A block quote after an empty comment is rendered too.

..
   The comment's text may start on the next line.

    * Even a list item indented deeper belongs to it.

The last paragraph is prose again.
"""
IN_COMMENT = {
    "..",
    "Rules for maintenance:",
    "* Anyone can add text to this document.",
    "Your text might get\n   rewritten to some degree.",
    "* This is not a complete list of every single change; completeness\n   is the purpose of Misc/NEWS.",
    "XXX Describe the new parser here.",
    "The comment's text may start on the next line.",
    "* Even a list item indented deeper belongs to it.",
}


def test_rst_comments_are_found_and_nothing_else():
    sents = split_sentences(RST)
    flags = comment_flags(RST, sents)
    assert {s.text for s, f in zip(sents, flags, strict=True) if f} == IN_COMMENT
    shown = [s.text for s, f in zip(sents, flags, strict=True) if not f]
    for text in ("This article explains", "Its second paragraph", "Python 3.9 uses a new parser", "The target above",
                 "A footnote is rendered", "A block quote after", "The last paragraph"):  # fmt: skip
        assert any(text in t for t in shown), text


def test_rst_comments_do_not_depend_on_how_the_text_arrives():
    sents = split_sentences(RST)
    whole = comment_flags(RST, sents)
    rng = random.Random(0)
    for _ in range(20):
        comments, flags, seg, i = RstComments(), [], SentenceSegmenter(), 0
        while i < len(RST):
            piece = RST[i : i + rng.randint(1, 40)]
            i += len(piece)
            comments.feed(piece)
            flags += [comments.in_comment(s) for s in seg.feed(piece)]
        flags += [comments.in_comment(s) for s in seg.finish()]
        assert flags == whole
        assert len(comments._tail) < 200  # only the text after the last sentence asked about is held
