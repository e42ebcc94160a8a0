"""The inputs of a scan, checked before the first base is scored.

``survey_inputs`` surveys every input file once (``strandline.data.fasta_survey.survey``: names, lengths and
first scorable base of each record, read cheaply in raw blocks) and adds what only a scan asks: each input
is a readable regular file, a record name appears in one input only, and every name is one a track file can
hold (``check_track_name``). That gives, up front, the record names and lengths that ``--region`` and
annotations are checked against, ``--plot``'s default region and the exact total for the progress bar's
ETA. Stdin or a pipe (``<(zcat genome.fa.gz)``, a FIFO) cannot be read twice: its records are checked as they
stream (``ScanJob``).
"""

from __future__ import annotations

import os
from pathlib import Path

from strandline.data.fasta import FastaError
from strandline.data.fasta import iter_records as read_records
from strandline.data.fasta_survey import SurveyedRecord, survey
from strandline.data.tracks import track_name_problem
from strandline.files import reads_once

__all__ = ["SurveyedRecord", "check_track_name", "read_records", "survey", "survey_inputs"]


def check_track_name(path: str, name: str) -> None:
    """Refuse a record whose name a track file cannot hold (``strandline.data.tracks.track_name_problem``)."""
    problem = track_name_problem(name)
    if problem:
        raise FastaError(f"{path}: record {name!r} {problem}; rename the record")


def survey_inputs(inputs: list[str], rename=None) -> list[SurveyedRecord]:
    """Survey every input file (not stdin or a pipe: ``reads_once``) in order; duplicate names across files are refused here. ``rename``
    (``strandline.data.names.RecordNames``) gives each record the name the scan writes, before the checks.

    Raises:
        FastaError: as ``survey``, a record name that appears in two inputs, or one that a track file cannot
            hold (``track``, ``browser``, ``#...``, a control character: ``check_track_name``).
    """
    out: list[SurveyedRecord] = []
    where: dict[str, str] = {}
    for p in inputs:
        if reads_once(p):
            continue
        if not os.path.isfile(p):
            raise FastaError(f"{p}: no such file" if not Path(p).exists() else f"{p}: not a regular file")
        if not os.access(p, os.R_OK):
            raise FastaError(f"{p}: cannot read (permission denied)")
        for rec in survey(p):
            if rename is not None:
                rec.name = rename(rec.name)
            check_track_name(p, rec.name)
            if rec.name in where:
                raise FastaError(f"{p}: record {rec.name!r} already read from {where[rec.name]}")
            where[rec.name] = p
            out.append(rec)
    return out
