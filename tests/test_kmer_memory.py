"""The k-mer memory (models/ops/kmer.py, models/kmer_memory.py): exact in every mode and split, the counts it
defines, and an LM that carries it in its state, saves it, resets it and learns to use it."""

import numpy as np
import pytest
import torch

from strandline.models import LinearTransformerLM, ModelConfig, load, load_state, save_state
from strandline.models.config import ConfigError
from strandline.models.ops.kmer import LOG, KmerMemoryState, KmerSpec, _folded, kmer_buckets, kmer_memory
from strandline.tasks.lm import pack_state, reset_state, unpack_state

ALPHABET = (4, 5, 6, 7)


def spec(orders=(1, 3, 5), buckets=16, decay=1.0) -> KmerSpec:
    return KmerSpec(orders=orders, n_buckets=buckets, alphabet=ALPHABET, decay=decay)


def stream(B=2, T=150, seed=0, specials=True) -> torch.Tensor:
    """Bases with some N (8) and PAD (0) mixed in, which the memory must skip."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(4, 8, (B, T), generator=g)
    if specials:
        x[torch.rand(B, T, generator=g) < 0.05] = 8
        x[:, T // 3] = 0
    return x


def value_now(s: KmerMemoryState, sp: KmerSpec) -> torch.Tensor:
    """The table's counts at the state's position (the write log folded in, the stored scale removed)."""
    scale = torch.exp((s.pos - s.epoch).double()[:, None] * sp.log_decays(torch.float64))  # [B, J]
    return _folded(s)[0] * scale[..., None, None]


def owners_now(s: KmerMemoryState) -> torch.Tensor:
    return _folded(s)[1]


@pytest.mark.parametrize(
    "decay",
    [1.0, 0.99, 0.5, (0.5, 1.0, 0.9)],
    ids=["no-decay", "decay", "decay-with-rebases", "decay-per-order"],
)
@pytest.mark.parametrize("mode", ["chunked", "recurrent"])
def test_modes_and_splits_agree_with_the_naive_definition_in_float64(decay, mode):
    sp = spec(decay=decay)
    assert decay != 0.5 or sp.rebase_span < 150  # the last case crosses several rebases
    x = stream()
    full, sref = kmer_memory(x, sp, None, "naive", torch.float64)
    ref = full.counts
    assert ref.abs().max() > 1 and full.run.max() > 0 and full.misses.max() > 0  # something was counted
    for cuts in ([], [1], [7, 8, 100], [149]):
        parts, st = [], None
        for a, b in zip([0, *cuts], [*cuts, x.shape[1]], strict=True):
            r, st = kmer_memory(x[:, a:b], sp, st, mode, torch.float64)
            parts.append(r)
        got = torch.cat([p.counts for p in parts], 1)
        assert ((got - ref).abs().max() / ref.abs().max()).item() < 1e-12, cuts
        assert torch.equal(torch.cat([p.run for p in parts], 1), full.run)
        assert torch.equal(torch.cat([p.misses for p in parts], 1), full.misses)
        assert (value_now(st, sp) - value_now(sref, sp)).abs().max().item() < 1e-12
        assert torch.equal(owners_now(st), owners_now(sref)) and owners_now(st).any()
        for name in ("tail", "pos", "guess", "run", "misses"):
            assert torch.equal(getattr(st, name), getattr(sref, name)), name


@pytest.mark.parametrize("mode", ["naive", "chunked", "recurrent"])
def test_a_decay_per_order_counts_each_order_as_its_own_memory_would(mode):
    """Orders with their own γ (rebases included) read what one-order memories with that γ read."""
    decays = (0.6, 1.0, 0.95)
    sp = spec(decay=decays)
    assert sp.rebase_span < 200
    x = stream(T=200)
    both, st = kmer_memory(x, sp, None, mode, torch.float64)
    for j, (k, g) in enumerate(zip(sp.orders, decays, strict=True)):
        one, st1 = kmer_memory(x, spec(orders=(k,), decay=g), None, mode, torch.float64)
        ref = one.counts[:, :, 0]
        assert ref.abs().max() > 0.5
        assert ((both.counts[:, :, j] - ref).abs().max() / ref.abs().max()).item() < 1e-12, (k, g)
        assert torch.equal(both.run[:, :, j], one.run[:, :, 0])
        got = value_now(st, sp)[:, j]
        want = value_now(st1, spec(orders=(k,), decay=g))[:, 0]
        assert (got - want).abs().max().item() < 1e-12


def test_kmer_decay_per_order_must_match_the_orders():
    ModelConfig(vocab_size=16, kmer_orders=[4, 12], kmer_decay=[0.999, 1.0])
    with pytest.raises(ConfigError, match="2 values for 3 kmer_orders"):
        ModelConfig(vocab_size=16, kmer_orders=[4, 12, 20], kmer_decay=[0.999, 1.0])
    with pytest.raises(ConfigError, match=r"kmer_decay must lie in \(0, 1\]"):
        ModelConfig(vocab_size=16, kmer_orders=[4, 12], kmer_decay=[0.999, 1.5])


def test_float32_state_agrees_with_float64_relative():
    sp = spec(decay=0.9)
    x = stream(T=300)
    a, _ = kmer_memory(x, sp, None, "chunked", torch.float32)
    b, _ = kmer_memory(x, sp, None, "naive", torch.float64)
    a, b = a.counts, b.counts
    assert a.dtype == torch.float32
    assert ((a.double() - b).abs().max() / b.abs().max()).item() < 1e-5


def test_counts_are_what_followed_each_kmer_before():
    """With a table large enough to hold every 3-mer apart, m_t is exactly a dict of k-mer continuations."""
    sp = spec(orders=(3,), buckets=1 << 20)
    x = stream(B=1, T=400, seed=3)
    r, _ = kmer_memory(x, sp, None, "chunked", torch.float64)
    xs, seen = x[0].tolist(), {}
    ok = [4 <= v <= 7 for v in xs]
    guess, run, outcomes = None, 0, []
    for t in range(len(xs)):
        if t >= 3 and all(ok[t - 3 : t + 1]):
            seen.setdefault(tuple(xs[t - 3 : t]), [0] * 4)[xs[t] - 4] += 1
        hit = guess is not None and guess == xs[t] - 4  # the guess made at t - 1, judged by x_t
        run = run + 1 if hit else 0
        outcomes.append(guess is not None and ok[t] and not hit)
        q = tuple(xs[t - 2 : t + 1])
        want = seen.get(q, [0] * 4) if t >= 2 and all(ok[t - 2 : t + 1]) else [0] * 4
        assert r.counts[0, t, 0].tolist() == want, t
        assert r.run[0, t, 0] == run and r.misses[0, t, 0] == sum(outcomes[-32:]), t
        guess = max(range(4), key=lambda a: (want[a], -a)) if sum(want) else None  # most counted, first on ties


def test_a_bucket_answers_only_the_kmer_that_wrote_it_last():
    """Tiny tables collide all the time: a read counts only when its k-mer is the bucket's last writer (its
    fingerprint), and then sees every count the bucket holds: a Python hash table, entry by entry."""
    sp = spec(orders=(2, 6), buckets=16)
    x = stream(B=1, T=300, seed=4)
    r, _ = kmer_memory(x, sp, None, "chunked", torch.float64)
    ext = torch.cat([torch.zeros(1, sp.max_order, dtype=torch.long), x], 1)
    bk, fp, ok = (t[0] for t in kmer_buckets(sp, ext))  # [J, T + 1]: entry i ends at position i - 1
    xs = x[0].tolist()
    fired = 0
    for j in range(2):
        table, owner = {}, {}
        for t in range(len(xs)):
            if ok[j, t] and 4 <= xs[t] <= 7:  # write: the k-mer ending at t - 1, followed by x_t
                b = int(bk[j, t])
                table.setdefault(b, [0] * 4)[xs[t] - 4] += 1
                owner[b] = int(fp[j, t])
            b = int(bk[j, t + 1])
            mine = bool(ok[j, t + 1]) and owner.get(b) == int(fp[j, t + 1])
            want = table.get(b, [0] * 4) if mine else [0] * 4
            assert r.counts[0, t, j].tolist() == want, (j, t)
            fired += mine
    assert 50 < fired < 2 * len(xs) - 50  # both kinds of read were checked


def test_kmer_buckets_depend_on_the_kmer_only():
    sp = spec(orders=(4,), buckets=1 << 16)
    x = torch.tensor([[0, 0, 0, 0, 4, 5, 6, 7, 4, 4, 5, 6, 7, 8, 5, 6, 7]])
    b, fp, ok = kmer_buckets(sp, torch.cat([torch.zeros(1, 4, dtype=torch.long), x], 1))
    b, fp, ok = b[0, 0, 1:], fp[0, 0, 1:], ok[0, 0, 1:]  # entry i: the 4-mer ending at x[i]
    assert b[7] == b[12] and fp[7] == fp[12] and ok[7] and ok[12]  # ACGT at 4..7 and at 9..12
    assert (fp > 0).all() and fp[8] != fp[7]
    assert not ok[:7].any()  # a 4-mer with a PAD (before the start, or in x) is never matched
    assert not ok[13:17].any() and ok[7:13].all()  # every 4-mer with the N at 13 is skipped, the others kept


def test_need_state_false_gives_the_same_counts_without_a_table():
    sp = spec(decay=0.99)
    x = stream()
    a, st = kmer_memory(x, sp, None, "chunked", torch.float64)
    b, none = kmer_memory(x, sp, None, "chunked", torch.float64, need_state=False)
    assert none is None and st is not None
    for u, v in zip(a, b, strict=True):
        torch.testing.assert_close(u, v, rtol=0, atol=0)


def kmer_lm(**kw) -> LinearTransformerLM:
    torch.manual_seed(0)
    cfg = ModelConfig(
        d_model=32, n_layers=2, n_heads=2, chunk_size=8, kmer_orders=[2, 4], kmer_buckets=256,
        kmer_decay=0.99, state_dtype="float64", **kw,
    )  # fmt: skip
    model = LinearTransformerLM(cfg).double().eval()
    with torch.no_grad():  # a trust the untrained head would not have: the memory visibly moves the logits
        model.memory.gate.bias.fill_(1.0)
    return model


@pytest.mark.parametrize("kw", [{}, {"gate": "scalar", "normalizer": "rmsnorm"}, {"attention": "softmax"}])
def test_lm_parallel_equals_steps_equals_splits(kw):
    model = kmer_lm(**kw)
    x = stream(T=60)
    with torch.no_grad():
        full, st_full = model(x)
        plain = model.head(model.hidden(x)[0])
        assert (full - plain).abs().max() > 1e-3  # the memory changes the prediction
        steps, st = [], None
        for t in range(x.shape[1]):
            lt, st = model.step(x[:, t], st)
            steps.append(lt)
        torch.testing.assert_close(torch.stack(steps, 1), full, rtol=0, atol=1e-10)
        parts, st = [], None
        for a, b in zip([0, 5, 33], [5, 33, 60], strict=True):
            lp, st = model(x[:, a:b], st)
            parts.append(lp)
        torch.testing.assert_close(torch.cat(parts, 1), full, rtol=0, atol=1e-10)
        assert isinstance(st.memory, KmerMemoryState) and len(st.layers) == 2


def test_lm_gradients_are_the_same_for_any_split():
    x = stream(T=48)
    grads = []
    for cut in (None, 17):
        model = kmer_lm().train()
        if cut is None:
            logits, _ = model(x)
        else:
            a, st = model(x[:, :cut])
            logits = torch.cat([a, model(x[:, cut:], st)[0]], 1)
        torch.nn.functional.cross_entropy(logits.flatten(0, 1), x.flatten()).backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    assert grads[0]["memory.gate.weight"].abs().max() > 0 and grads[0]["memory.log_alpha"].abs().max() > 0
    for name, g in grads[0].items():
        torch.testing.assert_close(grads[1][name], g, rtol=1e-10, atol=1e-12, msg=name)


def test_state_saves_loads_resets_and_packs(tmp_path):
    model = kmer_lm()
    x = stream(T=40)
    with torch.no_grad():
        _, st = model(x)
        save_state(st, tmp_path / "s.safetensors", {"k": 1})
        back, meta = load_state(tmp_path / "s.safetensors")
        assert meta == {"k": 1} and isinstance(back.memory, KmerMemoryState)
        nxt = stream(T=9, seed=5)
        torch.testing.assert_close(model(nxt, back)[0], model(nxt, st)[0], rtol=0, atol=0)
        torch.testing.assert_close(model(nxt, unpack_state(pack_state(st)))[0], model(nxt, st)[0], rtol=0, atol=0)
        r = reset_state(st, torch.tensor([True, False]))
        fresh = model(nxt[:1])[0]
        torch.testing.assert_close(model(nxt, r)[0][:1], fresh, rtol=0, atol=1e-12)  # row 0 starts over
        torch.testing.assert_close(model(nxt, r)[0][1:], model(nxt, st)[0][1:], rtol=0, atol=1e-12)
        with pytest.raises(ValueError, match="has a memory"):
            model(nxt, st._replace(memory=None))
        with pytest.raises(ValueError, match="LMState"):
            model(nxt, (*st.layers, st.memory))  # the flat tuple of older versions is not a state


def test_model_directory_round_trip_keeps_the_memory(tmp_path):
    model = kmer_lm()
    model.save(tmp_path / "m", tokenizer="dna")
    back = load(tmp_path / "m").double().eval()
    assert back.config.kmer_orders == [2, 4] and back.memory is not None
    x = stream(T=30)
    with torch.no_grad():
        torch.testing.assert_close(back(x)[0], model(x)[0], rtol=0, atol=1e-12)


@pytest.mark.parametrize(
    "kw,match",
    [
        ({"kmer_orders": [0]}, "kmer_orders"),
        ({"kmer_orders": [3, 3]}, "repeated"),
        ({"kmer_orders": [40]}, "62 bits"),
        ({"kmer_orders": [3], "kmer_buckets": 1000}, "power of two"),
        ({"kmer_orders": [3], "kmer_decay": 0.0}, "kmer_decay"),
        ({"kmer_orders": [3], "kmer_alphabet": [4, 99]}, "kmer_alphabet"),
    ],
)
def test_bad_kmer_memory_options_are_one_line_config_errors(kw, match):
    with pytest.raises(ConfigError, match=match):
        ModelConfig(**kw)


def test_a_tiny_model_learns_to_copy_through_the_memory():
    """Random bases (nothing to learn but copying) with one exact repeat per window: a few dozen steps teach the
    head to trust a match, and the copied bases become far cheaper than the rest (~2 bits)."""
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    cfg = ModelConfig(d_model=16, n_layers=1, n_heads=2, kmer_orders=[8], kmer_buckets=1 << 12)
    model = LinearTransformerLM(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-2)

    def batch():
        x = rng.integers(4, 8, (8, 257))
        for row in x:
            a, n = rng.integers(0, 60), rng.integers(40, 100)
            b = rng.integers(a + n, 257 - n)
            row[b : b + n] = row[a : a + n]
        return torch.as_tensor(x)

    for _ in range(60):
        x = batch()
        logits, _ = model(x[:, :-1], need_state=False)
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), x[:, 1:].flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
    x = batch()
    with torch.no_grad():
        lp = torch.log_softmax(model(x[:, :-1])[0], -1).gather(-1, x[:, 1:, None])[..., 0] / -np.log(2)
        r, _ = kmer_memory(x[:, :-1], model.memory.spec, None)
    matched = r.counts.sum(-1)[..., 0] > 0
    assert lp[matched].mean() < 0.5 < 1.9 < lp[~matched].mean()


def test_scan_with_the_memory_is_the_same_for_any_chunk_and_after_a_resume(tmp_path, monkeypatch):
    """The scan carries the memory across chunks and N runs, resets it per record, and resumes exactly."""
    import tests.test_scan as ts
    from strandline.tasks.scan import ScanArgs, scan

    torch.manual_seed(0)
    cfg = ModelConfig(d_model=32, n_layers=2, n_heads=2, chunk_size=8, kmer_orders=[8], kmer_buckets=1 << 12)
    model = LinearTransformerLM(cfg)
    with torch.no_grad():
        model.memory.gate.bias.fill_(5.0)  # trust a match of 8 bases
    model.save(tmp_path / "m", tokenizer="dna")
    rng = np.random.default_rng(1)
    seg = ts._seq(rng, 120)
    recs = {"r1": ts._seq(rng, 200) + seg + "N" * 30 + ts._seq(rng, 300) + seg, "r2": seg + ts._seq(rng, 90) + seg}
    fa = ts._write_fasta(tmp_path / "g.fa", recs)
    outs = []
    for chunk in (37, 5000):
        out = tmp_path / f"c{chunk}" / "o.bedGraph"
        scan(ScanArgs(str(tmp_path / "m"), [fa], str(out), chunk=chunk))
        outs.append(out.read_bytes())
    a, b = (ts._bedgraph(tmp_path / f"c{c}" / "o.bedGraph") for c in (37, 5000))
    assert sorted(a) == ["r1", "r2"] and a.keys() == b.keys()
    for name in a:  # float32 layers: chunk sizes round differently, so not byte for byte
        assert a[name].keys() == b[name].keys()
        np.testing.assert_allclose([a[name][p] for p in a[name]], [b[name][p] for p in a[name]], atol=2e-4)
    vals = a["r1"]
    second = [vals[p] for p in range(len(recs["r1"]) - 100, len(recs["r1"]))]  # late in the second copy
    first = [vals[p] for p in range(220, 320)]
    assert np.mean(second) > np.mean(first) + 0.5  # the memory finds the copy across the N run
    out = tmp_path / "kill" / "o.bedGraph"
    ts.kill_after(monkeypatch, 3)
    with pytest.raises(ts.Killed):
        scan(ScanArgs(str(tmp_path / "m"), [fa], str(out), chunk=37, checkpoint_every=0))
    monkeypatch.undo()
    scan(ScanArgs(str(tmp_path / "m"), [fa], str(out), chunk=37, checkpoint_every=0, resume=True))
    assert out.read_bytes() == outs[0]


def test_token_by_token_calls_fold_their_write_log_exactly():
    """Steps append to a log of L writes and fold it into a new table when full: over 2.5 L one-token calls
    (and a chunk after them) the counts and the table equal the chunked run's, and no state passed is changed."""
    sp = spec(decay=0.999)
    x = stream(T=int(2.5 * LOG) + 40, seed=7)
    ref, sref = kmer_memory(x, sp, None, "chunked", torch.float64)
    st, outs = None, []
    for t in range(x.shape[1] - 40):
        before = None if st is None else [v.clone() if v is not None else None for v in st]
        r, new = kmer_memory(x[:, t : t + 1], sp, st, "recurrent", torch.float64)
        if before is not None:  # the state passed in is a value
            assert all(a is None or torch.equal(a, b) for a, b in zip(before, st, strict=True))
        st = new
        outs.append(r.counts)
    assert 0 < int(st.log_len[0]) < LOG  # folded at least twice, then kept logging
    r, st = kmer_memory(x[:, -40:], sp, st, "chunked")
    outs.append(r.counts)
    got = torch.cat(outs, 1)
    assert ((got - ref.counts).abs().max() / ref.counts.abs().max()).item() < 1e-12
    assert (value_now(st, sp) - value_now(sref, sp)).abs().max().item() < 1e-12 and int(st.log_len.max()) == 0
    assert torch.equal(st.owner, sref.owner)


