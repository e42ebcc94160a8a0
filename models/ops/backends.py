"""Which kernel runs an attention op: the pure-torch op (everywhere; the reference) or flash-linear-attention.

On CUDA, ``"auto"`` picks flash-linear-attention's Triton kernels (``fla-core``, the ``gpu`` extra) for the
chunked mode (``chunk_*``: training, known sequences) and the recurrent mode (``fused_recurrent_*``: token
streams), and the pure-torch op everywhere else (CPU, float64 compute, the naive mode, fla absent). Each
Strandline variant maps onto an unnormalized FLA op with scale 1 and the same [B, T, H, ·] layout:

- the paper's op (``ops.linear_attention``, φ applied, fixed per-head γ): ``simple_gla`` with
  ``g_gamma = log γ`` (or no decay), on v' = [v, 1, 0…] padded to a multiple of 16 columns, so that
  one kernel gives the numerator and the denominator q·z: out = o'[:V] / (o'[V] + eps), S' = [S, z];
- the gated op (``ops_gated``): ``simple_gla`` with the per-token ``g = log α`` (v' = [v, 1] when
  normalized);
- the delta rule (``ops_delta``): ``delta_rule``, or ``gated_delta_rule`` with ``g = log α``.

The state contract holds: state in and out (``initial_state`` / ``output_final_state``), float32 state
under bf16 compute. A float64 state (chromosome-length scans) is kept exact by running the kernel from a
zero float32 state and adding the carried state outside: out += Γ_t q_tᵀ S_old and S = Γ_T S_old + ΔS
(Γ: the cumulative decay). The delta rule's transition is not diagonal, so a float64 delta state
stays on the pure-torch op.

``STRANDLINE_BACKEND`` (``auto`` | ``torch`` | ``fla``) sets the default. With ``TRITON_INTERPRET=1``
FLA's kernels run on CPU in Triton's interpreter (slowly): that is how their exactness against the pure
op is tested without a GPU (tests/test_backends.py).
"""

from __future__ import annotations

import functools
import os
from typing import Literal

import torch
from torch import Tensor

from strandline.errors import UserInputError

Backend = Literal["auto", "torch", "fla"]
KERNEL_DTYPES = (torch.float16, torch.bfloat16, torch.float32)  # Triton's tl.dot: no float64


class BackendError(UserInputError):
    """A requested backend cannot run this call; the message says why."""


def default_backend() -> Backend:
    value = os.environ.get("STRANDLINE_BACKEND", "auto")
    if value not in ("auto", "torch", "fla"):
        raise BackendError(f"STRANDLINE_BACKEND must be auto, torch or fla, got {value!r}")
    return value  # type: ignore[return-value]


