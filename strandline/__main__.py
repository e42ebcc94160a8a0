"""``python -m strandline ...`` is the ``strandline`` command."""

from strandline.app.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
