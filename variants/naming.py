"""Names of variant instances: ``name@suffix``, a variant on a hardware class (the dispatcher's
routing) or on an instance type (the model loop)."""
from __future__ import annotations

SEP = "@"


def expand_name(name: str, suffix: str) -> str:
    """``name@suffix``: a variant on a hardware class (routing) or an instance type (model loop)."""
    return f"{name}{SEP}{suffix}"


def split_name(expanded: str) -> tuple[str, str]:
    """Inverse of :func:`expand_name`: (name, suffix); suffix "" for a plain name."""
    name, _, suffix = expanded.partition(SEP)
    return name, suffix


def base_name(expanded: str) -> str:
    return split_name(expanded)[0]