@functools.cache
def fla_status() -> str | None:
    """None when flash-linear-attention's ops import here, else why not (one line)."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        _patch_triton_interpreter()
    try:
        import fla.ops.delta_rule  # noqa: F401
        import fla.ops.gated_delta_rule  # noqa: F401
        import fla.ops.simple_gla  # noqa: F401
    except Exception as e:  # ImportError, or Triton failing to find a driver
        return f"flash-linear-attention is not usable ({type(e).__name__}: {e}); pip install -e '.[gpu]'"
    return None


def choose(
    requested: Backend,
    device_type: str,
    dtype: torch.dtype,
    state_dtype: torch.dtype,
    mode: str,
    fla_error: str | None,
    float64_state_ok: bool = True,
    chunk_float32_ok: bool = True,
) -> Literal["torch", "fla"]:
    """The backend for one call; pure, so the selection rules are testable without a GPU.

    ``auto``: fla on CUDA when it imports and the call fits its kernels, else torch. ``fla``: fla or a
    ``BackendError`` saying why not (on CPU only Triton's interpreter can run it). ``torch``: torch.
    """
    if requested not in ("auto", "torch", "fla"):
        raise BackendError(f"backend must be auto, torch or fla, got {requested!r}")
    if requested == "torch" or (requested == "auto" and device_type != "cuda"):
        return "torch"
    why = None
    if mode not in ("chunked", "recurrent"):
        why = f"mode {mode!r} is the pure-torch reference"
    elif dtype not in KERNEL_DTYPES:
        why = f"its kernels take float16/bfloat16/float32, not {dtype}"
    elif dtype == torch.float32 and mode == "chunked" and not chunk_float32_ok:
        why = "its chunked kernel of this op takes bfloat16/float16 only"
    elif state_dtype not in (torch.float32, torch.float64) or (state_dtype == torch.float64 and not float64_state_ok):
        why = f"a {state_dtype} state of this op stays on the pure-torch op"
    elif fla_error is not None:
        why = fla_error
    elif device_type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
        why = "it needs CUDA (or TRITON_INTERPRET=1 to run its kernels on CPU, slowly)"
    if why is None:
        return "fla"
    if requested == "fla":
        raise BackendError(f"backend 'fla' cannot run this call: {why}")
    return "torch"


def use_fla(backend: Backend | None, q: Tensor, state_dtype: torch.dtype, mode: str, delta: bool = False) -> bool:
    """True when this call goes to flash-linear-attention (cheap on CPU: no import is tried there).

    ``delta``: the delta rule, whose FLA kernels keep a float32 state only and whose chunked kernel
    refuses float32 inputs (FLA 0.6: "use bfloat16").
    """
    backend = default_backend() if backend is None else backend
    if backend == "torch" or (backend == "auto" and q.device.type != "cuda"):
        return False
    ok = not delta
    return choose(backend, q.device.type, q.dtype, state_dtype, mode, fla_status(), ok, ok) == "fla"


def use_fla_delta(backend: Backend | None, q: Tensor, state_dtype: torch.dtype, mode: str, gated: bool, *xs) -> bool:
    """``use_fla`` for the delta rule; FLA's gated recurrent kernel has no backward, so it serves only
    calls without gradients (decoding) and gradient-carrying ones stay on the pure op (``xs``: the inputs)."""
    if not use_fla(backend, q, state_dtype, mode, delta=True):
        return False
    grad = torch.is_grad_enabled() and any(x is not None and x.requires_grad for x in (q, *xs))
    if gated and mode == "recurrent" and grad:
        if (default_backend() if backend is None else backend) == "fla":
            raise BackendError(
                "backend 'fla' cannot run this call: its gated delta-rule recurrent kernel has no backward"
            )
        return False
    return True


def _pad_ones(v: Tensor, normalize: bool) -> Tensor:
    """v' = [v, 1, 0…] (or [v, 0…]) with a multiple of 16 columns: the kernels' tiles, and the z column."""
    B, T, H, V = v.shape
    width = -(-(V + normalize) // 16) * 16
    out = v.new_zeros(B, T, H, width)
    out[..., :V] = v
    if normalize:
        out[..., V] = 1
    return out


def _pad_state(S: Tensor, z: Tensor | None, width: int) -> Tensor:
    """[S, z, 0…] with ``width`` columns, as the kernels' state [B, H, K, width]."""
    parts = [S] if z is None else [S, z.unsqueeze(-1)]
    pad = width - S.shape[-1] - (z is not None)
    return torch.cat(parts + [S.new_zeros(*S.shape[:-1], pad)], -1)


def fla_additive(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    S0: Tensor,
    z0: Tensor | None,
    log_g: Tensor | None,
    log_alpha: Tensor | None,
    mode: str,
    eps: float,
) -> tuple[Tensor, Tensor, Tensor | None]:
    """Additive linear attention through ``simple_gla``: the paper's op (fixed γ) and the gated op.

    Args:
        q, k: [B, T, H, K] (φ applied); v: [B, T, H, V]; all in one kernel dtype.
        S0: [B, H, K, V] state (float32 or float64); z0: [B, H, K], or None for the unnormalized gated op.
        log_g: [H] log γ (float64) or None; log_alpha: [B, T, H] per-token log gate or None (not both).
        mode: "chunked" (``chunk_simple_gla``) or "recurrent" (``fused_recurrent_simple_gla``).

    Returns:
        out [B, T, H, V] in q's dtype, S [B, H, K, V] and z [B, H, K] (or None) in S0's dtype.
    """
    from fla.ops.simple_gla import chunk_simple_gla, fused_recurrent_simple_gla

    normalize = z0 is not None
    B, T, H, K = q.shape
    V = v.shape[-1]
    v1 = _pad_ones(v, normalize)
    exact = S0.dtype == torch.float32  # else: run from zero, add the float64 state outside (module docstring)
    S_init = _pad_state(S0, z0, v1.shape[-1]) if exact else None
    g = None if log_alpha is None else log_alpha.float()
    gamma = None if log_g is None else log_g.float()
    fn = chunk_simple_gla if mode == "chunked" else fused_recurrent_simple_gla
    with torch.autocast(q.device.type, enabled=False):
        o, ht = fn(q, k, v1, g=g, g_gamma=gamma, scale=1.0, initial_state=S_init, output_final_state=True)
        o = o[..., : V + normalize]
        if not exact:
            cum = _cumulative_log_decay(log_g, log_alpha, B, T, H, q.device)  # [B, T, H] log Γ_t, float64
            S_old = _pad_state(S0, z0, V + normalize)
            o = o + torch.einsum("bthk,bhkv->bthv", q * cum.exp().to(q.dtype)[..., None], S_old.to(q.dtype))
            ht = S_old * cum[:, -1].exp()[..., None, None] + ht[..., : V + normalize].to(S0.dtype)
    out = o[..., :V] / (o[..., V:] + eps) if normalize else o
    ht = ht.to(S0.dtype)
    return out.to(q.dtype), ht[..., :V], ht[..., V] if normalize else None


def _cumulative_log_decay(log_g, log_alpha, B: int, T: int, H: int, device) -> Tensor:
    """log Γ_t = Σ_{s<=t} log α_s as [B, T, H] float64 (fixed γ: (t+1) log γ)."""
    if log_alpha is not None:
        return log_alpha.to(torch.float64).cumsum(1)
    if log_g is None:
        return torch.zeros(B, T, H, dtype=torch.float64, device=device)
    t = torch.arange(1, T + 1, dtype=torch.float64, device=device)
    return (t[:, None] * log_g.to(device)[None, :]).expand(B, T, H)


def fla_delta(
    q: Tensor, k: Tensor, v: Tensor, beta: Tensor, log_alpha: Tensor | None, S0: Tensor, mode: str
) -> tuple[Tensor, Tensor]:
    """The (gated) delta rule through ``delta_rule`` / ``gated_delta_rule``; S0 [B, H, K, V] float32.

    Returns out [B, T, H, V] in q's dtype and S [B, H, K, V] float32. Keys and queries come L2-normalized
    (the kernels' own normalization stays off: the pure op does not renormalize either).
    """
    from fla.ops.delta_rule import chunk_delta_rule, fused_recurrent_delta_rule
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule, fused_recurrent_gated_delta_rule

    V = v.shape[-1]
    v1 = _pad_ones(v, False)
    S_init = _pad_state(S0, None, v1.shape[-1])
    b = beta.to(q.dtype)
    with torch.autocast(q.device.type, enabled=False):
        if log_alpha is None:
            fn = chunk_delta_rule if mode == "chunked" else fused_recurrent_delta_rule
            o, ht = fn(q, k, v1, beta=b, scale=1.0, initial_state=S_init, output_final_state=True)
        else:
            fn = chunk_gated_delta_rule if mode == "chunked" else fused_recurrent_gated_delta_rule
            g = log_alpha.float()
            o, ht = fn(q, k, v1, g=g, beta=b, scale=1.0, initial_state=S_init, output_final_state=True)
    return o[..., :V].to(q.dtype), ht[..., :V].to(S0.dtype)


def _patch_triton_interpreter() -> None:
    """Let FLA's kernels run in Triton's CPU interpreter (tests only; nothing changes on a GPU).

    Two gaps of the interpreter (triton 3.x): (1) an autotuner with several configs benchmarks them
    through a GPU driver, which does not exist: keep the first config instead (numerics do not depend
    on the tile sizes); (2) a loop variable of ``for i in range(n)`` stays a Python int, while compiled
    kernels see a tensor (FLA calls ``i.to(tl.int64)``): rewrite each loop to wrap it as one.
    """
    import ast

    from triton.runtime import autotuner, interpreter

    if getattr(interpreter.ASTTransformer, "_strandline_patched", False):
        return
    prune = autotuner.Autotuner.prune_configs
    autotuner.Autotuner.prune_configs = lambda self, kwargs: prune(self, kwargs)[:1]

    def visit_For(self, node):
        node = self.generic_visit(node)
        if isinstance(node.target, ast.Name):
            name = node.target.id
            to_tensor = ast.Attribute(ast.Name(id="interpreter_semantic", ctx=ast.Load()), "to_tensor", ast.Load())
            call = ast.Call(func=to_tensor, args=[ast.Name(id=name, ctx=ast.Load()), ast.Constant(False)], keywords=[])
            node.body.insert(
                0, ast.copy_location(ast.Assign(targets=[ast.Name(id=name, ctx=ast.Store())], value=call), node)
            )
            ast.fix_missing_locations(node)
        return node

    interpreter.ASTTransformer.visit_For = visit_For
    interpreter.ASTTransformer._strandline_patched = True
