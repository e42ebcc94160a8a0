"""The synthetic sequence-duplication task of "Transformers are RNNs" (Katharopoulos et al., 2020, §4.1).

A sequence of random symbols is shown, then a separator, and the model must repeat it:
``SEP x_1 .. x_n SEP x_1 .. x_n`` padded to ``2 * max_len + 2``. Only the repeated half is scored (its targets are
the copied symbols), so ``bits_per_token`` goes to 0 when the model copies perfectly. The paper uses 10 symbols
and lengths up to 128; the CPU config uses shorter sequences.

Ids: 0 = PAD, 1 = SEP, 2 .. n_symbols+1 = symbols (vocab_size ``n_symbols + 2``; the LM's vocab may be larger).
Batches follow the shared format ``{"input", "target", "reset"}``.
"""

from __future__ import annotations

import lightning as L
import numpy as np
from torch.utils.data import DataLoader, Dataset

from strandline.data.batch import make_sample
from strandline.data.tokenizers import IGNORE

PAD, SEP = 0, 1


def copy_example(rng: np.random.Generator, n_symbols: int, max_len: int, min_len: int = 1) -> tuple:
    """One (input [2·max_len+1], target [2·max_len+1]) pair of int64 arrays; see the module docstring."""
    n = int(rng.integers(min_len, max_len + 1))
    x = rng.integers(2, 2 + n_symbols, size=n)
    seq = np.concatenate([[SEP], x, [SEP], x])  # 2n + 2 tokens
    full = np.full(2 * max_len + 2, PAD, dtype=np.int64)
    full[: seq.size] = seq
    inp, tgt = full[:-1].copy(), full[1:].copy()
    scored = np.zeros_like(tgt, dtype=bool)
    scored[n + 1 : 2 * n + 1] = True  # targets x_1..x_n of the copy (input positions n+1 .. 2n)
    tgt[~scored] = IGNORE
    return inp, tgt


class CopyDataset(Dataset):
    """``size`` examples, example i fixed by ``(seed, i)``."""

    def __init__(self, size: int, n_symbols: int, max_len: int, min_len: int, seed: int):
        self.size, self.n_symbols, self.max_len, self.min_len, self.seed = size, n_symbols, max_len, min_len, seed

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, i: int) -> dict:
        inp, tgt = copy_example(np.random.default_rng([self.seed, i]), self.n_symbols, self.max_len, self.min_len)
        return make_sample(inp, tgt)


class CopyTaskDataModule(L.LightningDataModule):
    """Sequence duplication: train on fresh random sequences, validate on a fixed held-out set."""

    tokenizer_kind = (
        "copy"  # its own symbol ids (``tokenizer: copy`` in configs/paper/copy.yaml), neither DNA nor bytes
    )

    def __init__(
        self,
        n_symbols: int = 10,
        max_len: int = 128,
        min_len: int = 1,
        batch_size: int = 64,
        train_size: int = 100_000,
        val_size: int = 512,
        seed: int = 0,
    ):
        """Args:
        n_symbols: alphabet size (the paper: 10).
        max_len: longest sequence to copy (the paper: 128); inputs are ``2 * max_len + 1`` tokens.
        min_len: shortest sequence to copy.
        batch_size: sequences per batch.
        train_size: training sequences per epoch.
        val_size: held-out sequences (a different seed stream from training).
        seed: base seed.
        """
        super().__init__()
        self.save_hyperparameters()

    def train_dataloader(self) -> DataLoader:
        hp = self.hparams
        ds = CopyDataset(hp.train_size, hp.n_symbols, hp.max_len, hp.min_len, hp.seed)
        return DataLoader(ds, batch_size=hp.batch_size, shuffle=True, drop_last=True)

    def val_dataloader(self) -> DataLoader:
        hp = self.hparams
        ds = CopyDataset(hp.val_size, hp.n_symbols, hp.max_len, hp.min_len, hp.seed + 1_000_003)
        return DataLoader(ds, batch_size=hp.batch_size)

    def test_dataloader(self) -> DataLoader:
        return self.val_dataloader()
