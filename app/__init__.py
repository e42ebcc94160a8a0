"""Thin entry points: the ``strandline`` CLI and its commands."""
