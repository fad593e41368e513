"""The wheelhouse workers install from when the package index is out of reach (issue #38: private
subnets have no route to PyPI): ``costscale bundle`` builds it with pip where the index is, and
publishes it to S3; the bootstrap script (``scaler/cloud/bootstrap/``) reads it there with the
instance profile.

Layout under ``s3://BUCKET/PREFIX``: ``wheels/FILE`` (each wheel once, shared by the targets),
``costscale-worker-bootstrap.sh`` (what an image recipe runs with ``--bake``) and ``manifest.json``, written last so a worker never reads a manifest naming a wheel not yet there::

    {"format": 1, "costscale": "0.1.0", "onnxruntime": "<1.32,>=1.31.1",
     "targets": {"cp311-x86_64": {"python": "3.11", "arch": "x86_64", "gpu": true,
                                  "wheels": [{"file": "...whl", "sha256": "...", "size": 123}]}}}

A target is a CPython version and a machine (``uname -m``): the dependencies are
``pip download --only-binary=:all: --platform manylinux_2_X_ARCH ... --python-version X.Y`` of
costscale's own requirements (its package metadata), binary wheels only (an instance has no
compiler), for glibc up to 2.34 (Amazon Linux 2023's; Ubuntu 22.04 has 2.35); with ``gpu``,
``onnxruntime-gpu`` of the same range too. costscale itself is built as a wheel from its source
tree (``pip wheel --no-deps``) or, installed from an index, downloaded from it. An adapter: it
runs pip and S3; the command is ``daemon/commands/bundle.py``.
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from importlib.metadata import requires
from pathlib import Path
from typing import Any, Callable, Iterable

from config.version import DISTRIBUTION

#: the newest glibc a target instance may be assumed to have (Amazon Linux 2023: 2.34)
MAX_GLIBC_MINOR = 34
#: manylinux_2_17 (manylinux2014) is the oldest tag the dependencies' wheels carry today
MIN_GLIBC_MINOR = 17
ARCHES = ("x86_64", "aarch64")
MANIFEST = "manifest.json"


class BundleError(RuntimeError):
    """A wheelhouse that cannot be built or published: one line for the user."""


@dataclass(frozen=True)
class Target:
    python: str     # "3.11"
    arch: str       # "x86_64" | "aarch64"

    @property
    def tag(self) -> str:
        """``cp311-x86_64``: how the bootstrap names the instance (``cpXY`` and ``uname -m``)."""
        return f"cp{self.python.replace('.', '')}-{self.arch}"


def parse_targets(pythons: Iterable[str], arches: Iterable[str]) -> list[Target]:
    """Every (python, arch) pair; ValueError naming a bad one."""
    out = []
    for py in pythons:
        major, _, minor = py.partition(".")
        if not (major == "3" and minor.isdigit() and int(minor) >= 11):
            raise ValueError(f"python {py!r}: give 3.11 or later as X.Y")
        for arch in arches:
            if arch not in ARCHES:
                raise ValueError(f"arch {arch!r}: give {' or '.join(ARCHES)}")
            out.append(Target(py, arch))
    return out


def platform_flags(arch: str) -> list[str]:
    """pip's ``--platform`` flags of every manylinux glibc a target accepts (pip does not widen a
    PEP 600 tag to older glibc versions by itself)."""
    tags = [f"manylinux_2_{m}_{arch}" for m in range(MIN_GLIBC_MINOR, MAX_GLIBC_MINOR + 1)] + [f"manylinux2014_{arch}"]
    return [flag for t in tags for flag in ("--platform", t)]


def own_requirements() -> list[str]:
    """costscale's install requirements (its package metadata, extras left out)."""
    return [r for r in (requires(DISTRIBUTION) or []) if "extra ==" not in r]


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _pip(args: list[str], what: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "pip", *args, "--disable-pip-version-check", "--quiet"],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("ERROR")] or proc.stderr.splitlines()[-1:]
        raise BundleError(f"{what}: {lines[0] if lines else 'pip failed'}")


def source_tree() -> Path | None:
    """costscale's source tree when it runs from one (an editable install, a checkout)."""
    root = Path(__file__).resolve().parents[2]
    pyproject = root / "pyproject.toml"
    return root if pyproject.is_file() and f'name = "{DISTRIBUTION}"' in pyproject.read_text() else None


#: the folders of the package (pyproject ``[tool.setuptools] packages``)
PACKAGE_DIRS = ("daemon", "scaler", "dispatcher", "variants", "sim", "worker", "config")
STAMP = ".complete"


