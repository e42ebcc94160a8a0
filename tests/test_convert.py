"""`strandline convert`: softmax -> linear students, distillation, the exactness contract, resume, bad inputs."""

from __future__ import annotations

from pathlib import Path

import lightning as L
import pytest
import torch
from test_train_e2e import KillAt, Killed, sigkill_after_checkpoint  # the same stand-in for SIGKILL as the fit tests

from strandline.app.cli import main
from strandline.app.convert import convert
from strandline.data.dna_datamodule import DNADataModule
from strandline.data.text_datamodule import TextDataModule
from strandline.data.tokenizers import datamodule_tokenizer
from strandline.models import LinearTransformerLM, ModelConfig, load
from strandline.models.convert.attn import (
    distill_loss,
    linear_output,
    linear_weights,
    mixer_inputs,
    rotate,
    softmax_output,
    softmax_weights,
    teacher_qkv,
)
from strandline.models.convert.maps import ConvertError, add_lora, feature_map_parameters, merge_lora, to_linear
from strandline.tasks.convert import ConvertArgs, run_conversion

REPO = Path(__file__).resolve().parents[1]
LAMBDA = str(REPO / "data" / "genomes" / "lambda.fasta.gz")
STUDENTS = [  # (feature map, window): pure linear students and the LoLCATs hybrid (W=12: no chunk multiple)
    pytest.param(("t2r", 0), id="t2r"),
    pytest.param(("hedgehog", 0), id="hedgehog"),
    pytest.param(("hedgehog", 12), id="hybrid-w12"),
]


def softmax_model(dtype=torch.float32, **kw) -> LinearTransformerLM:
    cfg = dict(vocab_size=16, d_model=32, n_layers=2, n_heads=4, attention="softmax", conv_width=4) | kw
    return LinearTransformerLM(ModelConfig(**cfg)).to(dtype)


def student_of(teacher: LinearTransformerLM, kind: tuple[str, int]) -> LinearTransformerLM:
    fmap, window = kind
    return to_linear(teacher, fmap, window=window)


def perturb_maps(model: LinearTransformerLM) -> None:
    """Move φ off its initialization (identity W), so the tests see a trained-looking map."""
    with torch.no_grad():
        for p in feature_map_parameters(model):
            p.add_(0.3 * torch.randn_like(p))


def close(ref: torch.Tensor, out: torch.Tensor, tol: float) -> bool:
    ref, out = ref.detach(), out.detach()
    return float((ref - out).abs().max()) <= tol * max(1.0, float(ref.abs().max()))


# ---- the student ------------------------------------------------------------------------------------
@pytest.mark.parametrize("student_kind", STUDENTS)
def test_student_keeps_every_weight_and_the_rope_positions(student_kind):
    teacher = softmax_model()
    student = student_of(teacher, student_kind)
    assert student.config.window == student_kind[1]
    assert student.config.attention == "linear" and student.config.position == "rope"
    t_sd, s_sd = teacher.state_dict(), student.state_dict()
    for k, v in t_sd.items():
        assert torch.equal(s_sd[k], v), k
    assert all(".fmap." in k for k in set(s_sd) - set(t_sd))


def test_already_linear_model_is_refused():
    linear = LinearTransformerLM(ModelConfig(vocab_size=16, d_model=32, n_layers=1, n_heads=4))
    with pytest.raises(ConvertError, match="already 'linear'"):
        to_linear(linear)


@pytest.mark.parametrize("student_kind", STUDENTS)
def test_distillation_sees_what_the_layer_computes(student_kind):
    """The attention weights and outputs distilled are the ones the converted layer's forward produces."""
    teacher = softmax_model(torch.float64)
    student = student_of(teacher, student_kind).double()
    perturb_maps(student)
    x = mixer_inputs(teacher, torch.randint(4, 8, (2, 37)))[1]
    mixer, t_mixer = student.blocks[1].mixer, teacher.blocks[1].mixer
    q, k, v = teacher_qkv(t_mixer, x)
    qr, kr = rotate(q, t_mixer.cfg.rope_base), rotate(k, t_mixer.cfg.rope_base)
    o = linear_output(mixer, qr, kr, v)
    assert close(torch.einsum("bhij,bjhd->bihd", linear_weights(mixer, qr, kr), v), o, 1e-12)
    assert close(mixer(x)[0], mixer.proj(o.reshape(2, 37, 32)), 1e-12)  # rope before φ, as the forward does
    sw = softmax_weights(qr, kr)
    assert close(torch.einsum("bhij,bjhd->bihd", sw, v), softmax_output(qr, kr, v), 1e-12)
    assert close(t_mixer(x)[0], t_mixer.proj(softmax_output(qr, kr, v).reshape(2, 37, 32)), 1e-12)


