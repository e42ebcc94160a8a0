"""``TextDataModule``: documents -> byte tokens -> packed windows in the shared batch format.

Sources are local files loaded through HF ``datasets`` (``.jsonl``/``.json``/``.parquet`` with a text field,
``.txt``/``.md`` one document per file), a hub dataset name (needs a network), or ``aclsum:train|val|test``
(the papers of the installed ``aclsum`` package, offline). Documents are joined as ``BOS text EOS`` and cut into
windows of ``seq_len`` tokens (131,072 in the GPU config). Windows are independent samples, so ``reset`` is always
True; a document longer than a window simply continues in the next one.

``sequential=True`` (truncated BPTT, with ``long_context: tbptt``): the token stream of a split is cut into
``batch_size`` lanes of equal length (per rank under DDP); row b of consecutive batches walks lane b's windows in
order, and ``reset`` is True only on a lane's first window, so the state runs across windows and documents (a
document boundary is the ``EOS BOS`` pair in the stream, as in packed windows).
"""

from __future__ import annotations

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset

from strandline.data.batch import make_sample, stack_samples
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


class TextLanes(IterableDataset):
    """Whole batches [B, T] whose row b walks lane b of the token stream in order; ``reset`` marks its start."""

    def __init__(self, stream: np.ndarray, seq_len: int, batch_size: int):
        self.stream, self.seq_len, self.batch_size = stream, seq_len, batch_size

    def lanes(self, n_lanes: int) -> list[np.ndarray]:
        """The stream cut into ``n_lanes`` pieces of (nearly) equal length, in order."""
        bounds = np.linspace(0, len(self.stream), n_lanes + 1).astype(np.int64)
        return [self.stream[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]

    def n_batches(self, world: int = 1) -> int:
        longest = max(len(lane) for lane in self.lanes(self.batch_size * world))
        return max(1, -(-(longest - 1) // self.seq_len))

    def __iter__(self):
        from strandline.data.dna_datamodule import _rank_world

        rank, world = _rank_world()
        mine = self.lanes(self.batch_size * world)[rank * self.batch_size : (rank + 1) * self.batch_size]
        T, pad = self.seq_len, ByteTokenizer.pad_id
        for j in range(self.n_batches(world)):  # equal on every rank: no DDP hang
            rows = []
            for lane in mine:
                w = np.full(T + 1, pad, dtype=np.int64)
                piece = lane[j * T : j * T + T + 1]
                w[: len(piece)] = piece
                rows.append(window_to_sample(w) | {"reset": torch.tensor(j == 0)})
            yield stack_samples(rows)

    def __len__(self) -> int:
        from strandline.data.dna_datamodule import _rank_world

        return self.n_batches(_rank_world()[1])


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
        sequential: bool = False,
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
        sequential: truncated-BPTT batches (row b walks lane b of the stream in order; see the module docstring);
            pair with ``long_context: tbptt``. Not with ``streaming``.
        """
        super().__init__()
        if sequential and streaming:
            raise DocumentError("data.sequential needs the whole token stream to cut lanes: set data.streaming false")
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
        if self.hparams.sequential:
            return TextLanes(stream, self.hparams.seq_len, self.hparams.batch_size)
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
        if isinstance(ds, TextLanes):  # whole batches in order: one process keeps the order
            return DataLoader(ds, batch_size=None, num_workers=min(1, self.hparams.num_workers))
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
