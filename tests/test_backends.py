"""Backend selection and fallback (CPU, fast) and the flash-linear-attention path's exactness against the pure op.

The FLA kernels run here on CPU through Triton's interpreter (``TRITON_INTERPRET=1``, in a fresh process;
slow-marked, ~20 s); on a GPU the same comparisons run compiled (marker ``gpu``).
"""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from strandline.errors import UserInputError
from strandline.models.ops import backends
from strandline.models.ops.backends import BackendError, choose, use_fla
from strandline.models.ops.linear import AttnState, linear_attention

F32, F64, BF16 = torch.float32, torch.float64, torch.bfloat16


@pytest.mark.parametrize(
    "requested,device,dtype,sd,mode,err,expected",
    [
        pytest.param("auto", "cpu", F32, F32, "chunked", None, "torch", id="auto-cpu"),
        pytest.param("auto", "cuda", F32, F32, "chunked", None, "fla", id="auto-cuda-chunked"),
        pytest.param("auto", "cuda", BF16, F32, "recurrent", None, "fla", id="auto-cuda-recurrent-bf16"),
        pytest.param("auto", "cuda", F32, F64, "chunked", None, "fla", id="auto-cuda-f64-state"),
        pytest.param("auto", "cuda", F64, F64, "chunked", None, "torch", id="auto-cuda-f64-compute"),
        pytest.param("auto", "cuda", F32, F32, "naive", None, "torch", id="auto-cuda-naive"),
        pytest.param("auto", "cuda", F32, F32, "chunked", "no fla", "torch", id="auto-cuda-fla-missing"),
        pytest.param("torch", "cuda", F32, F32, "chunked", None, "torch", id="torch-cuda"),
        pytest.param("fla", "cuda", F32, F32, "chunked", None, "fla", id="fla-cuda"),
    ],
)
def test_choose(requested, device, dtype, sd, mode, err, expected):
    assert choose(requested, device, dtype, sd, mode, err) == expected


@pytest.mark.parametrize(
    "kwargs,match",
    [
        pytest.param({"device_type": "cpu"}, "needs CUDA", id="cpu-without-interpreter"),
        pytest.param({"dtype": F64}, "float64", id="f64-compute"),
        pytest.param({"mode": "naive"}, "reference", id="naive"),
        pytest.param({"fla_error": "flash-linear-attention is not usable"}, "not usable", id="not-installed"),
        pytest.param({"state_dtype": F64, "float64_state_ok": False}, "float64 state", id="delta-f64-state"),
        pytest.param({"chunk_float32_ok": False}, "bfloat16/float16 only", id="delta-chunk-f32"),
        pytest.param({"requested": "cudnn"}, "auto, torch or fla", id="bad-name"),
    ],
)
def test_forced_fla_says_why_not(monkeypatch, kwargs, match):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    args = dict(requested="fla", device_type="cuda", dtype=F32, state_dtype=F32, mode="chunked", fla_error=None)
    with pytest.raises(BackendError, match=match) as e:
        choose(**{**args, **kwargs})
    assert isinstance(e.value, UserInputError) and "\n" not in str(e.value)  # the CLI prints it as one line


def test_cpu_auto_never_tries_fla(monkeypatch):
    """On CPU, auto is the pure op without importing anything (the hot path of every CPU call)."""

    def boom():
        raise AssertionError("fla_status must not be consulted on CPU")

    monkeypatch.setattr(backends, "fla_status", boom)
    monkeypatch.delenv("STRANDLINE_BACKEND", raising=False)
    q = torch.rand(1, 8, 2, 4)
    assert not use_fla(None, q, F32, "chunked")
    assert not use_fla("auto", q, F32, "recurrent")
    out, _ = linear_attention(q, q, q)  # runs, on the pure op
    assert out.shape == q.shape


def test_environment_default(monkeypatch):
    monkeypatch.setenv("STRANDLINE_BACKEND", "torch")
    assert backends.default_backend() == "torch"
    monkeypatch.setenv("STRANDLINE_BACKEND", "fast")
    with pytest.raises(BackendError, match="STRANDLINE_BACKEND"):
        backends.default_backend()