@pytest.mark.parametrize("window", [pytest.param(0, id="linear"), pytest.param(16, id="hybrid-w16")])
@pytest.mark.parametrize("kind", ["hedgehog", "transfer"])
def test_distillation_loss_decreases(kind, window):
    torch.manual_seed(1)
    teacher = softmax_model()
    with torch.no_grad():  # sharper attention than at init, so there is something to mimic
        for b in teacher.blocks:
            b.mixer.qkv.weight.mul_(8)
    student = to_linear(teacher, "hedgehog", window=window)
    opt = torch.optim.Adam(feature_map_parameters(student), lr=0.02)
    tokens = torch.randint(4, 8, (4, 64))
    losses = []
    for _ in range(40):
        loss = distill_loss(teacher, student, tokens, kind)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss))
    assert losses[-1] < 0.7 * losses[0], losses[::10]
    assert all(p.grad is None for n, p in student.named_parameters() if ".fmap." not in n)  # only φ learns


def test_hybrid_student_is_the_teacher_within_its_window():
    """Up to W tokens the hybrid is the softmax model exactly (no φ involved); past W, φ takes the older keys."""
    teacher = softmax_model(torch.float64, chunk_size=8, eps=1e-15)  # the hybrid's eps, in its denominator
    student = to_linear(teacher, "hedgehog", window=16).double()
    perturb_maps(student)
    x = torch.randint(4, 8, (2, 40))
    ref, out = teacher(x)[0], student(x)[0]
    assert close(ref[:, :16], out[:, :16], 1e-12)
    assert not close(ref[:, 16:], out[:, 16:], 1e-3)
    assert close(to_linear(teacher, "hedgehog", window=64).double()(x)[0], ref, 1e-12)  # W >= T: all softmax


def test_lora_merge_is_exact():
    student = to_linear(softmax_model(), "hedgehog")
    add_lora(student, rank=4, alpha=8.0)
    student = student.double()
    with torch.no_grad():
        for n, p in student.named_parameters():
            if n.endswith("lora_B"):
                p.normal_()
    x = torch.randint(4, 8, (2, 50))
    ref = student(x)[0]
    merged = merge_lora(student)
    assert not any("lora" in k for k in merged.state_dict())
    assert close(ref, merged(x)[0], 1e-12)


# ---- the exactness contract of converted models ------------------------------------------------------
@pytest.mark.parametrize("student_kind", STUDENTS)
@pytest.mark.parametrize(
    "dtype,tol", [pytest.param(torch.float64, 1e-10, id="f64"), pytest.param(torch.float32, 1e-4, id="f32")]
)
def test_converted_model_naive_chunked_recurrent_and_splits_agree(student_kind, dtype, tol):
    student = student_of(softmax_model(chunk_size=16), student_kind).to(dtype)
    perturb_maps(student)
    x = torch.randint(4, 8, (2, 77))
    ref, ref_state = student(x, mode="naive")
    for mode in ("chunked", "recurrent"):
        out, state = student(x, mode=mode)
        assert close(ref, out, tol), mode
        for a, b in zip(ref_state.layers, state.layers, strict=True):  # S, z, conv, pos (the hybrid's W buffers)
            for name, ta, tb in zip(a._fields, a, b, strict=True):
                assert (ta is None) == (tb is None) and (ta is None or close(ta, tb, tol)), (mode, name)
    for split in (1, 13, 16, 40):
        first, s = student(x[:, :split])
        second, _ = student(x[:, split:], s)
        assert close(ref, torch.cat([first, second], 1), tol), split
    state = student(x[:, :30])[1]
    steps = []
    for t in range(30, 77):
        logits, state = student.step(x[:, t], state)
        steps.append(logits)
    assert close(ref[:, 30:], torch.stack(steps, 1), tol)


