"""Workers an accuracy plan leaves empty host the most accurate variant they can run (pure).

The accuracy planner (Proteus §4) places just enough capacity for the demand; a worker it does not
need is held and paid for anyway (the fleet planner decides what is held), so leaving it empty wastes
the capacity that absorbs the next burst. Hosting the most accurate variant that fits its type within
the SLO costs no accuracy: routing (:func:`variants.accuracy.allocation.headroom_routing`) fills the most
accurate workers first, and the extra worker lowers every worker's load.
"""
from __future__ import annotations

from typing import Mapping


def fill_spare(placement: Mapping[str, str | None], worker_types: Mapping[str, str],
               best_by_type: Mapping[str, str]) -> dict[str, str | None]:
    """``placement`` with each empty worker given ``best_by_type[its type]`` (the most accurate variant
    placeable there); a type with no such variant stays empty."""
    return {w: (v if v is not None else best_by_type.get(worker_types[w])) for w, v in placement.items()}


__all__ = ["fill_spare"]
