"""The ``strandline`` console script.

``fit | validate | test | predict`` go to LightningCLI (``strandline.app.train``). Every other command is a typed
function named in ``COMMANDS``; its jsonargparse parser is built from the function's signature and
docstring, so ``strandline CMD --help`` documents every option and ``--config FILE.yaml`` reads them from
YAML. Only the chosen command's module is imported (the others may import torch); ``strandline --help``
and ``--version`` import neither torch nor Lightning.

A command whose function takes one options dataclass (``scan(args: ScanArgs)``) is built from the dataclass
instead: its fields are the parameters, and the string under each field (litgpt's attribute docstrings) its
help, so the engine that takes the same dataclass and the CLI share one list of options.

Parsing rules, the same for every command: parameters without a default are positionals in signature
order (``Command.positionals`` gives one ``nargs``, e.g. several input files); ``Command.short`` gives
short flags (``-o`` for ``--output``); booleans are flags (``--resume`` / ``--no_resume``); every option
is accepted with dashes too (``--max-new-tokens`` = ``--max_new_tokens``).

Exit codes: 0 success; 2 for bad input or usage, as one line on stderr (every ``UserInputError``, an
unreadable or missing user path, a bad option); 1 when valid input has no result (``summarize`` of a
document with no qualifying sentence; a training run that diverged, ``TrainingDiverged``); 130 interrupted.
"""

from __future__ import annotations

import dataclasses
import difflib
import errno
import importlib
import inspect
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args, get_origin, get_type_hints

from docstring_parser import parse as parse_doc
from docstring_parser import parse_from_object
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
        "strandline.app.scan:scan",
        "score every base of FASTA/GenBank/EMBL records in constant memory -> bedGraph/WIG/bigWig",
        positionals=(("inputs", "+"),),
        short=(("-o", "output"),),
    ),
    "score-variants": Command(
        "strandline.app.score_variants:score_variants",
        "score the SNVs and short indels of a VCF: log2 P(ALT) - log2 P(REF) in bits, forking the carried state",
        short=(("-o", "output"),),
    ),
    "plot": Command("strandline.app.scan:plot", "draw tracks over a region, with features, to PNG/SVG/PDF"),
    "report": Command(
        "strandline.app.scan:report",
        "one offline HTML page (igv.js) with the genome, tracks, features and the top anomalous regions",
        positionals=(("tracks", "+"),),
        short=(("-o", "output"),),
    ),
    "summarize": Command(
        "strandline.app.summarize:summarize",
        "read a document once, keep a running extractive summary",
        short=(("-o", "output"),),
    ),
    "generate": Command("strandline.app.generate:generate", "sample a continuation token by token (recurrent mode)"),
    "export": Command("strandline.app.export:export", "convert a Lightning checkpoint to a model directory"),
    "convert": Command(
        "strandline.app.convert:convert", "turn a softmax model into a linear (RNN) one: t2r, hedgehog, lolcats"
    ),
    "build-summarizer": Command(
        "strandline.app.build_summarizer:build_summarizer", "fit and select a summarizer's salience head from a recipe"
    ),
    "demo": Command(
        "strandline.app.demo:demo", "train a tiny model on the shipped genome, scan it, summarize a shipped document"
    ),
}


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("strandline")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def _usage() -> str:
    w = max(len(c) for c in (*LIGHTNING_COMMANDS, *COMMANDS))
    lines = ["usage: strandline COMMAND [options]   (strandline COMMAND --help for details)", "", "commands:"]
    lines += [f"  {c:<{w}} LightningCLI: {c} a model (--config configs/...yaml)" for c in LIGHTNING_COMMANDS]
    lines += [f"  {name:<{w}} {cmd.help}" for name, cmd in COMMANDS.items()]
    return "\n".join(lines)


def _resolve(target: str):
    module, func = target.split(":")
    return getattr(importlib.import_module(module), func)


class DashedParser(ArgumentParser):
    """A jsonargparse parser whose every ``--long_name`` option is also ``--long-name`` (both are common)."""

    def add_argument(self, *args, **kwargs):
        dashed = [a.replace("_", "-") for a in args if a.startswith("--") and "_" in a and "." not in a]
        return super().add_argument(*args, *[d for d in dashed if d not in args], **kwargs)


