"""The streaming sentence/paragraph segmenter: rules, offsets, and identical results for any split into pieces."""

import random

import pytest

from strandline.data.segment import SentenceSegmenter, count_words, iter_sentences, split_sentences

TEXT = (
    "Dr. Smith et al. (2019) reported 3.14 units, e.g. the U.S. values. Fig. 3 shows it! Is it? Yes...\n"
    'This line is wrapped\nacross lines. J. R. R. Tolkien wrote. "Quoted." Then more. It runs in parallel.\n'
    "rustc will coordinate it, e.g. make is told. Samples are few. we select some.\n\n"
    "New paragraph here. Price was $4.50 today.\nHeading without period\n\n  \n"
    "Last one without a period"
)


def texts(text):
    return [s.text for s in split_sentences(text)]


def test_abbreviations_and_decimals_do_not_split():
    assert texts("Dr. Smith arrived. He saw Mr. Jones, i.e. his friend, at 3.30 p.m. today. Then they left.") == [
        "Dr. Smith arrived.",
        "He saw Mr. Jones, i.e. his friend, at 3.30 p.m. today.",
        "Then they left.",
    ]
    assert texts("As Vaswani et al. (2017) show, pi is 3.14159. See Fig. 2 and Eq. 4. Done.") == [
        "As Vaswani et al. (2017) show, pi is 3.14159.",
        "See Fig. 2 and Eq. 4.",
        "Done.",
    ]


def test_a_sentence_may_start_with_a_name_written_in_lower_case():
    assert texts(
        "Internally, rustc may use threads. rustc will coordinate with make. A string. name is the archive's path. "
        "Use it, e.g. numpy is fine. Samples are given. we select JDDC. (Tests live in tests.) file_coverage() "
        "performs it. Cut here. how is it done. See the docs. pandas"
    ) == [
        "Internally, rustc may use threads.",
        "rustc will coordinate with make.",  # the subject of the new sentence: a software name in lower case
        "A string.",
        "name is the archive's path.",  # a parameter's name
        "Use it, e.g. numpy is fine.",  # after an abbreviation: the same sentence
        "Samples are given. we select JDDC.",  # an ordinary word: the tail of a sentence cut, as before
        "(Tests live in tests.)",
        "file_coverage() performs it.",  # a function, parentheses and all, whatever its verb
        "Cut here. how is it done.",  # a function word ("how", "when", "some"), however its verb: not a name
        "See the docs. pandas",  # the document ends before a verb: the same sentence
    ]


@pytest.mark.parametrize("size", [1, 2, 5, 13])
def test_a_lowercase_word_after_a_period_waits_for_the_text_that_decides(size):
    text = "It runs in parallel. rustc will coordinate with make. Done. pandas"
    seg = SentenceSegmenter()
    assert seg.feed("It runs in parallel. rustc wi") == []  # "rustc wi...": a sentence's subject, or not yet known
    assert [s.text for s in seg.feed("ll ")] == ["It runs in parallel."]
    seg.finish()
    pieces = [text[i : i + size] for i in range(0, len(text), size)]
    assert list(iter_sentences(pieces)) == split_sentences(text)
    assert [s.text for s in split_sentences(text)] == [
        "It runs in parallel.",
        "rustc will coordinate with make.",
        "Done. pandas",
    ]


def test_terminators_quotes_and_initials():
    assert texts('He asked "why?" Then left! J. K. Rowling wrote. Wait... Really?') == [
        'He asked "why?"',
        "Then left!",
        "J. K. Rowling wrote.",
        "Wait...",
        "Really?",
    ]


def test_newlines_and_paragraphs():
    sents = split_sentences(TEXT)
    by_text = {s.text: s for s in sents}
    assert "This line is wrapped\nacross lines." in by_text  # a single newline does not split
    assert by_text["This line is wrapped\nacross lines."].clean == "This line is wrapped across lines."
    assert [s.paragraph for s in sents if s.text.startswith(("New", "Price", "Heading", "Last"))] == [1, 1, 1, 2]
    assert sents[-1].text == "Last one without a period"  # a blank line ends a sentence without punctuation
    assert [s.index for s in sents] == list(range(len(sents)))


def test_offsets_point_into_the_document():
    for s in split_sentences(TEXT):
        assert TEXT[s.start : s.end] == s.text
        assert s.text == s.text.strip() and s.text


@pytest.mark.parametrize("seed", range(40))
def test_streaming_in_pieces_gives_identical_sentences(seed):
    rng = random.Random(seed)
    text = TEXT * 3
    pieces, i = [], 0
    while i < len(text):
        n = rng.choice([1, 2, 3, 7, 50])
        pieces.append(text[i : i + n])
        i += n
    assert list(iter_sentences(pieces)) == split_sentences(text)


