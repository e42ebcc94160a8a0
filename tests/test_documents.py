"""Documents: strict streaming UTF-8, loading local files through HF datasets, packing, the text DataModule."""

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from strandline.data.documents import (
    DocumentError,
    iter_documents,
    iter_packed,
    iter_text,
    iter_text_pieces,
    load_documents,
    pack_tokens,
    tokenize_documents,
)
from strandline.data.tokenizers import ByteTokenizer

TOK = ByteTokenizer()


@pytest.mark.parametrize("piece", [1, 2, 3, 1 << 16])
def test_utf8_split_across_pieces_and_invalid_byte_offset(tmp_path, piece):
    good = "héllo wörld — ünïcode. " * 5
    p = tmp_path / "a.txt"
    p.write_bytes(good.encode())
    assert "".join(iter_text(p, piece)) == good  # multi-byte characters cut between pieces are joined
    bad = good.encode() + b"\xff tail"
    p.write_bytes(bad)
    with pytest.raises(DocumentError, match=rf"invalid UTF-8 at byte {len(good.encode())}\b") as e:
        list(iter_text(p, piece))
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("data", [b"", b"   \n\n\t", b"\n"])
def test_empty_input_is_a_clear_error(tmp_path, data):
    p = tmp_path / "empty.txt"
    p.write_bytes(data)
    with pytest.raises(DocumentError, match="empty document"):
        list(iter_text(p))
    with pytest.raises(DocumentError, match="empty document"):
        list(iter_text_pieces(data))


def test_binary_and_missing(tmp_path):
    p = tmp_path / "bin.dat"
    p.write_bytes(b"abc\x00def")
    with pytest.raises(DocumentError, match="binary"):
        list(iter_text(p))
    with pytest.raises(DocumentError, match="cannot read"):
        list(iter_text(tmp_path / "nope.txt"))


def test_load_local_jsonl_and_text_streaming_or_not(tmp_path):
    rows = [{"text": f"Document {i}. It has words.", "id": i} for i in range(5)]
    jl = tmp_path / "docs.jsonl"
    jl.write_text("\n".join(json.dumps(r) for r in rows))
    for streaming in (False, True):
        ds = load_documents(str(jl), streaming=streaming, cache_dir=str(tmp_path / "cache"))
        assert list(iter_documents(ds)) == [r["text"] for r in rows]
    txt = tmp_path / "book.txt"
    txt.write_text("Line one.\nLine two.\n\nA paragraph.")
    ds = load_documents(str(txt), cache_dir=str(tmp_path / "cache"))
    assert list(iter_documents(ds)) == ["Line one.\nLine two.\n\nA paragraph."]  # one document per file


def test_bad_rows_and_files(tmp_path):
    jl = tmp_path / "docs.jsonl"
    jl.write_text(json.dumps({"text": "fine."}) + "\n" + json.dumps({"text": "  "}) + "\n")
    ds = load_documents(str(jl), cache_dir=str(tmp_path / "c"))
    with pytest.raises(DocumentError, match="row 1: empty"):
        list(iter_documents(ds))
    with pytest.raises(DocumentError, match="no field 'body'"):
        list(iter_documents(ds, "body"))
    with pytest.raises(DocumentError, match="not found"):
        load_documents(str(tmp_path / "missing.jsonl"))


def test_packing_windows_continue_the_stream():
    docs = ["abc", "de", "f" * 20]
    stream = tokenize_documents(docs)
    assert stream[0] == TOK.bos_id and list(stream[1:4]) == [97, 98, 99] and stream[4] == TOK.eos_id
    windows = pack_tokens(stream, seq_len=8)
    assert windows.shape[1] == 9
    for a, b in zip(windows[:-1], windows[1:], strict=False):
        assert a[-1] == b[0]  # the target of one window's last input is the next window's first input
    assert np.array_equal(np.concatenate([windows[0], *[w[1:] for w in windows[1:]]])[: len(stream)], stream)
    lazy = list(iter_packed(docs, seq_len=8))
    assert np.array_equal(np.stack(lazy), windows)


