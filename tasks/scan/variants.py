"""Scoring variants: ``score_variants(VariantArgs(model, ref.fa, variants.vcf, scored.vcf))``.

A variant's score compares the model's likelihood of the reference and of the alternative sequence after it:

    SL_REF_BITS = -log2 P(REF + D | context)        SL_ALT_BITS = -log2 P(ALT + D | context)
    SL_LLR      = SL_REF_BITS - SL_ALT_BITS = log2 P(ALT + D | context) - log2 P(REF + D | context)

in bits, where ``context`` is the contig's bases before POS (from the contig's start, or from a warm-up start, see
``VariantArgs.warmup``), ``D`` the ``window`` reference bases that follow the REF allele (fewer at a contig's end:
``SL_WINDOW``), and each base is predicted from everything before it with the model's distribution renormalized over
A, C, G, T (as ``strandline scan`` scores). For an indel the same downstream bases are scored after either allele, so
the two sums differ by the allele's own bases and by how they change the prediction of ``D``. The shared first base
of a VCF indel scores the same after either allele and cancels in SL_LLR. ``N`` bases of ``D`` are fed to the model
but not scored, on both sides alike.

The state is a value (docs/architecture.md §2), so the command carries one state along each contig's reference, stops
at each variant's POS and forks it: REF + D and every ALT + D are each scored from that one state, O(window) per
variant, never O(context). Variants must come sorted (each contig's records together, by POS), which is how the state
only moves forward; memory stays constant (the model's state and a buffer of the bases between the carried
position and the furthest window).

Forking without copying: the k-mer memory's state (``models/ops/kmer.py``) is a table of counts that a scan of a
genome fills (1.8 GB in float64 for ``dna-corpus-2``). A plain call, which leaves the state passed to it unchanged,
returns a new table: a full copy per call. A fork here runs the call with ``donate=True`` (the table is written in
place, as a carried scan does) after keeping the rows it can write: the buckets of the k-mers of the state's last
bases and the forked tokens, at most (T + 1) rows per order. Those rows are put back after the call, so the carried
state is bit for bit what it was; tens of kB move per fork instead of the table (benchmarks/score_variants.py).
A warm-up restart clears the rows written since the last restart the same way (or the whole table in place, 0.1 s,
when too many were), so a restart never allocates a new table either.
"""

from __future__ import annotations

import ctypes
import math
import os
import re
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from strandline.data.fasta import iter_records
from strandline.data.tokenizers import BOS, DNA_LUT, ID_TO_CHAR, INVALID, A
from strandline.errors import UserInputError
from strandline.files import atomic_output, check_output

INSTALL_HINT = "pip install 'strandline[variants]' (or: pip install cyvcf2)"
STATE_DTYPES = ("float32", "float64")
LN2 = math.log(2.0)
# every call chunked, one base too: a one-token call would default to the recurrent mode, whose k-mer writes wait in a
# log that the next chunked call folds into a new table (a copy of it, 0.7 s for dna-corpus-2)
CHUNKED = "chunked"
TOUCHED_MAX = 1 << 20  # bucket rows listed for a warm-up reset; past this one in-place zero_() of the table is cheaper
ACGT = re.compile(r"[ACGTacgt]+")
SYMBOLIC = re.compile(r"^<.*>$|[\[\]]|^\*$|^\.$")  # <DEL>, breakends, the spanning deletion *, a missing ALT
SKIP_REASONS = ("symbolic", "long", "not ACGT")
FIELDS = {
    "SL_LLR": ("A", "Float", "log2 P(ALT + the window) - log2 P(REF + the window) in bits under the model, each base "
              "predicted from the contig before it; the window is the SL_WINDOW reference bases after REF"),
    "SL_REF_BITS": ("1", "Float", "-log2 P(REF + the window) in bits (surprisal of the reference allele and window)"),
    "SL_ALT_BITS": ("A", "Float", "-log2 P(ALT + the window) in bits (surprisal of each alternative allele and window)"),
    "SL_WINDOW": ("1", "Integer", "reference bases after REF scored with each allele (the window; fewer at a contig end)"),
}  # fmt: skip


class VariantError(UserInputError):
    """Variants that cannot be scored as asked (options, paths, a VCF that does not fit the reference)."""


