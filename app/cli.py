"""The ``strandline`` console script.

``fit | validate | test | predict`` go to LightningCLI (``app.train``); the other commands are typed
functions exposed through jsonargparse, so ``strandline CMD --help`` documents every option.
Exit codes: 0 success, 2 bad input or usage (one line on stderr), 130 interrupted.
"""

from __future__ import annotations

import importlib
import sys

LIGHTNING_COMMANDS = ("fit", "validate", "test", "predict")
COMMANDS: dict[str, tuple[str, str]] = {
    # name: (module:function, one-line help)
    "scan": ("app.scan:scan", "score every base of FASTA records in constant memory -> bedGraph/WIG/bigWig"),
    "plot": ("app.scan:plot", "draw a track over a region to PNG"),
    "summarize": ("app.summarize:summarize", "read a document once, keep a running extractive summary"),
    "generate": ("app.generate:generate", "sample a continuation token by token (recurrent mode)"),
    "export": ("app.export:export", "convert a Lightning checkpoint to a model directory"),
    "demo": ("app.demo:demo", "train a tiny model on the shipped genome, scan it, summarize a shipped document"),
}


def _usage() -> str:
    lines = ["usage: strandline COMMAND [options]   (strandline COMMAND --help for details)", "", "commands:"]
    lines += [f"  {c:<10} LightningCLI: {c} a model (--config configs/...yaml)" for c in LIGHTNING_COMMANDS]
    lines += [f"  {name:<10} {help_}" for name, (_, help_) in COMMANDS.items()]
    return "\n".join(lines)


def _resolve(target: str):
    module, func = target.split(":")
    return getattr(importlib.import_module(module), func)


def _underscore(arg: str) -> str:
    """Accept ``--max-new-tokens`` as well as jsonargparse's ``--max_new_tokens`` (option names only)."""
    if not arg.startswith("--") or arg == "--":
        return arg
    name, eq, value = arg.partition("=")
    return "--" + name[2:].replace("-", "_") + eq + value


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0 if argv else 2
    cmd, rest = argv[0], argv[1:]
    from app.errors import USER_ERRORS  # after the cheap paths: imports torch

    try:
        if cmd in LIGHTNING_COMMANDS:
            from app.train import run_lightning_cli

            run_lightning_cli([cmd, *rest])
            return 0
        if cmd not in COMMANDS:
            print(f"strandline: error: unknown command {cmd!r}\n\n{_usage()}", file=sys.stderr)
            return 2
        from jsonargparse import CLI

        if cmd == "scan":  # several FASTA paths and -o OUT, as jsonargparse cannot take them directly
            from app.scan import cli_args

            rest = cli_args(rest)
        elif cmd == "summarize":  # -o OUT as an alias of --output
            rest = ["--output" if a == "-o" else a for a in rest]
        args = [_underscore(a) for a in rest]
        result = CLI(_resolve(COMMANDS[cmd][0]), args=args, prog=f"strandline {cmd}", as_positional=True)
        return int(result) if isinstance(result, int) else 0
    except USER_ERRORS as e:
        print(f"strandline {cmd}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"strandline {cmd}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. `strandline scan ... -o - | head`
        return 0


if __name__ == "__main__":
    sys.exit(main())