@pytest.mark.parametrize("status,match", [(None, "needs CUDA"), ("flash-linear-attention is not usable", "not usable")])
def test_forced_fla_on_cpu_is_one_clear_error(monkeypatch, status, match):
    """Forced fla where it cannot run: one BackendError line (fla itself is not imported: status is faked)."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(backends, "fla_status", lambda: status)
    q = torch.rand(1, 8, 2, 4)
    with pytest.raises(BackendError, match=match):
        linear_attention(q, q, q, backend="fla")
    out, _ = linear_attention(q, q, q, backend="torch")  # and the fallback is always there
    assert torch.isfinite(out).all()


# ---- exactness of the FLA path against the pure op ----


def make(T, H, K, V, sd, device="cpu", seed=0):
    g = torch.Generator().manual_seed(seed)
    q = F.elu(torch.randn(1, T, H, K, generator=g)) + 1
    k = F.elu(torch.randn(1, T, H, K, generator=g)) + 1
    v = torch.randn(1, T, H, V, generator=g)
    S0, z0 = torch.rand(1, H, K, V, generator=g, dtype=sd), torch.rand(1, H, K, generator=g, dtype=sd)
    return [x.to(device) for x in (q, k, v, S0, z0)]


def run(backend, mode, decay, inputs, sd):
    """Outputs, final state and the gradients of all five inputs, initial state included."""
    xs = [x.clone().requires_grad_() for x in inputs]
    out, st = linear_attention(*xs[:3], AttnState(*xs[3:]), mode=mode, decay=decay, backend=backend, state_dtype=sd)
    w = torch.linspace(-1, 1, out.numel(), device=out.device).view(out.shape)
    ((out.float() * w).sum() + st.S.sum() + 0.3 * st.z.sum()).backward()
    return [out, st.S, st.z] + [x.grad for x in xs]


def assert_all_close(got, ref, tol):
    names = ("out", "S", "z", "dq", "dk", "dv", "dS0", "dz0") if len(got) == 8 else range(len(got))
    assert len(got) == len(ref)
    for name, a, b in zip(names, got, ref, strict=True):
        err = (a.double() - b.double()).abs().max() / b.double().abs().max()
        assert err <= tol, f"{name}: relative error {err:.2e} > {tol:.0e}"


CASES = [
    pytest.param("chunked", None, F32, id="chunked"),
    pytest.param("chunked", [1.0, 0.9], F32, id="chunked-decay"),
    pytest.param("chunked", [0.99, 0.9], F64, id="chunked-decay-f64-state"),
    pytest.param("recurrent", None, F32, id="recurrent"),
    pytest.param("recurrent", [1.0, 0.9], F64, id="recurrent-decay-f64-state"),
]


def check_in_interpreter() -> None:
    """Every case, FLA against the pure op; run as a script with TRITON_INTERPRET=1 (see below)."""
    for p in CASES:
        mode, decay, sd = p.values
        inputs = make(70, 2, 16, 16, sd)  # T=70: a chunk of 64 and a shorter one
        assert_all_close(run("fla", mode, decay, inputs, sd), run("torch", mode, decay, inputs, sd), 2e-5)
        print("ok", p.id, flush=True)
    # the state handed from one FLA call to the next is the pure op's state
    q, k, v, _, _ = make(90, 2, 16, 16, F32)
    ref, st_ref = linear_attention(q, k, v, decay=0.95, backend="torch")
    o1, s1 = linear_attention(q[:, :37], k[:, :37], v[:, :37], decay=0.95, backend="fla")
    o2, s2 = linear_attention(q[:, 37:], k[:, 37:], v[:, 37:], s1, decay=0.95, backend="fla")
    torch.testing.assert_close(torch.cat([o1, o2], 1), ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(s2.S, st_ref.S, rtol=1e-5, atol=1e-4)
    print("ok split", flush=True)
    for name, fn in VARIANTS.items():
        assert_all_close(fn("fla"), fn("torch"), 2e-5)
        print("ok", name, flush=True)


def _variant(op: str, gate: bool, normalize: bool = True, mode: str = "chunked", grad: bool = True):
    """A run of the gated op or the delta rule: outputs, final S, and the gradients of q, k, v, S0 (and the gate)."""

    def go(backend):
        from strandline.models.ops.delta import delta_rule_attention
        from strandline.models.ops.gated import gated_linear_attention

        g = torch.Generator().manual_seed(1)
        q, k, v, S0, z0 = make(70, 2, 16, 16, F32, seed=2)
        if op == "delta":
            q, k = F.normalize(q - 1.5, dim=-1), F.normalize(k - 1.5, dim=-1)
        la = (F.logsigmoid(torch.randn(1, 70, 2, generator=g) + 3) / 4).requires_grad_(gate)
        beta = torch.rand(1, 70, 2, generator=g).requires_grad_()
        xs = [x.clone().requires_grad_(grad) for x in (q, k, v, S0, z0)]
        if not grad:
            la, beta = la.detach(), beta.detach()
        if op == "delta":
            st0 = AttnState(xs[3], None)
            out, st = delta_rule_attention(*xs[:3], beta, la if gate else None, st0, mode=mode, backend=backend)
        else:
            st0 = AttnState(xs[3], xs[4] if normalize else None)
            out, st = gated_linear_attention(
                *xs[:3], la if gate else None, st0, mode=mode, normalize=normalize, backend=backend
            )
        if not grad:
            return [out, st.S]
        w = torch.linspace(-1, 1, out.numel()).view(out.shape)
        ((out * w).sum() + st.S.sum()).backward()
        grads = [x.grad for x in xs[:4]] + ([la.grad] if gate else []) + ([beta.grad] if op == "delta" else [])
        return [out, st.S] + grads

    return go


VARIANTS = {
    "gated-normalized": _variant("gated", True),
    "gated-unnormalized": _variant("gated", True, normalize=False),
    "gated-recurrent": _variant("gated", True, mode="recurrent"),
    "delta-recurrent": _variant("delta", False, mode="recurrent"),  # FLA's chunked delta kernel: bf16 only
    "gated-delta-recurrent-nograd": _variant("delta", True, mode="recurrent", grad=False),  # FLA: no backward
}


@pytest.mark.slow
def test_fla_matches_pure_op_in_interpreter():
    """FLA's Triton kernels on CPU, in Triton's interpreter: outputs, states and all gradients (~20 s).

    A fresh process, because TRITON_INTERPRET must be set before Triton is first imported (Lightning
    imports it, so any earlier test module would have loaded it in compiled mode).
    """
    if importlib.util.find_spec("fla") is None or importlib.util.find_spec("triton") is None:
        pytest.skip("optional gpu extra not installed (pip install -e '.[gpu]')")
    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(root), OMP_NUM_THREADS="1")
    r = subprocess.run([sys.executable, __file__], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    expected = [w for p in CASES for w in ("ok", p.id)] + ["ok", "split"] + [w for n in VARIANTS for w in ("ok", n)]
    assert r.stdout.split() == expected


@pytest.mark.slow
def test_gpu_benchmark_smoke_on_cpu():
    """benchmarks/gpu.py --device cpu --quick: every section's code path runs and the table is printed (~15 s)."""
    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=str(root), OMP_NUM_THREADS="1")
    env.pop("TRITON_INTERPRET", None)
    cmd = [sys.executable, str(root / "benchmarks/gpu.py"), "--device", "cpu", "--quick"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    table = r.stdout.split("# one table")[1]
    for section in ("exact", "op", "train", "scan"):
        assert f"\n{section} " in table, section
    assert "softmax baseline" in table and "bases/s" in table


@pytest.mark.gpu
@pytest.mark.parametrize("mode,decay,sd", CASES)
def test_fla_matches_pure_op_on_gpu(mode, decay, sd):
    if backends.fla_status() is not None:
        pytest.skip(backends.fla_status())
    inputs = make(1000, 4, 64, 64, sd, device="cuda")
    assert_all_close(run("fla", mode, decay, inputs, sd), run("torch", mode, decay, inputs, sd), 1e-4)


@pytest.mark.gpu
def test_fla_bf16_keeps_float32_state_on_gpu():
    if backends.fla_status() is not None:
        pytest.skip(backends.fla_status())
    q, k, v, _, _ = make(4096, 4, 64, 64, F32, device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out, st = linear_attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), decay=0.999)
    ref, st_ref = linear_attention(q, k, v, decay=0.999, backend="torch")
    assert st.S.dtype == torch.float32 and out.dtype == torch.bfloat16
    assert (out.float() - ref).abs().max() / ref.abs().max() < 3e-2
    assert (st.S - st_ref.S).abs().max() / st_ref.S.abs().max() < 1e-2


if __name__ == "__main__":
    check_in_interpreter()
