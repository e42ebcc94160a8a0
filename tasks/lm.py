"""Next-token language modelling for any tokenizer: the one training task for DNA and text.

Interface (what a DataModule must give and what this task logs)
----------------------------------------------------------------
A batch is a dict (``data/batch.py``)::

    {"input":  LongTensor[B, T],   # token ids
     "target": LongTensor[B, T],   # next token of each position; -100 = ignored (N bases, pads)
     "reset":  BoolTensor[B]}      # True when the window starts a new record/document

Extra keys are ignored. Logged, per stage in ``train | val | test``: ``{stage}/loss`` (nats per scored token)
and ``{stage}/bits_per_token`` (= bits per base for DNA); val/test are exact token-weighted means over the epoch
(summed across DDP ranks), plus ``{stage}/tokens``, the number of scored tokens.
``val/bits_per_token`` is the metric the configs checkpoint on.

Long context, two ways (``long_context``):

- ``"full"`` (default): each window is one sequence, backpropagated whole in chunked mode. With
  ``ModelConfig.checkpoint_activations`` every block is recomputed in backward, so memory is O(T·d) for the
  block inputs plus one block's intermediates: this is how windows of 131,072+ tokens train.
- ``"tbptt"``: truncated backprop through time with manual optimization. Row b of consecutive batches must
  continue the same stream (``DNADataModule(sequential=True)`` does this); the final state of each window is
  detached and carried into the next, zeroed where ``reset`` is True. ``tbptt_split`` cuts each window further
  into segments with one optimizer step each. Softmax layers carry nothing across windows (a KV cache grows).
  The carried state and the number of windows trained in the current epoch are saved in every checkpoint
  (``checkpoint["tbptt"]``, plain tensors: it loads with ``weights_only=True``). Lightning restarts a plain
  iterable loader at the start of the epoch on resume, so the task fast-forwards past the windows it already
  trained on (sequential batches are deterministic) and continues from the saved state: a resumed run equals an
  uninterrupted one exactly.

Checkpoint contract (``models/persist/checkpoint.py``, the one description ``models.load`` reads): ``hparams["model"]``
is ``ModelConfig.to_dict()``, ``hparams["tokenizer"]`` names the tokenizer, and the LM is ``self.model`` so its
weights are the ``model.*`` keys (``tests/test_io.py`` checks this task against it).
"""

from __future__ import annotations

import importlib
import math

import lightning as L
import torch
import torch.nn.functional as F
from torch import Tensor

from strandline.data.tokenizers import IGNORE
from strandline.errors import TrainingDiverged, UserInputError
from strandline.models import LinearTransformerLM, ModelConfig
from strandline.models.layers import KVState
from strandline.models.ops.kmer import KmerMemoryState
from strandline.models.state import LMState, rebuild

LN2 = math.log(2.0)


def nll_sum(logits: Tensor, target: Tensor) -> tuple[Tensor, Tensor]:
    """Summed next-token NLL (nats) over non-ignored targets, and their count.

    Args:
        logits: [B, T, V] in any dtype (bf16/fp16 are upcast to float32 for the loss).
        target: [B, T] ids, ``-100`` where ignored.
    Returns:
        (sum of NLL as a 0-dim float32 tensor, number of scored tokens as a 0-dim long tensor).
    """
    logits = logits if logits.dtype == torch.float64 else logits.float()  # bf16 logits: the loss in float32
    loss = F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), target.reshape(-1), ignore_index=IGNORE, reduction="sum"
    )
    return loss, (target != IGNORE).sum()


def reset_state(state: LMState | None, reset: Tensor, detach: bool = True) -> LMState | None:
    """Detach a carried state and zero the rows whose next window starts a new record.

    Args:
        state: an ``LMState`` (every tensor of its layers and memory has the batch in dim 0: S, z, conv buffers,
            token counters, the k-mer tables), or None. A KV cache in any layer drops the whole state (None).
        reset: BoolTensor [B]; True rows start from the zero state.
    Returns:
        A new state of the same types (never mutates the one passed in), or None when nothing can be carried.
    """
    if state is None or any(isinstance(s, KVState) for s in state.layers) or bool(reset.all()):
        return None
    keep = (~reset).to(reset.device)
    if not bool(reset.any()):  # no row starts over: the same tensors (detached), no copy of the k-mer tables
        return state.map(lambda t: (t.detach() if detach else t).to(keep.device))

    def fix(t: Tensor) -> Tensor:
        t = (t.detach() if detach else t).to(keep.device)  # a state restored from a checkpoint may be on CPU
        return t * keep.view(-1, *([1] * (t.dim() - 1))).to(t.dtype)

    return state.map(fix)


