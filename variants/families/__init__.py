"""Real variant families (issue 13, deliverable 1): sets of models that answer one task at
different accuracy and cost, with accuracies measured on a validation set shipped in a package
(:mod:`variants.families.digits`) or published and cited (:mod:`variants.families.resnet`), and
latencies measured with ONNX Runtime (:mod:`variants.families.profiles`). Registered through the
model-less API as applications (:mod:`variants.families.registration`).

``python -m variants.families`` rebuilds the members and regenerates the CSVs shipped in
``config/families`` (see that package's docstring for their contents). Importing this package is
light: scikit-learn, skl2onnx and ONNX Runtime load only when a family is built or profiled.
"""
from __future__ import annotations

from pathlib import Path

from variants.families.family import FamilySpec, Member

FAMILY_NAMES = ("digits", "resnet")


def spec(name: str) -> FamilySpec:
    """The :class:`FamilySpec` of family ``name`` (KeyError for an unknown one)."""
    if name == "digits":
        from variants.families.digits import SPEC
    elif name == "resnet":
        from variants.families.resnet import SPEC
    else:
        raise KeyError(f"unknown family {name!r} (known: {', '.join(FAMILY_NAMES)})")
    return SPEC


def build_family(name: str, out_dir: Path, **kw) -> list[Member]:
    """Build family ``name``'s members under ``out_dir`` (digits: trained and measured, seconds;
    resnet: graphs with random weights, ``image_size=`` to change the resolution)."""
    spec(name)
    if name == "digits":
        from variants.families import digits
        return digits.build(Path(out_dir), **kw)
    from variants.families import resnet
    return resnet.build(Path(out_dir), **kw)


__all__ = ["FAMILY_NAMES", "FamilySpec", "Member", "build_family", "spec"]