def test_long_sentence_is_cut_with_bounded_buffer():
    text = ("word " * 3000).strip() + ". End."
    one = split_sentences(text, max_chars=500)
    assert all(len(s.text) <= 500 for s in one)
    assert one[-1].text == "End." and "".join(s.text + " " for s in one).split() == text.split()
    seg, longest = SentenceSegmenter(max_chars=500), 0
    for i in range(0, len(text), 97):
        seg.feed(text[i : i + 97])
        longest = max(longest, len(seg._buf))
    assert longest < 2 * 500 + 97  # memory is bounded by max_chars, not by the sentence
    assert list(iter_sentences([text[i : i + 97] for i in range(0, len(text), 97)], max_chars=500)) == one


def test_empty_and_blank():
    assert split_sentences("") == []
    assert split_sentences("  \n\n ") == []
    seg = SentenceSegmenter()
    assert [s.text for s in seg.feed("One. Two")] == ["One."]  # decided once the next word has started
    assert [s.text for s in seg.feed(" three")] == []
    assert [(s.text, s.start) for s in seg.finish()] == [("Two three", 5)]


def test_full_width_terminators_end_sentences_without_spaces():
    text = "我们提出了一种新的方法。它在三个数据集上取得了最好的结果！真的吗？是的。"
    assert texts(text) == ["我们提出了一种新的方法。", "它在三个数据集上取得了最好的结果！", "真的吗？", "是的。"]
    pieces = [text[i : i + 3] for i in range(0, len(text), 3)]
    assert list(iter_sentences(pieces)) == split_sentences(text)  # decided once the next character has arrived


def test_words_count_cjk_characters_as_half_words():
    assert count_words("The state has constant size.") == 5
    assert count_words("我们提出了一种新的方法。") == 6  # 11 characters -> 6 words
    assert count_words("使用 Python 3 的方法") == 2 + 3  # Python and 3, plus 5 characters (rounded up)
    assert split_sentences("我们提出了一种新的方法。")[0].n_words == 6


@pytest.mark.parametrize("filler", ["字", "一二三四五，", "x"])
def test_text_without_spaces_or_stops_is_cut_at_max_chars(filler):
    text = filler * (5000 // len(filler))
    one = split_sentences(text, max_chars=500)
    assert all(len(s.text) <= 500 for s in one)  # the tail too, not only the sentences before it
    assert "".join(s.text for s in one) == text
    if "，" in filler:
        assert all(s.text.endswith("，") for s in one[:-1])  # cut after a full-width comma, not inside a clause
    assert list(iter_sentences([text[i : i + 77] for i in range(0, len(text), 77)], max_chars=500)) == one


LIST_TEXT = (
    "Lua support:\n- Call Vim functions from Lua (vim.call() and vim.fn()).\n"
    "- Convert a Lua function to a Vim funcref so that it can be\n  accessed in a Vim script.\n"
    "  * Not backwards compatible: arrays are one based.\n\u2022 A bullet item, not the\n+ sign\n"
    "The end - almost.\n\n"
    "Paragraph after.\n"
)


def test_a_line_that_opens_with_a_bullet_starts_a_sentence_and_a_paragraph():
    sents = split_sentences(LIST_TEXT)
    assert [s.clean for s in sents] == [
        "Lua support:",
        "- Call Vim functions from Lua (vim.call() and vim.fn()).",
        "- Convert a Lua function to a Vim funcref so that it can be accessed in a Vim script.",
        "* Not backwards compatible: arrays are one based.",
        # "+" at a line start is prose wrapped before a plus sign, a dash inside a line no bullet; the line after a
        # list's last item, with no blank line between, goes on with it
        "\u2022 A bullet item, not the + sign The end - almost.",
        "Paragraph after.",
    ]
    assert [s.paragraph for s in sents] == [0, 1, 2, 3, 4, 5]
    assert all(LIST_TEXT[s.start : s.end] == s.text for s in sents)


@pytest.mark.parametrize("seed", range(40))
def test_list_items_stream_in_pieces_as_in_one_call(seed):
    rng = random.Random(seed)
    pieces, i = [], 0
    while i < len(LIST_TEXT):  # pieces that end between a newline, a bullet and its space
        n = rng.choice([1, 2, 3, 5])
        pieces.append(LIST_TEXT[i : i + n])
        i += n
    assert list(iter_sentences(pieces)) == split_sentences(LIST_TEXT)