PACK_FORMAT = 2
"""``pack_state``'s form: {"format": 2, "layers": [part, ...], "memory": part | None}, each part
{"type": "<module>.<class>", "fields": {name: tensor | None}}. Format 1 (checkpoints written before the
``LMState``) was a plain list of parts, the k-mer memory's (``RecallState``) last; it still unpacks."""


def pack_state(state: LMState | None) -> dict | None:
    """A carried state as plain dicts/lists/tensors (what ``torch.load(weights_only=True)`` accepts)."""
    if state is None:
        return None
    memory = None if state.memory is None else _pack_part(state.memory)
    return {"format": PACK_FORMAT, "layers": [_pack_part(s) for s in state.layers], "memory": memory}


def _pack_part(s) -> dict:
    return {"type": f"{type(s).__module__}.{type(s).__qualname__}", "fields": s._asdict()}


# Where the state classes of checkpoints written before the strandline.* namespace and the LMState live now
_LEGACY_STATE_MODULES = {"models.ops_recall": "strandline.models.ops.kmer", "models.ops_window": "strandline.models.ops.window",
                         "models.ops": "strandline.models.ops.linear"}  # fmt: skip
_LEGACY_STATE_CLASSES = {"RecallState": "KmerMemoryState"}


def unpack_state(packed: dict | list | None) -> LMState | None:
    """Inverse of ``pack_state`` (either format); only state classes of the ``models`` package are accepted."""
    if packed is None:
        return None
    if isinstance(packed, list):  # format 1: the memory's part, if any, came last
        parts = [_unpack_part(p) for p in packed]
        if parts and isinstance(parts[-1], KmerMemoryState):
            return LMState(tuple(parts[:-1]), parts[-1])
        return LMState(tuple(parts), None)
    if packed.get("format") != PACK_FORMAT:
        raise UserInputError(f"checkpoint carried-state format {packed.get('format')!r}; this strandline reads 1 and 2")
    memory = None if packed["memory"] is None else _unpack_part(packed["memory"])
    return LMState(tuple(_unpack_part(p) for p in packed["layers"]), memory)


def _unpack_part(part: dict):
    module, _, name = part["type"].rpartition(".")
    module = _LEGACY_STATE_MODULES.get(module, module)
    name = _LEGACY_STATE_CLASSES.get(name, name)
    if module.startswith("models."):  # checkpoints written before the strandline.* namespace
        module = "strandline." + module
    if module != "strandline.models" and not module.startswith("strandline.models."):
        raise ValueError(f"checkpoint state type {part['type']!r} is not a strandline.models state")
    return rebuild(getattr(importlib.import_module(module), name), part["fields"])