@dataclass
class VariantArgs:
    """What to score and how (``strandline score-variants MODEL REF.fa VARIANTS.vcf -o SCORED.vcf [options]``)."""

    model: str
    """model directory, Lightning checkpoint or shipped model name (DNA tokenizer)."""
    reference: str
    """the reference FASTA (plain, gzip/BGZF, xz, bz2), GenBank or EMBL file the VCF was called against."""
    variants: str
    """the VCF (plain or bgzipped; not BCF); each contig's records together, sorted by POS (bcftools sort)."""
    output: str
    """output VCF (-o): the input with SL_LLR, SL_REF_BITS, SL_ALT_BITS and SL_WINDOW added; .vcf.gz is bgzipped."""
    window: int = 100
    """reference bases after the REF allele scored with each allele (0: the alleles' own bases only)."""
    warmup: int | None = None
    """read at least W (at most 2W) bases of context before each variant instead of the whole contig: the state
    restarts at the multiple of W that is W to 2W bases before POS (default: every contig from its start, exact)."""
    max_allele: int = 51
    """longest REF or ALT scored, in bases (51: a 50-base indel with its shared first base); longer ones are skipped."""
    chunk: int = 8192
    """bases fed to the model per call while the state is carried along a contig."""
    state_dtype: str = "float64"
    """accumulation dtype of the carried state (float32 or float64); float64 keeps chromosomes exact."""
    threads: int | None = None
    """torch CPU threads (default: torch's; 1 is faster on a busy shared machine)."""


@dataclass
class VariantSummary:
    """What a run wrote: counts for the last line on stderr."""

    output: str
    records: int = 0
    scored: int = 0  # ALT alleles with a score
    skipped: Counter = field(default_factory=Counter)  # ALT alleles without one, by reason (SKIP_REASONS)
    contigs: int = 0
    seconds: float = 0.0


# ---------------------------------------------------------------------------------------------------- the library


def vcf_library():
    """The ``cyvcf2`` module, or a one-line error saying how to install it."""
    try:
        import cyvcf2
    except ImportError:
        raise VariantError(f"reading and writing VCF needs the cyvcf2 package: {INSTALL_HINT}") from None
    return cyvcf2


@contextmanager
def quiet_htslib(cyvcf2) -> Iterator[None]:
    """Silence htslib's own messages (``[W::vcf_parse] ...``) while reading: a problem is said once, in one line, by
    the checks here. htslib is linked into cyvcf2's extension module, whose ``hts_set_log_level`` is called."""
    try:
        lib = ctypes.CDLL(cyvcf2.cyvcf2.__file__)
        before = lib.hts_get_log_level()
        lib.hts_set_log_level(0)
    except (AttributeError, OSError):  # another build of the library: its messages stay
        yield
        return
    try:
        yield
    finally:
        lib.hts_set_log_level(before)


# ------------------------------------------------------------------------------------------- the reference, streamed


class Genome:
    """The records of a FASTA/GenBank/EMBL file, read forward one chunk at a time; ``contig(name)`` moves to a record
    (reading on, or from the start again when the record came earlier)."""

    def __init__(self, path: str, chunk: int = 1 << 20):
        self.path, self.chunk = path, chunk
        self._it: Iterator | None = None
        self._ahead = None  # a chunk read but not used (the first of the next record)

    def pull(self):
        if self._ahead is not None:
            ch, self._ahead = self._ahead, None
            return ch
        return None if self._it is None else next(self._it, None)

    def put_back(self, ch) -> None:
        self._ahead = ch

    def contig(self, name: str) -> Contig:
        from_start = self._it is None
        while True:
            if self._it is None:
                self._it = iter_records(self.path, self.chunk)
            while (ch := self.pull()) is not None:
                if ch.offset == 0 and ch.name == name:
                    return Contig(self, ch)
            if from_start:
                raise VariantError(f"{self.path}: no record {name!r}")
            self.close()  # the record came before the place reached: read again from the start
            from_start = True

    def close(self) -> None:
        if self._it is not None:
            self._it.close()
        self._it, self._ahead = None, None


