"""The chunked delta rule across several blocks, with and without its gate (the plain rule's backward
skips the gate's gradient), against the naive per-token recurrence."""

import pytest
import torch
import torch.nn.functional as F
from test_ops import assert_close

from strandline.models.ops.delta import delta_rule_attention
from strandline.models.ops.linear import AttnState


@pytest.mark.parametrize("gated", [False, True], ids=["plain", "gated"])
@pytest.mark.parametrize("budget", [1, 3000, 1 << 19], ids=["one-chunk-blocks", "few-chunk-blocks", "default"])
def test_chunked_delta_matches_naive_across_blocks(monkeypatch, gated, budget):
    import strandline.models.ops.delta as od

    monkeypatch.setattr(od, "BLOCK_ELEMS", budget)
    g = torch.Generator().manual_seed(7)
    B, T, H, K, V = 2, 83, 2, 6, 5
    leaves = {
        "q": torch.randn(B, T, H, K, generator=g, dtype=torch.float64),
        "k": torch.randn(B, T, H, K, generator=g, dtype=torch.float64),
        "v": torch.randn(B, T, H, V, generator=g, dtype=torch.float64),
        "beta": torch.randn(B, T, H, generator=g, dtype=torch.float64),
        "gate": torch.randn(B, T, H, generator=g, dtype=torch.float64),
        "S0": torch.randn(B, H, K, V, generator=g, dtype=torch.float64),
    }
    w = torch.randn(B, T, H, V, generator=g, dtype=torch.float64)
    res = {}
    for mode in ("naive", "chunked"):
        x = {n: t.clone().requires_grad_(n != "gate" or gated) for n, t in leaves.items()}
        log_a = F.logsigmoid(x["gate"] + 1) if gated else None
        q, k = F.normalize(x["q"], dim=-1), F.normalize(x["k"], dim=-1)
        out, st = delta_rule_attention(q, k, x["v"], torch.sigmoid(x["beta"]), log_a, AttnState(x["S0"], None), mode, 8)
        (out * w).sum().add(st.S.square().sum()).backward()
        res[mode] = {"out": out.detach(), "S": st.S.detach(), **{n: t.grad for n, t in x.items() if t.requires_grad}}
    assert (res["chunked"].keys() == res["naive"].keys()) and ("gate" in res["naive"]) == gated
    for name, ref in res["naive"].items():
        assert_close(name, ref, res["chunked"][name], 1e-10)
