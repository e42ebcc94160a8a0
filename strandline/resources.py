"""What the package ships, found with ``importlib.resources`` (a checkout, an editable install or a wheel alike).

- models: ``strandline.data`` ``models/<name>/`` (``dna-corpus-tbptt``, ``summarizer``, ...);
- genomes and documents: ``strandline.data`` ``genomes/``, ``documents/``;
- recipes: ``strandline.configs`` ``dna/recall-cpu.yaml``, ...;
- vendor: ``strandline.data`` ``vendor/`` (igv.js for ``strandline report``).
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from strandline.errors import UserInputError

_ROOTS = {"configs": ("strandline.configs", ""), "models": ("strandline.data", "models"),
          "genomes": ("strandline.data", "genomes"), "documents": ("strandline.data", "documents"),
          "vendor": ("strandline.data", "vendor")}  # fmt: skip


def shipped_path(kind: str, name: str = "") -> Path:
    """The path of a shipped file or folder, e.g. ``shipped_path("models", "dna-corpus-tbptt")``.

    Args:
        kind: one of 'models', 'genomes', 'documents', 'configs', 'vendor'.
        name: a name inside it ('' for the folder itself); '/' separates subfolders.

    Raises:
        UserInputError: unknown kind, or nothing shipped under that name.
    """
    if kind not in _ROOTS:
        raise UserInputError(f"unknown kind {kind!r}: choose from {', '.join(_ROOTS)}")
    package, sub = _ROOTS[kind]
    path = Path(str(files(package))) / sub / name
    if not path.exists():
        raise UserInputError(f"no shipped {kind} named {name!r}")
    return path


def shipped_models() -> list[str]:
    """Names of the model directories shipped with the package."""
    root = shipped_path("models")
    return sorted(p.name for p in root.iterdir() if (p / "config.json").is_file())


def resolve(path: str, kind: str = "models") -> str:
    """``path`` itself when it exists or names a folder; else, for a bare name of something shipped, its path.

    So ``strandline scan dna-corpus-tbptt genome.fa`` works from any folder, and a local ``dna-corpus-tbptt/`` wins.
    """
    p = Path(path)
    if p.exists() or p.name != path or path in ("", ".", ".."):
        return path
    try:
        return str(shipped_path(kind, path))
    except UserInputError:
        return path  # whoever reads it says what is missing