class Contig:
    """The bases of one record between a released point and what has been read: ``get(a, b)`` reads on as needed."""

    def __init__(self, genome: Genome, first):
        self.genome, self.name = genome, first.name
        self.buf, self.start, self.done = first.ids, 0, False

    def get(self, a: int, b: int) -> np.ndarray:
        """Token ids [a, b) (fewer at the record's end); ``a`` must not be before the released point."""
        assert a >= self.start, "bases before the released point"
        while self.start + len(self.buf) < b and not self.done:
            ch = self.genome.pull()
            if ch is None or ch.offset == 0:
                if ch is not None:
                    self.genome.put_back(ch)
                self.done = True
            else:
                self.buf = np.concatenate([self.buf, ch.ids])
        return self.buf[a - self.start : b - self.start]

    def release(self, before: int) -> None:
        """Forget the bases before ``before`` (kept as a view until at least half the buffer can go)."""
        drop = min(before - self.start, len(self.buf))
        if drop > 0 and drop >= len(self.buf) // 2:
            self.buf, self.start = self.buf[drop:].copy(), self.start + drop


# ----------------------------------------------------------------------------------------- the carried state, forked


def _kmer_parts(model, state):
    """(the k-mer memory's spec, its state) when the model has the k-mer memory and ``state`` holds it, else None."""
    from strandline.models.kmer_memory import KmerMemory
    from strandline.models.ops.kmer import KmerMemoryState

    mem = None if state is None else state.memory
    if isinstance(getattr(model, "memory", None), KmerMemory) and isinstance(mem, KmerMemoryState):
        return model.memory.spec, mem
    return None


def _written_rows(spec, mem, tokens: torch.Tensor) -> torch.Tensor:
    """[1, J, T + 1] the buckets a call on ``tokens`` [1, T] from ``mem`` may write: those of the k-mers ending at the
    state's last base and at each token (a k-mer with a non-base writes nothing; its bucket is listed all the same)."""
    from strandline.models.ops.kmer import kmer_buckets

    tail = mem.tail if mem is not None else torch.zeros(1, spec.max_order, dtype=torch.long, device=tokens.device)
    return kmer_buckets(spec, torch.cat([tail, tokens.long()], 1))[0]


@torch.inference_mode()
def forked_logits(model, tokens: torch.Tensor, state) -> torch.Tensor:
    """The logits [1, T, V] of ``tokens`` [1, T] read after ``state``, which is left exactly as it was.

    With the k-mer memory: a donated (in-place) call between keeping and restoring the table rows it can write,
    instead of a plain call's copy of the whole table. Without one: a plain call (the state is a value)."""
    if state is None:  # the contig's start: nothing carried, nothing to keep
        return model(tokens, None, mode=CHUNKED, need_state=False)[0]
    parts = _kmer_parts(model, state)
    if parts is None:
        return model(tokens, state, mode=CHUNKED)[0]
    spec, mem = parts
    rows = _written_rows(spec, mem, tokens)
    cells = rows[..., None].expand(*rows.shape, mem.S.shape[-1])
    S, owner = mem.S, mem.owner
    kept_S, kept_owner = S.gather(2, cells), owner.gather(2, rows)
    try:
        return model(tokens, state, mode=CHUNKED, donate=True)[0]
    finally:  # duplicates in rows all put back the same kept value
        S.scatter_(2, cells, kept_S)
        owner.scatter_(2, rows, kept_owner)


@torch.inference_mode()
def window_bits(logits: torch.Tensor, targets: np.ndarray) -> float:
    """-log2 P of ``targets`` [T] (uint8 ids) from next-base ``logits`` [T, V], renormalized over A, C, G, T; bases
    that are not A, C, G or T (N) are not scored. Summed in float64."""
    lp = torch.log_softmax(logits[:, A : A + 4].double(), -1)
    tgt = torch.from_numpy(targets.astype(np.int64)).to(lp.device) - A
    ok = (tgt >= 0) & (tgt < 4)
    picked = lp.gather(1, tgt.clamp(0, 3)[:, None])[:, 0]
    return float(-picked[ok].sum()) / LN2


