"""Numbers on the command line: ``finite_float``, the argparse type of every numeric flag that takes
a real number, refuses ``inf``, ``nan`` and what is not a number in one line (DESIGN invariant 5)."""
from __future__ import annotations

import argparse
import math


def finite_float(text: str) -> float:
    """``text`` as a finite float; argparse turns the error into ``argument --flag: ...`` (exit 2)."""
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(x):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return x


__all__ = ["finite_float"]