@pytest.mark.parametrize("student_kind", STUDENTS)
def test_converted_model_gradients_agree_across_modes(student_kind):
    student = student_of(softmax_model(chunk_size=8), student_kind).double()
    perturb_maps(student)
    x = torch.randint(4, 8, (1, 29))
    _, s0 = student(x[:, :11])
    s0 = s0.map(lambda t: t.detach().requires_grad_(t.is_floating_point()))
    grads = {}
    for mode in ("naive", "chunked", "recurrent"):
        student.zero_grad()
        out, _ = student(x[:, 11:], s0, mode=mode)
        init = [t for s in s0.layers for t in (s.S, s.z, s.win_k, s.win_v) if t is not None]  # incl. the window buffer
        g = torch.autograd.grad(out.square().sum(), [*student.parameters(), *init])
        grads[mode] = g
    for mode in ("chunked", "recurrent"):
        for a, b in zip(grads["naive"], grads[mode], strict=True):
            assert close(a, b, 1e-9), mode


# ---- the Lightning run -------------------------------------------------------------------------------
@pytest.fixture
def softmax_dir(tmp_path) -> Path:
    path = tmp_path / "softmax"
    softmax_model().save(path, tokenizer="dna")
    return path


def dna_data(tmp: Path) -> DNADataModule:
    # 3 steps per epoch: a kill after step 3 lands on an epoch boundary (resumes exactly, as in test_train_e2e)
    return DNADataModule(paths=[LAMBDA], window=64, batch_size=4, samples_per_epoch=12, max_eval_windows=4,
                         cache_dir=str(tmp / "cache"))  # fmt: skip


def quick(tmp: Path, method: str, steps: int, distill_steps: int | None, run: str = "run", window=None,
          resume: bool = False, callbacks=()):  # fmt: skip
    args = ConvertArgs(str(tmp / "softmax"), str(tmp / "out"), method=method, distill_steps=distill_steps,
                       warmup_steps=1, window=window, steps=steps, val_every=3, limit_val_batches=1, log_every=1,
                       accelerator="cpu", progress=False, run_dir=str(tmp / run), ckpt_every=1, resume=resume)  # fmt: skip
    return run_conversion(args, dna_data(tmp), callbacks)


@pytest.mark.parametrize("method", ["t2r", "hedgehog", "lolcats"])
def test_convert_end_to_end_writes_a_plain_linear_model(tmp_path, softmax_dir, method):
    out = convert(ConvertArgs(str(softmax_dir), str(tmp_path / "out"), method=method, data=dna_data(tmp_path), steps=4,
                  distill_steps=2, warmup_steps=1, run_dir=str(tmp_path / "run"), val_every=2,
                  limit_val_batches=1, accelerator="cpu", progress=False))  # fmt: skip
    model = load(out)
    assert model.config.attention == "linear" and model.config.position == "rope"
    assert model.config.window == (64 if method == "lolcats" else 0)  # lolcats: the hybrid by default
    assert model.config.feature_map == ("t2r" if method == "t2r" else "hedgehog")
    assert model.meta["tokenizer"] == "dna" and model.meta["training"]["method"] == method
    teacher = load(softmax_dir)
    sd, t_sd = model.state_dict(), teacher.state_dict()
    if method == "lolcats":  # LoRA merged into q/k/v and out; everything else is the teacher's
        assert not torch.equal(sd["blocks.0.mixer.qkv.weight"], t_sd["blocks.0.mixer.qkv.weight"])
        assert torch.equal(sd["blocks.0.mlp.0.weight"], t_sd["blocks.0.mlp.0.weight"])
    else:
        assert not torch.equal(sd["blocks.0.mlp.0.weight"], t_sd["blocks.0.mlp.0.weight"])  # full fine-tuning
    ckpt_model = load(tmp_path / "run" / "checkpoints" / "last.ckpt")  # a conversion checkpoint is a plain model
    x = torch.randint(4, 8, (1, 40))
    assert torch.allclose(ckpt_model(x)[0], model(x)[0], atol=1e-6)


def test_converted_directory_scans_and_generates_unchanged(tmp_path, softmax_dir, capsys):
    out = tmp_path / "rnn"
    quick(tmp_path, "hedgehog", steps=2, distill_steps=1).save(out)
    track = tmp_path / "lambda.bedGraph"
    assert main(["scan", str(out), LAMBDA, "-o", str(track)]) == 0
    lines = track.read_text().splitlines()
    assert len(lines) > 100 and all(len(x.split("\t")) == 4 for x in lines[1:50])
    assert main(["generate", str(out), "--prompt", "ACGT", "--max_new_tokens", "20"]) == 0
    text = capsys.readouterr().out
    assert "ACGT" in text