class Carry:
    """The state carried along a contig's reference (donated calls), forked to score windows from it."""

    def __init__(self, model, chunk: int = 8192, on_chunk: Callable[[int], object] | None = None):
        self.model, self.chunk, self.on_chunk = model, chunk, on_chunk
        self.device = model.embed.weight.device
        self.state = None
        self.token = BOS  # the last base read, not yet fed (a call feeds it first): BOS at a start
        self.touched: list[torch.Tensor] | None = []  # table rows written since the last reset (None: too many)
        self.n_touched = 0

    @torch.inference_mode()
    def reset(self) -> None:
        """Back to the start of a sequence (the zero state, equivalent to None), reusing the k-mer table in place."""
        parts = _kmer_parts(self.model, self.state)
        if parts is None:
            self.state = None
        else:
            from strandline.models.ops.kmer import complete_kmer_state
            from strandline.models.state import LMState

            spec, mem = parts
            S, owner = mem.S, mem.owner
            if self.touched is None:
                S.zero_()
                owner.zero_()
            for rows in self.touched or ():
                S.scatter_(2, rows[..., None].expand(*rows.shape, S.shape[-1]), 0.0)
                owner.scatter_(2, rows, 0)
            zeros = torch.zeros(1, dtype=torch.long, device=S.device)
            tail = torch.zeros(1, spec.max_order, dtype=torch.long, device=S.device)
            memory = complete_kmer_state({"S": S, "owner": owner, "tail": tail, "pos": zeros, "epoch": zeros.clone()})
            self.state = LMState(tuple(b.init_state(1, self.device) for b in self.model.blocks), memory)
        self.token, self.touched, self.n_touched = BOS, [], 0

    @torch.inference_mode()
    def advance(self, bases: np.ndarray) -> None:
        """Read ``bases`` (the reference from the carried position on) into the state."""
        for i in range(0, len(bases), self.chunk):
            piece = bases[i : i + self.chunk]
            tokens = self._tokens(piece)
            self._note_writes(tokens)
            _, self.state = self.model(tokens, self.state, mode=CHUNKED, donate=True)  # the old one is not read again
            self.token = int(piece[-1])
            if self.on_chunk is not None:
                self.on_chunk(len(piece))

    def bits(self, bases: np.ndarray) -> float:
        """-log2 P(``bases``) read from the carried state, which is left as it was."""
        return window_bits(forked_logits(self.model, self._tokens(bases), self.state)[0], bases)

    def _tokens(self, bases: np.ndarray) -> torch.Tensor:
        ids = np.concatenate([[self.token], bases[:-1]]).astype(np.int64)
        return torch.from_numpy(ids).to(self.device)[None]

    def _note_writes(self, tokens: torch.Tensor) -> None:
        if self.touched is None or getattr(self.model, "memory", None) is None:
            return
        parts = _kmer_parts(self.model, self.state)
        spec = parts[0] if parts else getattr(self.model.memory, "spec", None)
        if spec is None:
            return
        rows = _written_rows(spec, parts[1] if parts else None, tokens)
        self.n_touched += rows.numel()
        self.touched = None if self.n_touched > TOUCHED_MAX else [*self.touched, rows]


@dataclass
class AlleleScores:
    """The scores of one VCF record: REF + window, and each ALT + the same window (None: not scored)."""

    ref_bits: float
    window: int
    alt_bits: list[float | None]