def test_text_datamodule_batches(tmp_path):
    from strandline.data.text_datamodule import TextDataModule

    jl = tmp_path / "docs.jsonl"
    jl.write_text("\n".join(json.dumps({"text": "Some words here. " * 40}) for _ in range(3)))
    for streaming in (False, True):
        dm = TextDataModule(
            train=str(jl), val=str(jl), seq_len=64, batch_size=4, streaming=streaming, cache_dir=str(tmp_path / "c")
        )
        dm.setup("fit")
        batch = next(iter(dm.train_dataloader()))
        assert batch["input"].shape == batch["target"].shape == (4, 64)
        assert batch["input"].dtype == torch.long and batch["reset"].dtype == torch.bool
        assert torch.equal(batch["input"][:, 1:], batch["target"][:, :-1])  # next-token targets
        last = list(dm.val_dataloader())[-1]
        assert (last["target"] == -100).any()  # the padded tail is ignored, never trained on as PAD


def test_aclsum_papers_load_offline_with_official_split():
    pytest.importorskip("aclsum")  # the `bench` extra
    from strandline.data.documents import load_aclsum

    val = load_aclsum("val")
    assert len(val) == 50 and len({d["id"] for d in val}) == 50
    d = val[0]
    assert len(d["text"]) > 5000 and len(d["abstract"].split()) > 30
    assert d["abstract"][:200] not in d["text"]  # the reference is not inside the document


SHIPPED_DOCS = Path(__file__).resolve().parents[1] / "data" / "documents"


def test_summary_pairs_remove_the_summary_from_the_document():
    from strandline.data.fetch_summaries import howto_pair, library_pair, split_of, whatsnew_pair
    from strandline.data.markup import rst_inline

    howto = (SHIPPED_DOCS / "python-howto-sockets.rst.txt").read_text(encoding="utf-8")
    doc, abstract = howto_pair(howto)
    assert abstract.startswith("Sockets are used nearly everywhere") and abstract.endswith("decently.")
    assert "topic:: Abstract" not in doc and abstract[:60] not in " ".join(doc.split())
    assert "Socket Programming HOWTO" in doc and len(doc) > 15000
    page = ".. module:: json\n   :synopsis: Encode and decode the JSON format.\n\nThe :mod:`json` module, see `JSON <https://json.org>`_ and ``dumps``.\n"
    doc, synopsis = library_pair(page)
    assert synopsis == "Encode and decode the JSON format." and ":synopsis:" not in doc
    assert rst_inline(doc).splitlines()[-1] == "The json module, see JSON and dumps."
    new = "What's New\n==========\n\nSummary -- Release highlights\n=============================\n\n.. comment\n\n* fast\n* small\n\nNew Features\n============\n\nText.\n"
    doc, highlights = whatsnew_pair(new)
    assert highlights == "* fast * small" and "New Features" in doc and "fast" not in doc
    assert howto_pair("no abstract here") is None and library_pair("x") is None and whatsnew_pair("x") is None
    assert {split_of(f"doc{i}") for i in range(200)} == {"train", "val", "test"}
    assert split_of("library/json") == split_of("library/json")  # fixed by the id, not by the run


def test_leave_one_domain_out_never_trains_on_the_held_out_domain():
    from strandline.data.segment import split_sentences
    from strandline.tasks.summarize.build import train_heads

    def doc(domain, value):
        sents = split_sentences("One sentence here is long enough. Another sentence is here too.")
        return {
            "domain": domain,
            "prose": sents,
            "feats": torch.full((2, 3), value),
            "labels": torch.tensor([1.0, 0.0]),
        }

    # the held-out domain's features are NaN: any use of them in training would make the weights NaN
    data = {
        "a": {"train": [doc("a", 1.0)]},
        "b": {"train": [doc("b", -1.0)]},
        "held": {"train": [doc("held", float("nan"))]},
    }
    heads = list(train_heads(data, ["a", "b"], [0.01, 1.0]))
    assert heads and all(torch.isfinite(v).all() for _, head in heads for v in head.state_dict().values())
    with_held = list(train_heads(data, ["a", "held"], [0.01, 1.0]))
    assert any(not torch.isfinite(v).all() for _, head in with_held for v in head.state_dict().values())