def tree_digest(tree: Path) -> str:
    """SHA-256 over the package's files and pyproject.toml: the wheel is rebuilt when it changes."""
    h = hashlib.sha256()
    paths = [tree / "pyproject.toml"] + sorted(p for d in PACKAGE_DIRS for p in (tree / d).rglob("*")
                                               if p.is_file() and "__pycache__" not in p.parts)
    for p in paths:
        h.update(str(p.relative_to(tree)).encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def _fresh(out: Path, key: str) -> bool:
    """``out`` holds a complete download for ``key`` (its stamp): reused without asking the index."""
    return (out / STAMP).is_file() and (out / STAMP).read_text() == key


def own_wheel(cache: Path, version: str) -> Path:
    """costscale==version as a wheel in ``cache``: built from the source tree (again only when the
    tree changed), else downloaded."""
    out = cache / "own"
    out.mkdir(parents=True, exist_ok=True)
    tree = source_tree()
    key = f"{version} {tree_digest(tree) if tree is not None else 'index'}"
    wheels = sorted(out.glob(f"{DISTRIBUTION}-{version}-*.whl"))
    if wheels and _fresh(out, key):
        return wheels[0]
    for old in out.glob(f"{DISTRIBUTION}-*.whl"):
        old.unlink()
    (out / STAMP).unlink(missing_ok=True)
    if tree is not None:
        _pip(["wheel", "--no-deps", "-w", str(out), str(tree)], f"building the {DISTRIBUTION} wheel from {tree}")
    else:
        _pip(["download", "--no-deps", "--only-binary=:all:", "-d", str(out), f"{DISTRIBUTION}=={version}"],
             f"downloading {DISTRIBUTION}=={version}")
    wheels = sorted(out.glob(f"{DISTRIBUTION}-{version}-*.whl"))
    if not wheels:
        raise BundleError(f"no {DISTRIBUTION}-{version} wheel came out of pip")
    (out / STAMP).write_text(key)
    return wheels[0]


def download_target(cache: Path, target: Target, requirements: list[str], gpu_spec: str | None,
                    warn: Callable[[str], None]) -> list[Path]:
    """The target's dependency wheels in ``cache/TAG`` (pip skips files already there, so a second
    bundle reuses them, without asking the index once a download completed for the same
    requirements); with ``gpu_spec`` also onnxruntime-gpu (a warning when the index has none
    for the target)."""
    out = cache / target.tag
    out.mkdir(parents=True, exist_ok=True)
    key = json.dumps([requirements, gpu_spec])
    if _fresh(out, key):
        return sorted(out.glob("*.whl"))
    (out / STAMP).unlink(missing_ok=True)
    common = ["download", "--only-binary=:all:", *platform_flags(target.arch), "--python-version", target.python,
              "--implementation", "cp", "--abi", f"cp{target.python.replace('.', '')}", "-d", str(out)]
    _pip(common + requirements, f"dependencies for {target.tag}")
    if gpu_spec:
        try:
            _pip(common + [f"onnxruntime-gpu{gpu_spec}"], f"onnxruntime-gpu for {target.tag}")
        except BundleError as exc:
            warn(f"{exc}: GPU workers of {target.tag} cannot install from this wheelhouse")
            return sorted(out.glob("*.whl"))      # no stamp: the next bundle asks the index again
    (out / STAMP).write_text(key)
    return sorted(out.glob("*.whl"))


def manifest(version: str, ort_range: str, per_target: dict[Target, list[Path]]) -> dict[str, Any]:
    """The manifest of the targets' wheels (module docstring)."""
    targets = {}
    for t, wheels in per_target.items():
        targets[t.tag] = {"python": t.python, "arch": t.arch,
                          "gpu": any(w.name.startswith("onnxruntime_gpu-") for w in wheels),
                          "wheels": [{"file": w.name, "sha256": sha256_of(w), "size": w.stat().st_size}
                                     for w in wheels]}
    return {"format": 1, "costscale": version, "onnxruntime": ort_range, "targets": targets}


def split_s3(uri: str) -> tuple[str, str]:
    """(bucket, prefix) of ``s3://BUCKET/PREFIX``; ValueError otherwise."""
    if not uri.startswith("s3://"):
        raise ValueError(f"{uri!r} is not an s3://BUCKET/PREFIX")
    bucket, _, prefix = uri[len("s3://"):].partition("/")
    if not bucket or not prefix.strip("/"):
        raise ValueError(f"{uri!r} needs a bucket and a prefix (s3://BUCKET/PREFIX)")
    return bucket, prefix.strip("/")


def publish(s3: Any, uri: str, files: dict[str, Path], doc: dict[str, Any],
            step: Callable[[str], None], extra: dict[str, bytes] | None = None) -> int:
    """Upload ``files`` (wheel name -> path) under ``uri``/wheels/, skipping those already there with
    the same size, the ``extra`` objects (name -> bytes, under ``uri``: the bootstrap script, for
    image recipes), then the manifest; returns how many wheels were uploaded."""
    bucket, prefix = split_s3(uri)
    have: dict[str, int] = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{prefix}/wheels/"):
        for obj in page.get("Contents", []):
            have[obj["Key"].rsplit("/", 1)[-1]] = obj["Size"]
    sent = 0
    for name, path in sorted(files.items()):
        if have.get(name) != path.stat().st_size:
            s3.upload_file(str(path), bucket, f"{prefix}/wheels/{name}")
            sent += 1
        step(name)
    for name, body in (extra or {}).items():
        s3.put_object(Bucket=bucket, Key=f"{prefix}/{name}", Body=body)
    s3.put_object(Bucket=bucket, Key=f"{prefix}/{MANIFEST}", Body=json.dumps(doc, indent=1).encode(),
                  ContentType="application/json")
    return sent


def cache_dir() -> Path:
    """Where downloaded wheels are kept between bundles ($COSTSCALE_CACHE_DIR/wheelhouse, else
    ~/.cache/costscale/wheelhouse)."""
    base = os.environ.get("COSTSCALE_CACHE_DIR") or str(Path.home() / ".cache" / "costscale")
    return Path(base) / "wheelhouse"


__all__ = ["BundleError", "MANIFEST", "Target", "cache_dir", "download_target", "manifest", "own_requirements",
           "own_wheel", "parse_targets", "platform_flags", "publish", "sha256_of", "split_s3"]