def test_kmer_codes_without_integer_matmul_are_the_same(monkeypatch):
    """The path for devices without int64 matmul (CUDA), run here on the CPU, gives the same buckets."""
    import strandline.models.ops.kmer as ops

    sp = spec(orders=(1, 5, 20), buckets=1 << 16)
    ext = torch.cat([torch.zeros(2, 20, dtype=torch.long), stream(T=300, seed=11)], 1)
    a = kmer_buckets(sp, ext)
    monkeypatch.setattr(ops, "_BY_SUM", True)
    b = kmer_buckets(sp, ext)
    assert all(torch.equal(u, v) for u, v in zip(a, b, strict=True)) and a[2].any() and not a[2].all()


def test_dna_quality_reads_with_the_context_cut_to_w_bases():
    """``dna_quality --reset-every W`` scores each W-base window from the zero state: the same bits as reading
    every window as its own sequence, and different from the stream when the memory has a repeat to copy."""
    import benchmarks.dna_quality as dq

    model = kmer_lm().float()
    rng = np.random.default_rng(2)
    seg = rng.integers(4, 8, 60)
    seq = np.concatenate([seg, rng.integers(4, 8, 100), seg, seg]).astype(np.uint8)
    cut, n = dq.model_bits(model, [seq], reset_every=50)
    parts = [dq.model_bits(model, [seq[a : a + 51]]) for a in range(0, len(seq) - 1, 50)]
    assert n == sum(p[1] for p in parts) == len(seq) - 1
    assert cut == pytest.approx(sum(p[0] for p in parts), rel=1e-6)
    assert dq.model_bits(model, [seq])[0] < cut - 1  # the stream copies the repeats
