"""The config's shared field types: names and the strict base model (every section forbids unknown
fields, is frozen, and refuses inf and nan)."""
from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")


def _check_name(v: str) -> str:
    if not _NAME_RE.match(v):
        raise ValueError("must be 1-63 letters, digits, '.', '_' or '-'")
    return v


Name = Annotated[str, AfterValidator(_check_name)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


__all__ = ["Name", "Strict"]
