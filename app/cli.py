"""The ``strandline`` console script.

``fit | validate | test | predict`` go to LightningCLI (``app.train``). Every other command is a typed
function named in ``COMMANDS``; its jsonargparse parser is built from the function's signature and
docstring, so ``strandline CMD --help`` documents every option and ``--config FILE.yaml`` reads them from
YAML. Only the chosen command's module is imported (the others may import torch); ``strandline --help``
and ``--version`` import neither torch nor Lightning.

Parsing rules, the same for every command: parameters without a default are positionals in signature
order (``Command.positionals`` gives one ``nargs``, e.g. several input files); ``Command.short`` gives
short flags (``-o`` for ``--output``); booleans are flags (``--resume`` / ``--no_resume``); every option
is accepted with dashes too (``--max-new-tokens`` = ``--max_new_tokens``).

Exit codes: 0 success; 2 for bad input or usage, as one line on stderr (every ``UserInputError``, an
unreadable or missing user path, a bad option); 1 when valid input has no result (``summarize`` of a
document with no qualifying sentence; a training run that diverged, ``TrainingDiverged``); 130 interrupted.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args, get_origin, get_type_hints

from docstring_parser import parse as parse_doc
from jsonargparse import ActionYesNo, ArgumentParser

LIGHTNING_COMMANDS = ("fit", "validate", "test", "predict")


@dataclass(frozen=True)
class Command:
    """One CLI command: a typed function and how its parameters are typed on the command line."""

    target: str
    """``module:function``; imported only when this command runs."""
    help: str
    """One line for ``strandline --help``."""
    positionals: tuple[tuple[str, str], ...] = ()
    """(parameter, nargs) of a list positional, e.g. ``("inputs", "+")`` for ``scan MODEL IN... -o OUT``."""
    short: tuple[tuple[str, str], ...] = ()
    """(flag, parameter) of a short option, e.g. ``("-o", "output")``; the parameter becomes an option."""


# One entry per command: a new command is one more line here and a typed function (see Command for its fields).
COMMANDS: dict[str, Command] = {
    "scan": Command(
        "app.scan:scan",
        "score every base of FASTA/GenBank/EMBL records in constant memory -> bedGraph/WIG/bigWig",
        positionals=(("inputs", "+"),),
        short=(("-o", "output"),),
    ),
    "plot": Command("app.scan:plot", "draw a track over a region to PNG"),
    "summarize": Command(
        "app.summarize:summarize", "read a document once, keep a running extractive summary", short=(("-o", "output"),)
    ),
    "generate": Command("app.generate:generate", "sample a continuation token by token (recurrent mode)"),
    "export": Command("app.export:export", "convert a Lightning checkpoint to a model directory"),
    "convert": Command("app.convert:convert", "turn a softmax model into a linear (RNN) one: t2r, hedgehog, lolcats"),
    "demo": Command("app.demo:demo", "train a tiny model on the shipped genome, scan it, summarize a shipped document"),
}


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("strandline")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def _usage() -> str:
    lines = ["usage: strandline COMMAND [options]   (strandline COMMAND --help for details)", "", "commands:"]
    lines += [f"  {c:<10} LightningCLI: {c} a model (--config configs/...yaml)" for c in LIGHTNING_COMMANDS]
    lines += [f"  {name:<10} {cmd.help}" for name, cmd in COMMANDS.items()]
    return "\n".join(lines)


def _resolve(target: str):
    module, func = target.split(":")
    return getattr(importlib.import_module(module), func)


class DashedParser(ArgumentParser):
    """A jsonargparse parser whose every ``--long_name`` option is also ``--long-name`` (both are common)."""

    def add_argument(self, *args, **kwargs):
        dashed = [a.replace("_", "-") for a in args if a.startswith("--") and "_" in a and "." not in a]
        return super().add_argument(*args, *[d for d in dashed if d not in args], **kwargs)


def build_parser(name: str, cmd: Command):
    """The jsonargparse parser of one command (see the module docstring for the rules)."""
    func = _resolve(cmd.target)
    doc = parse_doc(func.__doc__ or "")
    helps = {p.arg_name: p.description for p in doc.params}
    hints = get_type_hints(func)
    nargs, shorts = dict(cmd.positionals), {param: flag for flag, param in cmd.short}
    parser = DashedParser(prog=f"strandline {name}", description=doc.short_description, exit_on_error=False)
    parser.add_argument("--config", action="config", help="read options from a YAML file")
    handled = set()
    for pname, param in inspect.signature(func).parameters.items():
        tp, required = hints.get(pname, str), param.default is inspect.Parameter.empty
        text = helps.get(pname)
        if pname in shorts:
            kw = {"required": True} if required else {"default": param.default}
            parser.add_argument(shorts[pname], f"--{pname}", type=tp, help=text, **kw)
        elif tp is bool:
            parser.add_argument(f"--{pname}", action=ActionYesNo, default=param.default is True, help=text)
        elif required and pname in nargs:
            item = get_args(tp)[0] if get_origin(tp) in (list, tuple) else tp
            parser.add_argument(pname, nargs=nargs[pname], type=item, help=text)
        elif required:
            parser.add_argument(pname, type=tp, help=text)
        else:
            continue
        handled.add(pname)
    parser.add_function_arguments(func, skip=handled, as_group=False)
    return parser, func


def _type_name(tp) -> str:
    if get_origin(tp) is Literal:  # e.g. --method: (expected one of t2r, hedgehog, lolcats), not "Literal"
        return "one of " + ", ".join(str(a) for a in get_args(tp))
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "").replace("NoneType", "null")


def run_command(name: str, argv: list[str]) -> int:
    """Parse ``argv`` for command ``name`` and call its function; usage errors raise ``UsageError``."""
    from argparse import ArgumentError

    from app.errors import UsageError, usage_message

    parser, func = build_parser(name, COMMANDS[name])
    try:
        cfg = parser.parse_args(argv)
    except ArgumentError as e:
        types = {k: _type_name(t) for k, t in get_type_hints(func).items()}
        hint = _option_hint(str(e), inspect.signature(func).parameters)
        raise UsageError(f"{usage_message(str(e), types)}{hint} (see strandline {name} --help)") from None
    kwargs = {k: v for k, v in cfg.as_dict().items() if k in inspect.signature(func).parameters}
    result = func(**kwargs)
    return result if isinstance(result, int) and not isinstance(result, bool) else 0


def _option_hint(msg: str, names) -> str:
    """``; did you mean --max_new_tokens?`` for an unrecognized option close to a real one."""
    m = re.match(r"unrecognized arguments: --([\w-]+)", msg)
    if m is None:
        return ""
    close = difflib.get_close_matches(m.group(1).replace("-", "_"), list(names), n=1)
    return f"; did you mean --{close[0]}?" if close else ""


def _check_config_files(argv: list[str]) -> None:
    """Refuse a ``--config`` file that is empty or not UTF-8 text before jsonargparse reads it (it raised a bare
    UnicodeDecodeError, a traceback, for a binary file and said only "Unexpected config:" for an empty one)."""
    from app.errors import UsageError

    paths = [b for a, b in zip(argv, argv[1:], strict=False) if a == "--config"] + [
        a[9:] for a in argv if a.startswith("--config=")
    ]
    for path in paths:
        try:
            data = Path(path).read_bytes()  # a missing path or a directory: jsonargparse reports it
        except OSError:
            continue
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise UsageError(f"--config {path}: not UTF-8 text (invalid byte at {e.start}; a binary file?)") from None
        if not text.strip() or "\0" in text:
            raise UsageError(f"--config {path}: {'empty' if not text.strip() else 'binary (NUL byte)'}; expected YAML")


def _unknown(cmd: str) -> str:
    close = difflib.get_close_matches(cmd, [*LIGHTNING_COMMANDS, *COMMANDS], n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"strandline: error: unknown command {cmd!r}{hint} (strandline --help lists the commands)"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage(), file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    if argv[0] == "--version":
        print(f"strandline {_version()}")
        return 0
    cmd, rest = argv[0], argv[1:]
    if cmd not in LIGHTNING_COMMANDS and cmd not in COMMANDS:
        print(_unknown(cmd), file=sys.stderr)
        return 2
    from app.threads import set_openmp_defaults

    set_openmp_defaults()  # before torch loads OpenMP (next line)
    from models.errors import TrainingDiverged, UserInputError, first_line  # after the cheap paths: imports torch

    try:
        _check_config_files(rest)
        if cmd in LIGHTNING_COMMANDS:
            from app.train import run_lightning_cli

            run_lightning_cli([cmd, *rest])
            return 0
        return run_command(cmd, rest)
    except UserInputError as e:
        print(f"strandline {cmd}: error: {e}", file=sys.stderr)
        return 2
    except TrainingDiverged as e:
        print(f"strandline {cmd}: error: {first_line(e)}", file=sys.stderr)
        return 1
    except OSError as e:
        if isinstance(e, BrokenPipeError):  # e.g. `strandline scan ... -o - | head`
            return 0
        if e.filename is None:
            raise
        print(f"strandline {cmd}: error: {e.filename}: {e.strerror or e}", file=sys.stderr)
        return 2
    except SystemExit as e:  # --help, --print_config
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    except MemoryError as e:  # an option far too large for this machine (e.g. --data.init_args.window 1e11)
        shown = f" ({first_line(e)})" if str(e) else ""
        print(
            f"strandline {cmd}: error: out of memory{shown}; use smaller sizes (window, chunk, batch)", file=sys.stderr
        )
        return 2
    except KeyboardInterrupt:
        print(f"strandline {cmd}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
