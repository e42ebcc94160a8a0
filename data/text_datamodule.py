"""``TextDataModule``: documents -> byte tokens -> packed windows in the shared batch format.

Sources are local files loaded through HF ``datasets`` (``.jsonl``/``.json``/``.parquet`` with a text field,
``.txt``/``.md`` one document per file), a hub dataset name (needs a network), or ``aclsum:train|val|test``
(the papers of the installed ``aclsum`` package, offline). Documents are joined as ``BOS text EOS`` and cut into
windows of ``seq_len`` tokens (131,072 in the GPU config). Windows are independent samples, so ``reset`` is always
True; a document longer than a window simply continues in the next one.
"""

from __future__ import annotations

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset

from strandline.data.batch import make_sample
from strandline.data.documents import (
    ByteTokenizer,
    DocumentError,
    check_text_files,
    iter_documents,
    iter_packed,
    load_aclsum,
    load_documents,
    local_documents,
    pack_tokens,
    tokenize_documents,
)
from strandline.data.tokenizers import IGNORE


def window_to_sample(window: np.ndarray) -> dict:
    """[seq_len + 1] tokens -> {"input" [T], "target" [T] (PAD -> -100), "reset" (True)}."""
    w = torch.from_numpy(window.astype(np.int64))
    target = w[1:].clone()
    target[target == ByteTokenizer.pad_id] = IGNORE
    return make_sample(w[:-1], target)


class PackedWindows(Dataset):
    """Map-style windows over an in-memory token stream (the default: fast random access, shuffling)."""

    def __init__(self, windows: np.ndarray):
        self.windows = windows

    def __len__(self) -> int:
        return len(self.windows)

    def __getitem__(self, i: int) -> dict:
        return window_to_sample(self.windows[i])


class StreamedWindows(IterableDataset):
    """Windows packed lazily while documents stream in: memory is one window, whatever the corpus size."""

    def __init__(self, texts_fn, seq_len: int):
        self.texts_fn, self.seq_len = texts_fn, seq_len

    def __iter__(self):
        for window in iter_packed(self.texts_fn(), self.seq_len):
            yield window_to_sample(window)


class TextDataModule(L.LightningDataModule):
    """Byte-level text for ``LMTask`` (``tokenizer: bytes``, ``vocab_size: 260``)."""

    tokenizer_kind = "bytes"  # the tokens it gives (strandline.data.tokenizers.datamodule_tokenizer)

    def __init__(
        self,
        train: str | list[str] = "aclsum:train",
        val: str | list[str] | None = "aclsum:val",
        text_field: str = "text",
        seq_len: int = 1024,
        batch_size: int = 8,
        num_workers: int = 0,
        streaming: bool = False,
        cache_dir: str | None = None,
        max_documents: int | None = None,
    ):
        """Args:
        train: training documents: file path(s), a hub dataset name, or 'aclsum:train'.
        val: validation documents (same forms), or None for no validation.
        text_field: the column holding the text in json/parquet rows.
        seq_len: tokens per training window (input length T; beyond 100k for long-context training).
        batch_size: windows per batch.
        num_workers: DataLoader worker processes.
        streaming: read rows lazily and pack on the fly (constant memory) instead of packing up front.
        cache_dir: HF datasets cache directory (None: the default cache).
        max_documents: use only the first N documents of each source (quick runs).
        """
        super().__init__()
        self.save_hyperparameters()
        self._data: dict[str, Dataset] = {}

    def check_stage(self, stage: str) -> None:
        """Check the local document files a stage reads (present, of one kind, .txt/.md UTF-8 text) before the
        Trainer starts: the CLI calls this (``strandline.app.train.check_data``), so a bad file ends with one line and no
        run folder. Hub and ``aclsum:`` sources, and the rows of json/parquet files, are read by ``setup``."""
        hp = self.hparams
        for source in {"fit": (hp.train, hp.val), "validate": (hp.val,)}.get(stage, ()):
            if source is None or (isinstance(source, str) and source.startswith("aclsum:")):
                continue
            found = local_documents(source)
            if found is not None and found[0] == "text":
                check_text_files(found[1])

    def _texts(self, source: str | list[str]):
        hp = self.hparams
        if isinstance(source, str) and source.startswith("aclsum:"):
            texts = (d["text"] for d in load_aclsum(source.split(":", 1)[1]))
        else:
            ds = load_documents(source, streaming=hp.streaming, cache_dir=hp.cache_dir)
            texts = iter_documents(ds, hp.text_field)
        for i, text in enumerate(texts):
            if hp.max_documents is not None and i >= hp.max_documents:
                break
            yield text

    def _dataset(self, source: str | list[str]) -> Dataset:
        if self.hparams.streaming:
            return StreamedWindows(lambda: self._texts(source), self.hparams.seq_len)
        stream = tokenize_documents(self._texts(source))
        return PackedWindows(pack_tokens(stream, self.hparams.seq_len))

    def setup(self, stage: str | None = None) -> None:
        if "train" not in self._data and stage in (None, "fit"):
            self._data["train"] = self._dataset(self.hparams.train)
        if "val" not in self._data and self.hparams.val is not None and stage in (None, "fit", "validate"):
            self._data["val"] = self._dataset(self.hparams.val)

    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        if split not in self._data:
            raise DocumentError(f"no {split} documents configured")
        ds = self._data[split]
        shuffle = shuffle and not isinstance(ds, IterableDataset)
        return DataLoader(
            ds,
            batch_size=self.hparams.batch_size,
            shuffle=shuffle,
            num_workers=self.hparams.num_workers,
            drop_last=False,
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", shuffle=False)