class DashedYesNo(ActionYesNo):
    """``--flag`` / ``--no_flag`` with ``--no-flag`` too (ActionYesNo knows only its one ``no_`` prefix)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        if kwargs and self.option_strings[-1].startswith("--no_"):
            self.option_strings.append(self.option_strings[-1].replace("_", "-"))

    def __call__(self, *args, **kwargs):
        if len(args) > 3 and isinstance(args[3], str) and args[3].startswith("--no-"):
            args = (*args[:3], "--no_" + args[3][5:].replace("-", "_"), *args[4:])
        return super().__call__(*args, **kwargs)


def options_class(func) -> type | None:
    """The options dataclass of a command function that takes one (``scan(args: ScanArgs)``), else None."""
    params = list(inspect.signature(func).parameters)
    if len(params) != 1:
        return None
    tp = get_type_hints(func).get(params[0])
    return tp if isinstance(tp, type) and dataclasses.is_dataclass(tp) else None


def parameters_of(func) -> tuple[object, dict[str, str]]:
    """(what the options are read from: ``func`` or its options dataclass, {option: help text})."""
    cls = options_class(func)
    if cls is None:
        return func, {p.arg_name: p.description for p in parse_doc(func.__doc__ or "").params}
    return cls, {p.arg_name: p.description for p in parse_from_object(cls).params}  # attribute docstrings


def build_parser(name: str, cmd: Command):
    """The jsonargparse parser of one command (see the module docstring for the rules)."""
    func = _resolve(cmd.target)
    spec, helps = parameters_of(func)
    hints = get_type_hints(spec)
    nargs, shorts = dict(cmd.positionals), {param: flag for flag, param in cmd.short}
    description = parse_doc(func.__doc__ or "").short_description
    parser = DashedParser(prog=f"strandline {name}", description=description, exit_on_error=False)
    parser.add_argument("--config", action="config", help="read options from a YAML file")
    handled = set()
    for pname, param in inspect.signature(spec).parameters.items():
        tp, required = hints.get(pname, str), param.default is inspect.Parameter.empty
        text = helps.get(pname)
        if pname in shorts:
            kw = {"required": True} if required else {"default": param.default}
            parser.add_argument(shorts[pname], f"--{pname}", type=tp, help=text, **kw)
        elif tp is bool:
            parser.add_argument(f"--{pname}", action=DashedYesNo, default=param.default is True, help=text)
        elif required and pname in nargs:
            item = get_args(tp)[0] if get_origin(tp) in (list, tuple) else tp
            parser.add_argument(pname, nargs=nargs[pname], type=item, help=text)
        elif required:
            parser.add_argument(pname, type=tp, help=text)
        else:
            continue
        handled.add(pname)
    if spec is func:
        parser.add_function_arguments(func, skip=handled, as_group=False)
    else:  # jsonargparse reads attribute docstrings only under a global setting: give the help texts here
        parser.add_class_arguments(spec, skip=handled, as_group=False)
        for action in parser._actions:
            if action.dest in helps and action.dest not in handled:
                action.help = helps[action.dest]
    return parser, func


def _type_name(tp) -> str:
    args = get_args(tp)
    if type(None) in args and len(args) == 2:  # an optional value: say what it takes (leaving it out is the None)
        tp = next(a for a in args if a is not type(None))
    if get_origin(tp) is Literal:  # e.g. --method: (expected one of t2r, hedgehog, lolcats), not "Literal"
        return "one of " + ", ".join(str(a) for a in get_args(tp))
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "").replace("NoneType", "null")


def run_command(name: str, argv: list[str]) -> int:
    """Parse ``argv`` for command ``name`` and call its function; usage errors raise ``UsageError``."""
    from argparse import ArgumentError

    from strandline.app.errors import UsageError, usage_message

    cmd = COMMANDS[name]
    parser, func = build_parser(name, cmd)
    spec, _ = parameters_of(func)
    params = inspect.signature(spec).parameters
    try:
        cfg = parser.parse_args(argv)
    except ArgumentError as e:
        types = {k: _type_name(t) for k, t in get_type_hints(spec).items()}
        positional = {p for p, v in params.items() if v.default is inspect.Parameter.empty} - set(
            dict(cmd.short).values()
        )
        hint = _option_hint(str(e), params, argv, positional)
        raise UsageError(f"{usage_message(str(e), types)}{hint} (see strandline {name} --help)") from None
    kwargs = {k: v for k, v in cfg.as_dict().items() if k in params}
    result = func(**kwargs) if spec is func else func(spec(**kwargs))
    return result if isinstance(result, int) and not isinstance(result, bool) else 0


def _option_hint(msg: str, params, argv: list[str], positional: set[str]) -> str:
    """What to type instead: ``; did you mean --max_new_tokens?`` for an option close to a real one, the
    positional form of a positional given as ``--model=x``, ``--prompt=-ACGT`` for a value that starts with a
    dash, and options moved before a ``--`` (every argument after it is an input, as POSIX says)."""
    after = argv[argv.index("--") + 1 :] if "--" in argv else []
    if any(a.startswith("-") and a.lstrip("-") for a in after) and (
        "unrecognized arguments" in msg or "arguments are required" in msg
    ):
        return "; every argument after -- is an input: put the options before --"
    m = re.match(r"argument (--[\w.-]+).*: expected one argument", msg)
    if m:
        return f"; a value that starts with a dash is given as {m.group(1)}=VALUE"
    m = re.match(r"unrecognized arguments: --([\w-]+)", msg)
    if m is None:
        return ""
    close = difflib.get_close_matches(m.group(1).replace("-", "_"), list(params), n=1)
    if close and close[0] in positional:
        return f"; {close[0].upper()} is positional: give it without --{close[0]}"
    return f"; did you mean --{close[0]}?" if close else ""


def _check_config_files(argv: list[str]) -> None:
    """Refuse a ``--config`` file that is empty or not UTF-8 text before jsonargparse reads it (it raised a bare
    UnicodeDecodeError, a traceback, for a binary file and said only "Unexpected config:" for an empty one)."""
    from strandline.app.errors import UsageError

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


class _ClosedStdout:
    """Standard output when the process was started without one (``>&-``): sys.stdout is None, and a write
    fails as on a bad descriptor (one line, exit 2) instead of with an AttributeError traceback."""

    def write(self, text: str) -> int:
        raise OSError(errno.EBADF, "standard output is closed")

    def flush(self) -> None:
        pass


def _discard_stdout() -> None:
    """Point file descriptor 1 at /dev/null after standard output failed (a closed pipe, a full disk), as the
    Python docs advise for SIGPIPE: the interpreter's last flush then neither fails nor prints a warning."""
    import os

    try:
        if sys.stdout.fileno() != 1:  # a test's capture, not the process's standard output
            return
    except (AttributeError, OSError, ValueError):  # not a real file (a test's capture): nothing is flushed at exit
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)


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
    from strandline.app.threads import set_openmp_defaults

    set_openmp_defaults()  # before torch loads OpenMP (next line)
    from strandline.app.errors import STDOUT, writing_stdout

    if sys.stdout is None:
        sys.stdout = _ClosedStdout()
    from strandline.errors import (  # after the cheap paths: imports torch
        TrainingDiverged,
        UserInputError,
        first_line,
        os_error_message,
    )

    try:
        _check_config_files(rest)
        if cmd in LIGHTNING_COMMANDS:
            from strandline.app.train import run_lightning_cli

            run_lightning_cli([cmd, *rest])
            return 0
        rc = run_command(cmd, rest)
        with writing_stdout():  # what is still buffered fails here, not in the interpreter's exit (a traceback)
            sys.stdout.flush()
        return rc
    except UserInputError as e:
        print(f"strandline {cmd}: error: {e}", file=sys.stderr)
        return 2
    except TrainingDiverged as e:
        print(f"strandline {cmd}: error: {first_line(e)}", file=sys.stderr)
        return 1
    except OSError as e:  # ENOSPC, EIO, EROFS, EACCES...: one line naming the path when known
        if e.filename in (None, STDOUT) or isinstance(e, BrokenPipeError):  # stdout, likely: its unwritten rest
            _discard_stdout()  # would fail again at exit, with "Exception ignored" noise and exit status 120
        if isinstance(e, BrokenPipeError):  # e.g. `strandline scan ... -o - | head`: the reader has what it wanted
            return 0
        print(f"strandline {cmd}: error: {os_error_message(e)}", file=sys.stderr)
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