class VariantScorer:
    """Scores the variants of one reference in sorted order (``score``), carrying the state along each contig."""

    def __init__(
        self, model, reference: str, window: int = 100, warmup: int | None = None, chunk: int = 8192,
        lengths: dict[str, int] | None = None, on_chunk: Callable[[int], object] | None = None,
    ):  # fmt: skip
        self.window, self.warmup = window, warmup
        self.genome = Genome(reference, max(chunk, 1 << 16))
        self.carry = Carry(model, chunk, on_chunk)
        self.lengths = lengths
        self.contig: Contig | None = None
        self.length = 0
        self.start = self.pos = 0  # where the carried state started, and the base it has read up to
        self._ref: tuple | None = None  # (contig, pos, ref length) -> REF bits of the last record

    def context_start(self, pos: int) -> int:
        """Where the state of a variant at ``pos`` (0-based) starts: 0, or with a warm-up W the multiple of W that is
        W to 2W bases before it (so at least W bases of context, and the same for every variant of a block)."""
        if not self.warmup:
            return 0
        return self.warmup * max(0, pos // self.warmup - 1)

    def score(self, chrom: str, pos: int, ref_len: int, alts: list[str | None]) -> AlleleScores:
        """Scores of the variant ``REF`` (``ref_len`` reference bases at 0-based ``pos``) -> each ALT (A/C/G/T
        strings; None: not scored). Calls must come sorted: by contig (each once), then by ``pos``."""
        if self.contig is None or chrom != self.contig.name:
            self.contig = self.genome.contig(chrom)
            self.length = self.lengths[chrom] if self.lengths else None
            self.carry.reset()
            self.start = self.pos = 0
        if pos < self.pos:
            raise ValueError(f"variants out of order: {chrom}:{pos + 1} after {self.pos + 1}")
        start = self.context_start(pos)
        if start > self.start:
            self.carry.reset()
            self.start = self.pos = start
        if pos > self.pos:
            self.carry.advance(self.contig.get(self.pos, pos))
            self.pos = pos
        end = pos + ref_len + self.window
        if self.length is not None:
            end = min(end, self.length)
        ref_window = self.contig.get(pos, end)  # fewer bases at the contig's end
        after = ref_window[ref_len:]
        key = (chrom, pos, ref_len, len(after))
        if self._ref is None or self._ref[0] != key:
            self._ref = (key, self.carry.bits(ref_window))
        alt_bits = [None if alt is None else self.carry.bits(np.concatenate([encode(alt), after])) for alt in alts]
        self.contig.release(self.start if self.warmup else self.pos)
        return AlleleScores(self._ref[1], len(after), alt_bits)

    def close(self) -> None:
        self.genome.close()


def encode(allele: str) -> np.ndarray:
    return DNA_LUT[np.frombuffer(allele.encode("ascii"), np.uint8)]


# ---------------------------------------------------------------------------------------------------------- the VCF


def skip_reason(ref: str, alt: str, max_allele: int) -> str | None:
    """Why an ALT is not scored (one of SKIP_REASONS), or None when it is: both alleles A/C/G/T, neither longer
    than ``max_allele``."""
    if SYMBOLIC.search(alt):
        return "symbolic"
    if max(len(ref), len(alt)) > max_allele:
        return "long"
    if not (ACGT.fullmatch(ref) and ACGT.fullmatch(alt)):
        return "not ACGT"
    return None


@dataclass
class VcfSurvey:
    """What the check of a VCF found: its records, and the tags its records use that its header does not define."""

    records: int = 0
    contigs: list[str] = field(default_factory=list)
    undefined: dict[str, set] = field(default_factory=lambda: {"INFO": set(), "FORMAT": set(), "FILTER": set()})


def open_vcf(cyvcf2, path: str, lengths: dict[str, int]):
    """cyvcf2.VCF of ``path`` with a ``##contig`` line for every reference record its header lacks, or a one-line
    error. With the contigs defined, htslib refuses a malformed record (cyvcf2 raises); with an undefined one it
    hands cyvcf2 a half-parsed record, whose fields crash the process when read."""
    p = Path(path)
    if not p.exists():
        raise VariantError(f"{path}: no such file")
    if not p.is_file():
        raise VariantError(f"{path}: not a regular file")
    if not os.access(p, os.R_OK):
        raise VariantError(f"{path}: cannot read (permission denied)")
    if _first_bytes(path).startswith(b"BCF"):
        raise VariantError(f"{path}: a BCF file; give it as VCF (bcftools view -Oz -o x.vcf.gz {path})")
    try:
        with quiet_htslib(cyvcf2):
            vcf = cyvcf2.VCF(path, lazy=True)
    except OSError:
        raise VariantError(f"{path}: not a VCF file (no ##fileformat / #CHROM header)") from None
    have = header_ids(vcf)["CONTIG"]
    for name, length in lengths.items():
        if name not in have:
            vcf.add_to_header(f"##contig=<ID={name},length={length}>")
    return vcf


def _first_bytes(path: str, n: int = 5) -> bytes:
    """The first bytes of a file, decompressed (BGZF): b"BCF" starts a BCF file."""
    from strandline.data.fasta import open_binary

    try:
        with open_binary(path) as fh:
            return fh.read(n)
    except (OSError, EOFError, UserInputError):  # not readable as such: htslib says what it is
        return b""


def vcf_records(vcf, path: str) -> Iterator:
    """The records of an open VCF; a record htslib cannot parse is a one-line error naming the record before it."""
    it, last = iter(vcf), None
    while True:
        try:
            rec = next(it)
        except StopIteration:
            return
        except Exception:  # cyvcf2 raises a bare Exception for a record htslib could not parse
            where = f"after {last}" if last else "in the first record"
            raise VariantError(
                f"{path}: malformed VCF record {where} (not a tab-separated CHROM POS ID REF ALT ...)"
            ) from None
        last = f"{rec.CHROM}:{rec.POS}"
        yield rec


def header_ids(vcf) -> dict[str, dict[str, dict]]:
    """{INFO/FORMAT/FILTER/CONTIG: {ID: the header line's fields}} of a VCF's header."""
    out: dict[str, dict[str, dict]] = {"INFO": {}, "FORMAT": {}, "FILTER": {}, "CONTIG": {}}
    for h in vcf.header_iter():
        info = h.info()
        if info.get("HeaderType") in out and "ID" in info:
            out[info["HeaderType"]][info["ID"]] = info
    return out


def _shown(text: str, n: int = 20) -> str:
    return repr(text if len(text) <= n else text[:n] + "...")


def check_vcf(cyvcf2, path: str, reference: str, lengths: dict[str, int]) -> VcfSurvey:
    """Read the VCF once against the reference, before any scoring: every record parses, each contig's records are
    together and sorted by POS, every contig is in the reference, every REF is the reference's bases there.

    Raises:
        VariantError: the first problem, in one line naming the record.
    """
    survey = VcfSurvey()
    vcf = open_vcf(cyvcf2, path, lengths)
    genome = Genome(reference)
    defined = header_ids(vcf)
    for name, (number, kind, _) in FIELDS.items():
        have = defined["INFO"].get(name)
        if have is not None and (have.get("Number"), have.get("Type")) != (number, kind):
            raise VariantError(
                f"{path}: its header defines INFO {name} as Number={have.get('Number')},Type={have.get('Type')}, not "
                f"Number={number},Type={kind}; remove it first (bcftools annotate -x INFO/{name})"
            )
    done, chrom, prev, contig = set(), None, 0, None
    try:
        with quiet_htslib(cyvcf2):
            for rec in vcf_records(vcf, path):
                here = f"{rec.CHROM}:{rec.POS}"
                if rec.CHROM != chrom:
                    if rec.CHROM in done:
                        raise VariantError(
                            f"{path}: {here}: records of contig {rec.CHROM!r} come again after {chrom!r}: each "
                            "contig's records must be together and sorted by position (bcftools sort)"
                        )
                    if rec.CHROM not in lengths:
                        raise VariantError(f"{path}: {here}: contig {rec.CHROM!r} is not in {reference}"
                                           f"{_name_hint(rec.CHROM, lengths)}")  # fmt: skip
                    done.add(rec.CHROM)
                    survey.contigs.append(rec.CHROM)
                    chrom, prev, contig = rec.CHROM, 0, genome.contig(rec.CHROM)
                elif rec.POS < prev:
                    raise VariantError(f"{path}: {here} comes after {chrom}:{prev}: the records must be sorted by "
                                       "position within each contig (bcftools sort)")  # fmt: skip
                prev = rec.POS
                _check_ref(rec, path, here, reference, contig, lengths[chrom])
                contig.release(rec.POS - 1)
                survey.records += 1
        # htslib defines each tag it meets undefined ("Dummy") as it reads: what the header gained is what to define
        grown = header_ids(vcf)
        survey.undefined = {kind: set(grown[kind]) - set(defined[kind]) for kind in survey.undefined}
    finally:
        genome.close()
        vcf.close()
    return survey


def _check_ref(rec, path: str, here: str, reference: str, contig: Contig, length: int) -> None:
    ref = rec.REF or ""
    if not ref or ref == ".":
        raise VariantError(f"{path}: {here}: no REF allele")
    ids = DNA_LUT[np.frombuffer(ref.encode("ascii", "replace"), np.uint8)]
    if (ids == INVALID).any():
        raise VariantError(f"{path}: {here}: REF {_shown(ref)} is not a sequence of bases (malformed VCF?)")
    if rec.POS < 1 or rec.POS - 1 + len(ref) > length:
        raise VariantError(f"{path}: {here}: REF {_shown(ref)} is outside contig {rec.CHROM!r} of {reference} "
                           f"({length:,} bases)")  # fmt: skip
    there = contig.get(rec.POS - 1, rec.POS - 1 + len(ref))
    if not np.array_equal(ids, there):
        seq = ID_TO_CHAR[there].tobytes().decode()
        raise VariantError(f"{path}: {here}: REF {_shown(ref)} does not match {reference}, which has {_shown(seq)} "
                           "there (another assembly?)")  # fmt: skip


def _name_hint(name: str, lengths: dict[str, int]) -> str:
    for other in (name[3:] if name.startswith("chr") else "chr" + name,):
        if other in lengths:
            return f" (it has {other!r}: the same assembly under other names?)"
    shown = ", ".join(repr(n) for n in list(lengths)[:5]) + (", ..." if len(lengths) > 5 else "")
    return f" (its records: {shown})"


# ---------------------------------------------------------------------------------------------------- the command


def check_args(args: VariantArgs) -> None:
    """Refuse bad options and outputs, one line each, before anything is read."""
    for name, value, low in (("--window", args.window, 0), ("--max_allele", args.max_allele, 1),
                             ("--chunk", args.chunk, 1)):  # fmt: skip
        if value < low:
            raise VariantError(f"{name} must be >= {low}, got {value}")
    if args.warmup is not None and args.warmup < 1:
        raise VariantError(f"--warmup must be >= 1 (bases), got {args.warmup}; leave it out to read whole contigs")
    if args.threads is not None and args.threads < 1:
        raise VariantError(f"--threads must be >= 1, got {args.threads}")
    if args.state_dtype not in STATE_DTYPES:
        raise VariantError(f"--state_dtype must be float32 or float64, got {args.state_dtype!r}")
    out = args.output
    if out == "-" or not out:
        raise VariantError("-o: give an output file name (.vcf, or .vcf.gz for bgzip)")
    if out.lower().endswith(".bcf"):
        raise VariantError(f"{out}: BCF output is not written; give a .vcf or .vcf.gz name")
    m = Path(args.model)
    model_files = [m / n for n in ("config.json", "model.safetensors")] if m.is_dir() else [m]
    check_output(out, [args.reference, args.variants, *model_files])
    for path in (args.reference, args.variants):
        if not Path(path).exists():
            raise VariantError(f"{path}: no such file")


def score_variants(args: VariantArgs, *, progress: bool = True, model=None) -> VariantSummary:
    """Score every variant of ``args.variants`` with a DNA model and write the VCF with the scores added.

    Args:
        args: the options (``VariantArgs``, the same as ``strandline score-variants --help``).
        progress: show progress on stderr (a bar on a terminal, else a line every 30 seconds).
        model: an already loaded model to use instead of ``args.model`` (its state dtype as set).

    Raises:
        VariantError, FastaError, ModelLoadError: user problems, one line each; nothing is written.
    """
    t0 = time.monotonic()
    cyvcf2 = vcf_library()
    check_args(args)
    if args.threads:
        from strandline.tasks.scan import available_cores

        torch.set_num_threads(min(args.threads, available_cores()))
    if model is None:
        from strandline.tasks.scan import load_for_scan

        model = load_for_scan(args.model, args.state_dtype)
    if (model.meta.get("tokenizer") or "dna") != "dna":
        raise VariantError(f"{args.model}: a {model.meta.get('tokenizer')!r} model cannot score DNA (needs 'dna')")
    from strandline.data.fasta_survey import survey

    lengths = {r.name: r.length for r in survey(args.reference)}
    found = check_vcf(cyvcf2, args.variants, args.reference, lengths)
    summary = VariantSummary(args.output, contigs=len(found.contigs))
    onednn = torch.backends.mkldnn.enabled
    torch.backends.mkldnn.enabled = False  # a primitive cached per input shape: every window has its own length
    try:
        _write_scores(cyvcf2, model, args, lengths, found, summary, progress)
    finally:
        torch.backends.mkldnn.enabled = onednn
    summary.seconds = time.monotonic() - t0
    return summary


def _write_scores(cyvcf2, model, args, lengths, found: VcfSurvey, summary: VariantSummary, progress: bool) -> None:
    from strandline.progress import progress as progress_bar

    vcf = open_vcf(cyvcf2, args.variants, lengths)
    _extend_header(vcf, found, args)
    gz = args.output.lower().endswith((".gz", ".bgz"))
    with progress_bar("score-variants", found.records, "records", enabled=progress) as bar:
        scorer = VariantScorer(model, args.reference, args.window, args.warmup, args.chunk, lengths,
                               on_chunk=lambda n: bar.update(0))  # fmt: skip
        try:
            with atomic_output(args.output) as tmp, quiet_htslib(cyvcf2):
                out = cyvcf2.Writer(str(tmp), vcf, mode="wz" if gz else "w")
                try:
                    for rec in vcf_records(vcf, args.variants):
                        _score_record(rec, scorer, args, summary)
                        out.write_record(rec)
                        bar.update(1)
                finally:
                    out.close()
        finally:
            scorer.close()
            vcf.close()


def _extend_header(vcf, found: VcfSurvey, args: VariantArgs) -> None:
    """Define the tags the records use but the header does not (htslib refuses to write them otherwise), the
    score fields, and a line saying how they were computed."""
    note = "Not defined in the input header; added by strandline score-variants"
    for key in sorted(found.undefined["INFO"]):
        vcf.add_info_to_header({"ID": key, "Number": ".", "Type": "String", "Description": note})
    for key in sorted(found.undefined["FORMAT"]):
        vcf.add_format_to_header({"ID": key, "Number": ".", "Type": "String", "Description": note})
    for key in sorted(found.undefined["FILTER"]):
        vcf.add_filter_to_header({"ID": key, "Description": note})
    defined = header_ids(vcf)["INFO"]
    for name, (number, kind, text) in FIELDS.items():
        if name not in defined:
            vcf.add_info_to_header({"ID": name, "Number": number, "Type": kind, "Description": text})
    model = re.sub(r"[^A-Za-z0-9._+-]", "_", Path(args.model).name or "model")
    warmup = f"{args.warmup}" if args.warmup else "none (each contig from its start)"
    vcf.add_to_header(
        f"##strandline_score_variants=model {model}; window {args.window}; warmup {warmup}; "
        f"max_allele {args.max_allele}; state_dtype {args.state_dtype}"
    )


def _score_record(rec, scorer: VariantScorer, args: VariantArgs, summary: VariantSummary) -> None:
    summary.records += 1
    ref, alts = rec.REF.upper(), [a.upper() for a in rec.ALT]
    reasons = [skip_reason(ref, a, args.max_allele) for a in alts]
    summary.skipped.update(r for r in reasons if r)
    if not alts or all(reasons):
        for name in FIELDS:  # values left from an earlier run would no longer be about this one
            if rec.INFO.get(name) is not None:
                del rec.INFO[name]
        return
    got = scorer.score(rec.CHROM, rec.POS - 1, len(ref), [None if r else a for a, r in zip(alts, reasons, strict=True)])
    summary.scored += sum(b is not None for b in got.alt_bits)
    llr = [None if b is None else got.ref_bits - b for b in got.alt_bits]
    # strings: written as given, so every value has the same 4 decimals (a Float is rounded to float32 otherwise)
    rec.INFO["SL_LLR"] = ",".join(_num(x) for x in llr)
    rec.INFO["SL_REF_BITS"] = _num(got.ref_bits)
    rec.INFO["SL_ALT_BITS"] = ",".join(_num(x) for x in got.alt_bits)
    rec.INFO["SL_WINDOW"] = got.window


def _num(x: float | None) -> str:
    return "." if x is None else f"{x:.4f}"


def summary_line(s: VariantSummary) -> str:
    """The last line on stderr: what was written, how many alleles were scored and why the others were not."""
    skipped = sum(s.skipped.values())
    why = ", ".join(f"{s.skipped[r]:,} {_REASON_WORDS[r]}" for r in SKIP_REASONS if s.skipped[r])
    line = (f"strandline score-variants: wrote {s.output}: {s.records:,} record(s) on {s.contigs:,} contig(s), "
            f"{s.scored:,} ALT allele(s) scored, {skipped:,} skipped")  # fmt: skip
    return line + (f" ({why}; written without scores)" if skipped else "") + f", {s.seconds:.1f}s"


_REASON_WORDS = {"symbolic": "symbolic or breakend", "long": "longer than --max_allele", "not ACGT": "not A/C/G/T"}

__all__ = [
    "AlleleScores", "Carry", "VariantArgs", "VariantError", "VariantScorer", "VariantSummary", "check_vcf",
    "forked_logits", "score_variants", "skip_reason", "summary_line", "window_bits",
]  # fmt: skip