def test_distillation_stage_trains_only_the_feature_maps(tmp_path, softmax_dir):
    model = quick(tmp_path, "hedgehog", steps=3, distill_steps=3)
    teacher = load(softmax_dir)
    t_sd = teacher.state_dict()
    changed = {k for k, v in model.state_dict().items() if k not in t_sd or not torch.equal(v, t_sd[k])}
    assert changed and all(".fmap." in k for k in changed)


def test_t2r_trains_the_whole_model_from_the_first_step(tmp_path, softmax_dir):
    model = quick(tmp_path, "t2r", steps=2, distill_steps=None)
    assert model.config.feature_map == "t2r"
    t_sd = load(softmax_dir).state_dict()
    sd = model.state_dict()
    assert not torch.equal(sd["blocks.1.mlp.2.weight"], t_sd["blocks.1.mlp.2.weight"])
    assert not torch.equal(sd["blocks.0.mixer.fmap.bias"], torch.zeros_like(sd["blocks.0.mixer.fmap.bias"]))


def test_resume_after_kill_continues_exactly(tmp_path, softmax_dir):
    """lolcats (the hybrid, W=16 < the 64-token windows) across the stage switch (distill 2 steps, LoRA after):
    killed at 3, resumed to 6 == straight."""
    straight = quick(tmp_path, "lolcats", steps=6, distill_steps=2, run="a", window=16)
    with pytest.raises(Killed):
        quick(tmp_path, "lolcats", steps=6, distill_steps=2, run="b", window=16, callbacks=(KillAt(3),))
    assert torch.load(tmp_path / "b" / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 3
    resumed = quick(tmp_path, "lolcats", steps=6, distill_steps=2, run="b", window=16, resume=True)
    assert resumed.config.window == 16
    assert resumed.meta["training"]["global_step"] == 6
    for (n, p), q in zip(straight.state_dict().items(), resumed.state_dict().values(), strict=True):
        assert torch.equal(p, q), n


def test_tbptt_conversion_carries_the_state_across_windows_and_resumes_exactly(tmp_path, softmax_dir):
    """``long_context: tbptt`` (sequential data): both stages step under manual optimization, the state read at
    each fine-tuning window is the one the previous window left (not a fresh one), and a kill mid-run resumes
    to the same weights as a straight run."""

    def run(run_dir: str, resume: bool = False, callbacks=()):
        args = ConvertArgs(str(softmax_dir), str(tmp_path / "out"), method="lolcats", distill_steps=2, warmup_steps=1,
                           window=16, steps=6, val_every=3, limit_val_batches=1, log_every=1, accelerator="cpu",
                           progress=False, run_dir=str(tmp_path / run_dir), ckpt_every=1, resume=resume,
                           long_context="tbptt")  # fmt: skip
        dm = DNADataModule(paths=[LAMBDA], window=64, batch_size=4, sequential=True, max_eval_windows=4,
                           cache_dir=str(tmp_path / "cache"))  # fmt: skip
        return run_conversion(args, dm, callbacks)

    seen = []

    class Spy(L.Callback):
        def on_train_batch_start(self, trainer, task, batch, batch_idx):
            carried = task._carried.get("train")
            seen.append(None if carried is None else int(carried.layers[0].pos[0]))

    straight = run("a", callbacks=(Spy(),))
    assert straight.meta["training"]["global_step"] == 6
    # distillation (batches 0, 1): windows cut into rows, no state; fine-tuning: lane 0 walks on, 64 bases a window
    assert seen == [None, None, None, 64, 128, 192]
    with pytest.raises(Killed):
        run("b", callbacks=(KillAt(4),))
    resumed = run("b", resume=True)
    for (n, p), q in zip(straight.state_dict().items(), resumed.state_dict().values(), strict=True):
        assert torch.equal(p, q), n


def test_the_dna_recipe_streams_a_genome_without_drift(tmp_path):
    """A converted RNN runs one state over a whole genome. With the recipe of configs/convert/dna-tiny.yaml
    (per-head decay of the linear part, the state carried across fine-tuning windows) a small student streamed
    over 200 kb scores what it scores on the same positions read in fresh 64-base windows, within 0.005
    bits/base; the recipe without them (no decay, fresh windows) drifts beyond that (+0.012 when written)."""
    import numpy as np
    import yaml

    from benchmarks.convert import windowed_and_streamed

    genome = str(REPO / "data" / "genomes" / "h_pylori_G27.fasta.gz")
    teacher = tmp_path / "teacher"
    fit = ["fit", "--config", str(REPO / "configs" / "dna" / "tiny-cpu.yaml"), "--model.model.attention", "softmax",
           "--model.model.d_model", "32", "--trainer.max_steps", "150", "--trainer.enable_progress_bar", "false",
           "--trainer.logger", "false", "--data.init_args.window", "64", "--trainer.val_check_interval", "1000",
           "--checkpoint.dirpath", str(tmp_path / "ck")]  # fmt: skip
    assert main(fit) == 0
    assert main(["export", str(tmp_path / "ck" / "last.ckpt"), str(teacher)]) == 0
    recipe = yaml.safe_load((REPO / "configs" / "convert" / "dna-tiny.yaml").read_text())
    drift = {}
    for name, decay, context in (("recipe", recipe["decay"], recipe["long_context"]), ("plain", None, "full")):
        args = ConvertArgs(str(teacher), str(tmp_path / name), method="lolcats", distill_steps=20, warmup_steps=2,
                           window=32, steps=40, val_every=10**9, limit_val_batches=0, log_every=10, accelerator="cpu",
                           progress=False, run_dir=str(tmp_path / f"{name}-run"), ckpt_every=10**9, decay=decay,
                           long_context=context, lr=recipe["lr"], distill_lr=recipe["distill_lr"])  # fmt: skip
        dm = DNADataModule(paths=[genome], window=64, batch_size=8, sequential=context == "tbptt",
                           samples_per_epoch=1000, cache_dir=str(tmp_path / "cache"))  # fmt: skip
        student = run_conversion(args, dm)
        ids = np.asarray(dm.genome.fetch(next(iter(dm.genome.lengths)), 0, 200_000))
        r = windowed_and_streamed(student, ids, np.ones(len(ids), bool), 64, 16)
        drift[name] = r["streamed"] - r["windowed"]
    assert abs(drift["recipe"]) < 0.005, drift
    assert drift["plain"] > 0.005, drift  # the tolerance is one that the recipe's absence fails


# ---- bad input: one line, exit 2, nothing written ---------------------------------------------------
def run_cli(tmp: Path, model: Path, *extra: str) -> int:
    args = ["convert", str(model), str(tmp / "out"), "--data.class_path", "strandline.data.dna_datamodule.DNADataModule",
            "--data.init_args.paths", f"[{LAMBDA}]", "--run_dir", str(tmp / "run"), "--steps", "2", *extra]  # fmt: skip
    return main(args)


def assert_refused(tmp: Path, capsys, rc: int, match: str) -> None:
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "Traceback" not in err and match in err, err
    assert not (tmp / "out").exists() and not (tmp / "run").exists()


def test_cli_refuses_a_linear_model(tmp_path, capsys):
    path = tmp_path / "linear"
    LinearTransformerLM(ModelConfig(vocab_size=16, d_model=32, n_layers=1, n_heads=4)).save(path, tokenizer="dna")
    assert_refused(tmp_path, capsys, run_cli(tmp_path, path), "already 'linear'")


def test_cli_refuses_a_file_that_is_not_a_model(tmp_path, capsys):
    bogus = tmp_path / "notes.txt"
    bogus.write_text("not a model\n")
    assert_refused(tmp_path, capsys, run_cli(tmp_path, bogus), "notes.txt")


def test_cli_refuses_a_tokenizer_mismatch(tmp_path, capsys, softmax_dir):
    docs = tmp_path / "docs.txt"
    docs.write_text("some text\n")
    args = ["convert", str(softmax_dir), str(tmp_path / "out"), "--data.class_path", "strandline.data.text_datamodule.TextDataModule",
            "--data.init_args.train", str(docs), "--run_dir", str(tmp_path / "run")]  # fmt: skip
    assert_refused(tmp_path, capsys, main(args), "'dna' tokens but the data gives 'bytes'")


def test_cli_refuses_an_existing_output_and_a_run_to_resume_that_is_not_there(tmp_path, capsys, softmax_dir):
    assert_refused(tmp_path, capsys, run_cli(tmp_path, softmax_dir, "--resume"), "no conversion run to resume")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "mine.txt").write_text("keep me")
    rc = run_cli(tmp_path, softmax_dir)
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "not an empty directory" in err and len(err.splitlines()) == 1
    assert (tmp_path / "out" / "mine.txt").read_text() == "keep me" and not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "option,low",
    [(["--steps", "0"], 1), (["--distill_len", "0"], 1), (["--lora_rank", "0"], 1), (["--window", "-1"], 0)],
)
def test_cli_refuses_bad_numbers(tmp_path, capsys, softmax_dir, option, low):
    assert_refused(tmp_path, capsys, run_cli(tmp_path, softmax_dir, *option), f"must be >= {low}")


