"""costscale's CloudFormation stack (issue #38, deliverable 4): ``costscale-stack.yaml``, built by
:mod:`config.stack.template` from the IAM documents of ``config/iam``, and :mod:`config.stack.outputs`,
the config its outputs fill (``costscale init --from-stack``)."""
from __future__ import annotations

from pathlib import Path

#: the shipped template (package data)
TEMPLATE_PATH = Path(__file__).resolve().parent / "costscale-stack.yaml"

__all__ = ["TEMPLATE_PATH"]
