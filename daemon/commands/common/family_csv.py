"""The ``--variants`` CSV of the ``accuracy`` commands (``plan`` and ``replay``): a variant family's
profile rows (``config/families``) and their :class:`variants.profiler.VariantProfile`s; which
input is refused, as one line naming the command."""
from __future__ import annotations

from typing import TYPE_CHECKING

from config.errors import UsageError
from variants.accuracy.planner import profiles_from_rows

if TYPE_CHECKING:
    from variants.families.profiles import ProfileRow
    from variants.profiler import VariantProfile


def load_variants(path: str, cmd: str) -> tuple[list[ProfileRow], list[VariantProfile]]:
    """The rows of a family profile CSV and their :class:`VariantProfile`s; bad input is a
    :class:`UsageError` naming ``cmd``."""
    from variants.families.profiles import read_csv   # deferred, as the CLI keeps its start-up light

    try:
        rows = read_csv(path)
    except OSError as exc:
        raise UsageError(f"{cmd}: --variants: cannot read {path}: {exc.strerror or exc}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise UsageError(f"{cmd}: --variants: {str(exc).splitlines()[0]}") from None
    if not rows:
        raise UsageError(f"{cmd}: --variants: {path} has no rows")
    try:
        return rows, profiles_from_rows(rows)
    except ValueError as exc:
        raise UsageError(f"{cmd}: --variants: {path}: {exc}") from None


__all__ = ["load_variants"]