@pytest.mark.parametrize("name", ["dna-tiny.yaml", "text-tiny.yaml"])
def test_convert_configs_parse_and_build_their_data(name, monkeypatch):
    from strandline.app.cli import COMMANDS, build_parser
    from strandline.tasks.convert_args import datamodule

    monkeypatch.chdir(REPO)  # data paths in the recipes are relative to the repo root
    parser, _ = build_parser("convert", COMMANDS["convert"])
    cfg = parser.parse_args(["model", "out", "--config", str(REPO / "configs" / "convert" / name)])
    assert cfg.method in ("t2r", "hedgehog", "lolcats") and 0 < cfg.distill_steps < cfg.steps and cfg.window > 0
    dm = datamodule(cfg.as_dict()["data"])
    assert datamodule_tokenizer(dm) == ("dna" if name.startswith("dna") else "bytes")


def test_text_data_module_reports_bytes():
    assert datamodule_tokenizer(TextDataModule(train="x.txt")) == "bytes"
    assert datamodule_tokenizer(DNADataModule(paths=[LAMBDA])) == "dna"


def test_every_data_module_declares_its_tokenizer():
    """The tokenizer check asks the data module: each one in data/ says what it gives, no table of classes."""
    import importlib
    import inspect
    import pkgutil

    import lightning as L

    import strandline.data
    from strandline.data.copy_task import CopyTaskDataModule

    found = {}
    for info in pkgutil.iter_modules(strandline.data.__path__):
        module = importlib.import_module(f"strandline.data.{info.name}")
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, L.LightningDataModule) and cls.__module__ == module.__name__:
                found[cls.__name__] = cls.tokenizer_kind
    assert found == {"DNADataModule": "dna", "TextDataModule": "bytes", "CopyTaskDataModule": "copy"}
    assert datamodule_tokenizer(CopyTaskDataModule()) == "copy"
    assert datamodule_tokenizer(L.LightningDataModule()) is None  # a module that does not say: nothing checked

    class Declared(L.LightningDataModule):
        @property
        def tokenizer_kind(self) -> str:
            return "bytes"

    assert datamodule_tokenizer(Declared()) == "bytes"  # a property works as well as a class attribute