def test_every_domain_weighs_the_same_however_long_its_documents():
    from strandline.tasks.summarize.build import train_heads

    def doc(domain, feats, labels):
        return {"domain": domain, "prose": list(range(len(feats))), "feats": torch.tensor(feats),
                "labels": torch.tensor(labels)}  # fmt: skip

    a = [[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]], [1.0, 0.0, 0.0]
    b = [[0.0, 1.0], [1.0, 0.2], [0.2, 0.1]], [1.0, 0.0, 1.0]
    short = {"a": {"train": [doc("a", *a)]}, "b": {"train": [doc("b", *b)]}}
    # the same sentences of domain a, in one document five times as long: the same domain, so the same head
    long = {"a": {"train": [doc("a", a[0] * 5, a[1] * 5)]}, "b": short["b"]}
    (_, head_short), (_, head_long) = (next(train_heads(d, ["a", "b"], [0.1])) for d in (short, long))
    w1, w2 = head_short.net[0].weight.detach(), head_long.net[0].weight.detach()
    assert w1.abs().max() > 0.01 and torch.allclose(w1, w2, atol=1e-4)


@pytest.mark.parametrize(
    ("head", "words"),
    [
        (b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n", "a PDF file, not text: extract its text first (e.g. `pdftotext"),
        (b"%PDF-1.4\n1 0 obj << /Type /Catalog >> endobj\n", "a PDF file"),  # an all-ASCII PDF decodes as UTF-8
        (b"PK\x03\x04\x14\x00\x06\x00", "a ZIP archive"),
    ],
)
def test_a_document_that_is_not_text_is_named(tmp_path, head, words):
    from strandline.data.documents import DocumentError, iter_text

    path = tmp_path / "doc"
    path.write_bytes(head + b"x" * 100)
    with pytest.raises(DocumentError, match=re.escape(words)):
        list(iter_text(path))


def test_text_lanes_walk_the_stream_in_order_and_reset_only_at_their_start(tmp_path):
    from strandline.data.documents import tokenize_documents
    from strandline.data.text_datamodule import TextDataModule

    jl = tmp_path / "docs.jsonl"
    texts = [f"Document {i}: " + "words of it " * (20 + 7 * i) for i in range(6)]
    jl.write_text("\n".join(json.dumps({"text": t}) for t in texts))
    dm = TextDataModule(train=str(jl), val=None, seq_len=32, batch_size=3, sequential=True,
                        cache_dir=str(tmp_path / "c"))  # fmt: skip
    dm.setup("fit")
    batches = list(dm.train_dataloader())
    assert len(batches) == len(dm.train_dataloader().dataset) > 1
    assert [b["reset"].tolist() for b in batches] == [[True] * 3] + [[False] * 3] * (len(batches) - 1)
    stream = tokenize_documents(texts)
    rows = []
    for b in range(3):  # each row, window after window, is one contiguous piece of the stream...
        ids = torch.cat([batches[0]["input"][b, :1]] + [x["target"][b] for x in batches])
        rows.append(ids[ids != -100])
        for x, y in zip(batches, batches[1:], strict=False):  # ...whose next window starts where this one ended
            assert x["target"][b, -1] == y["input"][b, 0]
    assert torch.equal(torch.cat(rows), torch.from_numpy(stream.astype(np.int64)))  # the lanes cover it once
    with pytest.raises(DocumentError, match="sequential"):
        TextDataModule(train=str(jl), sequential=True, streaming=True)
