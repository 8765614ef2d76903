"""How to install an extra, in the one line every hint in the package gives: the package is installed from a
clone of the repository today, so the form that works there comes first, each form labelled."""

from __future__ import annotations


def install_hint(extra: str) -> str:
    """The ways to install ``extra``: from a clone (``pip install '.[extra]'``, or into the ``.venv`` that
    ``scripts/demo.sh`` made, without rebuilding the extension), and from the package index once published."""
    return (
        f"from a clone, pip install '.[{extra}]' (or, into the .venv that scripts/demo.sh made, without "
        f"rebuilding: ./scripts/add_extra.sh {extra}); from the package index, "
        f"pip install 'subagent-tracker[{extra}]'"
    )