@pytest.mark.slow
def test_cli_convert_survives_sigkill_and_resumes(tmp_path, softmax_dir):
    """`strandline convert` killed with SIGKILL mid-run continues from last.ckpt with --resume."""
    import os
    import subprocess
    import sys

    args = [sys.executable, "-m", "strandline.app.cli", "convert", str(softmax_dir), str(tmp_path / "out"),
            "--config", str(REPO / "configs" / "convert" / "dna-tiny.yaml"), "--data.init_args.paths", f"[{LAMBDA}]",
            "--data.init_args.window", "64", "--data.init_args.batch_size", "4",
            "--data.init_args.cache_dir", str(tmp_path / "cache"), "--steps", "40", "--distill_steps", "10",
            "--ckpt_every", "1", "--val_every", "20", "--run_dir", str(tmp_path / "run"), "--no_progress"]  # fmt: skip
    env = {**os.environ, "WANDB_MODE": "disabled"}
    last = tmp_path / "run" / "checkpoints" / "last.ckpt"
    killed_at = sigkill_after_checkpoint(args, env, last)
    assert 2 <= killed_at < 40 and not (tmp_path / "out").exists()
    done = subprocess.run([*args, "--resume"], cwd=REPO, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert torch.load(last, weights_only=True)["global_step"] == 40
    assert load(tmp_path / "out").meta["training"]["global_step"] == 40
