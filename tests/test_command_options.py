"""Commands built from one options dataclass: every field is an option with its default and help, the engine
takes the same dataclass, and ``--config`` YAML fills it."""

from __future__ import annotations

import dataclasses

import pytest
from docstring_parser import parse_from_object

from strandline.app.cli import COMMANDS, build_parser, options_class, run_command
from strandline.tasks.convert_args import ConvertArgs
from strandline.tasks.scan.args import ScanArgs


@pytest.mark.parametrize("name,cls", [("scan", ScanArgs), ("convert", ConvertArgs)])
def test_every_field_is_an_option_with_its_default_and_help(name, cls):
    parser, func = build_parser(name, COMMANDS[name])
    assert options_class(func) is cls
    actions = {a.dest: a for a in parser._actions}
    helps = {p.arg_name: p.description for p in parse_from_object(cls).params}
    for f in dataclasses.fields(cls):
        assert f.name in actions, f.name
        assert helps[f.name] and " ".join(helps[f.name].split()) in " ".join(actions[f.name].help.split())
        if f.default is not dataclasses.MISSING:
            assert parser.get_defaults()[f.name] == f.default, f.name
    assert (
        not set(actions) - {f.name for f in dataclasses.fields(cls)} - {"help", "config", "print_config", "data.help"}
    )


def test_scan_command_hands_the_engine_one_scan_args(monkeypatch, tmp_path):
    import strandline.tasks.scan

    seen = []
    monkeypatch.setattr(strandline.tasks.scan, "scan", lambda args: seen.append(args) or [])
    yaml = tmp_path / "scan.yaml"
    yaml.write_text("track: logprob,entropy\nwindow: 7\nchunk: 64\n")
    assert run_command("scan", ["m", "a.fa", "b.fa", "-o", "o.bedGraph", "--config", str(yaml), "--window", "9"]) == 0
    (args,) = seen
    assert isinstance(args, ScanArgs) and args.inputs == ["a.fa", "b.fa"] and args.output == "o.bedGraph"
    assert (args.window, args.chunk, args.tracks) == (9, 64, ["logprob", "entropy"])  # the command line wins


def test_scan_args_tracks():
    assert ScanArgs("m", ["a"], "o", track=" logprob, A").tracks == ["logprob", "A"]
    assert ScanArgs("m", ["a"], "o", track=["G", "T"]).tracks == ["G", "T"]
    assert ScanArgs("m", ["a"], "o", track=[]).tracks == ["logprob"]


def test_convert_args_split_into_task_and_trainer():
    args = ConvertArgs("soft", "out", window=16, steps=7, val_every=3, progress=False)
    assert args.task_args()["softmax_window"] == 16 and "window" not in args.task_args()
    assert args.trainer_args()["max_steps"] == 7 and args.trainer_args()["val_check_interval"] == 3
    assert str(args.run_path) == "runs/convert/out"
    import inspect

    from strandline.tasks.convert import ConvertTask

    assert set(args.task_args()) <= set(inspect.signature(ConvertTask).parameters)