class LMTask(L.LightningModule):
    """Train a ``LinearTransformerLM`` on next-token prediction (see the module docstring for the batch format)."""

    def __init__(
        self,
        model: ModelConfig | None = None,
        tokenizer: str = "dna",
        lr: float = 1e-3,
        weight_decay: float = 0.1,
        betas: tuple[float, float] = (0.9, 0.95),
        warmup_steps: int = 100,
        min_lr_ratio: float = 0.1,
        grad_clip: float = 1.0,
        long_context: str = "full",
        tbptt_split: int | None = None,
    ):
        """Args:
        model: architecture of the LM (YAML: ``model: {model: {d_model: 64, ...}}``; CLI: ``--model.model.d_model 64``).
        tokenizer: tokenizer kind saved with the weights ('dna' or 'bytes'); the task itself is tokenizer-agnostic.
        lr: peak learning rate of AdamW.
        weight_decay: decoupled weight decay on matrices (norms and biases get none).
        betas: AdamW betas.
        warmup_steps: linear warmup from 0 to ``lr``.
        min_lr_ratio: cosine decay ends at ``lr * min_lr_ratio`` at the trainer's last step.
        grad_clip: max global gradient norm (0 disables); used unless ``trainer.gradient_clip_val`` is set.
        long_context: 'full' (whole windows, chunked mode) or 'tbptt' (carried detached state, manual optimization).
        tbptt_split: in 'tbptt' mode, optimizer steps per ``tbptt_split`` tokens of a window (None: one per window).
        """
        super().__init__()
        if model is None:
            model = ModelConfig()
        elif isinstance(model, dict):  # from a checkpoint's hyperparameters
            model = ModelConfig.from_dict(model)
        check_optimizer_options(lr=lr, weight_decay=weight_decay, betas=betas, warmup_steps=warmup_steps,
                                min_lr_ratio=min_lr_ratio, grad_clip=grad_clip)  # fmt: skip
        if long_context not in ("full", "tbptt"):
            raise UserInputError(f"long_context must be 'full' or 'tbptt', got {long_context!r}")
        if tbptt_split is not None and tbptt_split < 1:  # 0 was a ValueError (range step) once training had started
            raise UserInputError(f"tbptt_split must be >= 1 or null, got {tbptt_split}")
        # hparams must be plain Python types: checkpoints are read back with weights_only=True
        self.save_hyperparameters(ignore=["model"])
        self.hparams["model"] = model.to_dict()
        self.hparams["betas"] = [float(b) for b in betas]
        self.model = LinearTransformerLM(model)
        self.automatic_optimization = long_context == "full"
        self.train_seq_len: int | None = None  # set by strandline.tasks.callbacks.SeqLenWarmup
        self._carried: dict[str, LMState | None] = {}  # stage -> state carried across windows (tbptt)
        self._windows_done = 0  # tbptt: training windows consumed in this epoch (saved in checkpoints)
        self._skip = 0  # tbptt: windows still to fast-forward after a mid-epoch resume
        self._eval_sums: dict[str, Tensor] = {}  # stage -> [Σ nll, Σ tokens] over the epoch

    # ---- steps ---------------------------------------------------------------------------------
    def forward(self, tokens: Tensor, state: LMState | None = None) -> tuple[Tensor, LMState]:
        return self.model(tokens, state)

    def _window_loss(self, batch: dict, stage: str) -> tuple[Tensor, Tensor]:
        """Mean NLL over one window and its token count; carries state across windows in tbptt mode."""
        x, y = batch["input"], batch["target"]
        state = None
        carry = self.hparams.long_context == "tbptt"
        if carry:
            reset = batch.get("reset", torch.ones(x.shape[0], dtype=torch.bool, device=x.device))
            state = reset_state(self._carried.get(stage), reset)
        # not carried: the memory may skip its state; carried: the old state is given up (tables updated in place)
        logits, new_state = self.model(x, state, need_state=carry, donate=carry)
        if carry:
            self._carried[stage] = new_state
        total, count = nll_sum(logits, y)
        return total / count.clamp(min=1), count

    def _log(self, stage: str, loss: Tensor, count: Tensor) -> None:
        """Train: log each step. Val/test: add to token-weighted sums, logged (and reduced across ranks) per epoch."""
        if stage != "train":
            sums = self._eval_sums.setdefault(stage, torch.zeros(2, dtype=torch.float64, device=loss.device))
            sums += torch.stack([loss.detach().double() * count, count.double()])
            return
        if int(count) == 0:
            return
        self.log("train/loss", loss.detach(), on_step=True, batch_size=int(count))
        self.log("train/bits_per_token", loss.detach() / LN2, on_step=True, prog_bar=True, batch_size=int(count))

    def _log_epoch(self, stage: str) -> None:
        sums = self._eval_sums.pop(stage, None)
        if sums is None:
            sums = torch.zeros(2, dtype=torch.float64, device=self.device)
        sums = self.trainer.strategy.reduce(sums, reduce_op="sum")  # every rank calls this: no DDP hang
        if float(sums[1]) > 0:
            loss = (sums[0] / sums[1]).float()
            self.log(f"{stage}/loss", loss, prog_bar=True)
            self.log(f"{stage}/bits_per_token", loss / LN2, prog_bar=True)
            self.log(f"{stage}/tokens", sums[1].float())

    def training_step(self, batch: dict, batch_idx: int) -> Tensor | None:
        if not self.automatic_optimization:
            return self._tbptt_step(batch)
        batch = self._crop(batch)
        loss, count = self._window_loss(batch, "train")
        self.check_finite(loss)
        self._log("train", loss, count)
        return loss

    def check_finite(self, loss: Tensor) -> None:
        """Stop at the first non-finite training loss (a learning rate far too high): ``TrainingDiverged``, before
        the step that would make the weights NaN and before any checkpoint of them."""
        if not bool(torch.isfinite(loss.detach())):
            raise self._diverged(f"the loss is {float(loss.detach())}")

    def _diverged(self, what: str) -> TrainingDiverged:
        return TrainingDiverged(
            f"training diverged at step {self.global_step}: {what} (learning rate {self.hparams.lr:g}; lower it); "
            "no checkpoint of the diverged model was saved"
        )

    def _crop(self, batch: dict) -> dict:
        """Sequence-length warmup: [B, T] -> [B*T/L, L] keeps tokens per batch constant."""
        L_ = self.train_seq_len
        T = batch["input"].shape[1]
        if not L_ or L_ >= T or T % L_:
            return batch
        return {k: batch[k].reshape(-1, L_) for k in ("input", "target")}

    def _tbptt_step(self, batch: dict) -> None:
        """One window: optimizer steps on consecutive segments, the detached state carried between them."""
        if self._replayed():
            return None
        opt, sched = self.optimizers(), self.lr_schedulers()
        x, y = batch["input"], batch["target"]
        reset = batch.get("reset", torch.ones(x.shape[0], dtype=torch.bool, device=x.device))
        state = reset_state(self._carried.get("train"), reset)
        seg = self.hparams.tbptt_split or x.shape[1]
        tot_loss, tot_n = 0.0, 0
        for s in range(0, x.shape[1], seg):
            logits, state = self.model(x[:, s : s + seg], state, donate=True)  # the carried state is ours
            total, count = nll_sum(logits, y[:, s : s + seg])
            if int(count) == 0:
                state = reset_state(state, torch.zeros_like(reset))
                continue
            loss = total / count
            self.check_finite(loss)
            self._manual_step(opt, sched, loss)
            state = reset_state(state, torch.zeros_like(reset))  # detach only
            tot_loss, tot_n = tot_loss + float(total.detach()), tot_n + int(count)
        self._carried["train"] = state
        if tot_n:
            self._log("train", torch.tensor(tot_loss / tot_n), torch.tensor(tot_n))

    def _replayed(self) -> bool:
        """Count a TBPTT training window; True when a mid-epoch resume replays it (trained before the checkpoint)."""
        self._windows_done += 1
        if self._skip:
            self._skip -= 1
            return True
        return False

    def _manual_step(self, opt, sched, loss: Tensor) -> None:
        """One optimizer and scheduler step on ``loss`` (manual optimization), with the gradient clipping."""
        opt.zero_grad(set_to_none=True)
        self.manual_backward(loss)
        if self.hparams.grad_clip:
            self.clip_gradients(opt, gradient_clip_val=self.hparams.grad_clip, gradient_clip_algorithm="norm")
        opt.step()
        sched.step()

    # ---- tbptt resume ---------------------------------------------------------------------------
    def on_train_epoch_start(self) -> None:
        # a fresh epoch; Lightning does not call this hook when it resumes in the middle of one
        self._windows_done, self._skip = 0, 0

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        sd = checkpoint["state_dict"]
        bad = next((k for k, t in sd.items() if t.is_floating_point() and not bool(t.isfinite().all())), None)
        if bad is not None:  # a step made the weights non-finite: never write a checkpoint that cannot be used
            raise self._diverged(f"weight {bad} is not finite")
        if self.hparams.long_context == "tbptt":
            checkpoint["tbptt"] = {
                "carried": pack_state(self._carried.get("train")),
                "windows_done": self._windows_done,
            }

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        saved = checkpoint.get("tbptt")
        if saved is not None and self.hparams.long_context == "tbptt":
            self._carried["train"] = unpack_state(saved["carried"])
            # a mid-epoch resume replays the epoch's loader from its start: skip what was already trained
            self._windows_done, self._skip = 0, int(saved["windows_done"])

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        self._log("val", *self._window_loss(batch, "val"))

    def test_step(self, batch: dict, batch_idx: int) -> None:
        self._log("test", *self._window_loss(batch, "test"))

    def on_validation_epoch_start(self) -> None:
        self._carried.pop("val", None)
        self._eval_sums.pop("val", None)

    def on_validation_epoch_end(self) -> None:
        self._log_epoch("val")

    def on_test_epoch_start(self) -> None:
        self._carried.pop("test", None)
        self._eval_sums.pop("test", None)

    def on_test_epoch_end(self) -> None:
        self._log_epoch("test")

    # ---- optimization ---------------------------------------------------------------------------
    def configure_optimizers(self):
        decay = [p for p in self.model.parameters() if p.requires_grad and p.dim() >= 2]
        no_decay = [p for p in self.model.parameters() if p.requires_grad and p.dim() < 2]
        hp = self.hparams
        opt = torch.optim.AdamW(
            [{"params": decay, "weight_decay": hp.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
            lr=hp.lr,
            betas=tuple(hp.betas),
        )
        total = self._total_steps()
        sched = torch.optim.lr_scheduler.LambdaLR(
            opt, lambda step: lr_factor(step, hp.warmup_steps, total, hp.min_lr_ratio)
        )
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    def _total_steps(self) -> int:
        trainer = self._trainer
        if trainer is None:
            return 10_000
        if trainer.max_steps and trainer.max_steps > 0:
            return trainer.max_steps
        try:
            est = trainer.estimated_stepping_batches
        except Exception:  # no dataloader yet / infinite iterable
            return 10_000
        return int(est) if math.isfinite(est) else 10_000

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None) -> None:
        """Clip to ``grad_clip`` unless the Trainer's own ``gradient_clip_val`` was given."""
        val = gradient_clip_val if gradient_clip_val is not None else self.hparams.grad_clip
        if val:
            self.clip_gradients(optimizer, gradient_clip_val=val, gradient_clip_algorithm=gradient_clip_algorithm)


def check_optimizer_options(lr: float, weight_decay: float, betas, warmup_steps: int, min_lr_ratio: float,
                            grad_clip: float) -> None:  # fmt: skip
    """Refuse, before training, what AdamW or the schedule would refuse (or diverge on) once the run has started."""
    checks = (
        ("lr", lr, math.isfinite(lr) and lr > 0, "a finite number > 0"),
        ("weight_decay", weight_decay, math.isfinite(weight_decay) and weight_decay >= 0, "a finite number >= 0"),
        ("betas", list(betas), len(betas) == 2 and all(0 <= b < 1 for b in betas), "two numbers in [0, 1)"),
        ("warmup_steps", warmup_steps, warmup_steps >= 0, "an integer >= 0"),
        ("min_lr_ratio", min_lr_ratio, 0 <= min_lr_ratio <= 1, "a number in [0, 1]"),
        ("grad_clip", grad_clip, math.isfinite(grad_clip) and grad_clip >= 0, "a finite number >= 0 (0: off)"),
    )
    for name, value, ok, expected in checks:
        if not ok:
            raise UserInputError(f"{name} must be {expected}, got {value}")


def lr_factor(step: int, warmup: int, total: int, min_ratio: float) -> float:
    """Multiplier of the peak lr: linear warmup over ``warmup`` steps, then cosine down to ``min_ratio`` at ``total``."""
    if warmup > 0 and step < warmup:
        return (step + 1) / warmup
    span = max(1, total - warmup)
    progress = min(1.0, (step - warmup) / span)
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))
