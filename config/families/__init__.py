"""Profiles of the real variant families (:mod:`variants.families`), shipped as data.

Every file has the columns ``model,variant,instance_type,batch_size,latency_ms,accuracy``:

- ``model``: the family, i.e. the application queries name (``digits``, ``resnet``);
- ``variant``: the member (a registered model whose one variant is itself), e.g. ``resnet-50``;
- ``latency_ms``: the median of the timed ONNX Runtime runs of one batch (fp32, batch ``batch_size``);
- ``accuracy``: top-1 as a fraction of 1. ``digits``: MEASURED here on the held-out 30 % of
  scikit-learn's digits (540 images) by the exported graph on ONNX Runtime. ``resnet``: PUBLISHED
  ImageNet-1K acc@1 of torchvision's IMAGENET1K_V1 weights, not measured here.

The files:

- ``<family>.local.csv``: MEASURED on the CPU of the machine that regenerated them (instance type
  ``local``; which machine and when: BENCHMARKS.md "Variant families").
- ``<family>.csv``: the instance types, DERIVED, not measured: the local latency times the type's
  emulation factor at that batch (``config.emulation`` rule 2, the factors the worker pads an
  unprofiled model's service time with; the local machine stands for the fastest reference type,
  factor 1). Only types with a reference profile have a factor (c5n.2xlarge, g4dn.xlarge,
  r5n.large, t3.xlarge); the Inferentia types and the other catalog types have none and no rows.
  The GPU rows are therefore CPU latencies scaled by the Kairos reference models' ratios, not GPU
  measurements.
- ``<family>.<gpu>.csv`` (none shipped yet): what ``bench/variants/gpu_profile.py`` writes when it is run on
  a GPU with ONNX Runtime's CUDA execution provider, instance type ``--type`` (BENCHMARKS.md).

Regenerate the first two with ``python -m variants.families`` (``--family``, ``--out``).
"""
from __future__ import annotations

from importlib import resources
from pathlib import Path


def csv_path(family: str, kind: str = "") -> Path:
    """Path of a CSV shipped here: ``<family>.csv`` (the instance types, derived) or
    ``<family>.<kind>.csv`` (``local``: measured on the CPU that made them)."""
    name = f"{family}.{kind}.csv" if kind else f"{family}.csv"
    return Path(str(resources.files(__name__).joinpath(name)))


def shipped() -> list[str]:
    """The families shipped here (each ``<name>.csv``)."""
    return sorted(f.name[:-4] for f in resources.files(__name__).iterdir()
                  if f.name.endswith(".csv") and f.name.count(".") == 1)


__all__ = ["csv_path", "shipped"]
