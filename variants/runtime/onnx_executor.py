"""ONNX Runtime executor: one InferenceSession per loaded variant (DESIGN "Hardware").

ONNX Runtime falls back to the CPU provider *silently* when CUDA cannot be used; this executor
reads ``session.get_providers()`` after creating each session, reports those providers, and logs a
warning when CUDA was asked for but not granted.

Batch-tuned variants (INFaaS §3.2: variants "optimized for different batch sizes") have a static
batch dimension; :func:`run_batched` pads a smaller query up to it and splits a larger one.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from variants.runtime.executor import CPU, CUDA, ExecutorKind

log = logging.getLogger(__name__)


def static_batch(session: "object") -> int | None:
    """The static first dimension shared by the session's inputs, or None when it is dynamic."""
    dims = []
    for i in session.get_inputs():  # type: ignore[attr-defined]
        d = i.shape[0] if i.shape else None
        dims.append(d if isinstance(d, int) and d > 0 else None)
    if dims and all(d is not None for d in dims) and len(set(dims)) == 1:
        return int(dims[0])  # type: ignore[arg-type]
    return None


def run_batched(session: "object", inputs: Mapping[str, np.ndarray], tuned: int | None) -> dict[str, np.ndarray]:
    """Run ``inputs`` through ``session``; with a static batch ``tuned``, pad with zeros to a
    multiple of it, run chunk by chunk, and cut the outputs back to the query's batch."""
    names = [o.name for o in session.get_outputs()]  # type: ignore[attr-defined]
    feeds = {k: np.ascontiguousarray(v) for k, v in inputs.items()}
    if not tuned:
        res = session.run(names, feeds)  # type: ignore[attr-defined]
        return dict(zip(names, res))
    n = {v.shape[0] for v in feeds.values()}
    if len(n) != 1:
        raise ValueError("inputs disagree on the batch dimension")
    batch = n.pop()
    chunks: list[list[np.ndarray]] = []
    for start in range(0, max(batch, 1), tuned):
        part = {}
        for k, v in feeds.items():
            piece = v[start:start + tuned]
            if piece.shape[0] < tuned:
                pad = np.zeros((tuned - piece.shape[0],) + piece.shape[1:], dtype=piece.dtype)
                piece = np.concatenate([piece, pad], axis=0)
            part[k] = piece
        chunks.append(session.run(names, part))  # type: ignore[attr-defined]
    return {name: np.concatenate([c[i] for c in chunks], axis=0)[:batch] for i, name in enumerate(names)}


class OnnxExecutor:
    """Executor over ONNX Runtime. ``requested`` providers are asked for in order."""

    kind: ExecutorKind = "onnxruntime"

    def __init__(self, requested: Sequence[str], threads: int | None = None, kind: ExecutorKind = "onnxruntime") -> None:
        import onnxruntime as ort

        self._ort = ort
        self.kind = kind
        available = set(ort.get_available_providers())
        self.requested = list(requested)
        # ask only for providers this build has; the rest are reported as not granted
        self._ask = [p for p in self.requested if p in available] or [CPU]
        self.threads = threads
        self._sessions: dict[str, object] = {}
        self._tuned: dict[str, int | None] = {}
        self._granted: list[str] | None = None
        self._warned = False
        self._per_variant: dict[str, list[str]] = {}

    # -- providers -------------------------------------------------------------------------------
    @property
    def providers(self) -> list[str]:
        """Providers actually granted by the most recent session (before any load: a probe)."""
        if self._granted is None:
            self._granted = self._probe()
        return list(self._granted)

    def _probe(self) -> list[str]:
        from variants.runtime.builtin_models import mlp_model

        sess = self._session_from_bytes(mlp_model(4, 4, 2).SerializeToString())
        return list(sess.get_providers())

    def _options(self) -> object:
        so = self._ort.SessionOptions()
        so.log_severity_level = 3
        if self.threads:
            so.intra_op_num_threads = int(self.threads)
            so.inter_op_num_threads = 1
        return so

    def _session_from_bytes(self, data: bytes | str) -> object:
        sess = self._ort.InferenceSession(data, sess_options=self._options(), providers=self._ask)
        granted = list(sess.get_providers())
        if CUDA in self.requested and CUDA not in granted and not self._warned:
            self._warned = True
            log.warning("CUDA was requested but ONNX Runtime granted only %s (silent CPU fallback)", ", ".join(granted))
        self._granted = granted
        return sess

    # -- Executor protocol -----------------------------------------------------------------------
    def session(self, variant: str) -> object:
        try:
            return self._sessions[variant]
        except KeyError:
            raise KeyError(f"variant {variant!r} is not loaded") from None

    def load(self, variant: str, path: Path) -> None:
        sess = self._session_from_bytes(str(path))
        self._sessions[variant] = sess
        self._tuned[variant] = static_batch(sess)
        self._per_variant[variant] = list(sess.get_providers())  # type: ignore[attr-defined]

    def unload(self, variant: str) -> None:
        self._sessions.pop(variant, None)
        self._tuned.pop(variant, None)
        self._per_variant.pop(variant, None)

    def loaded(self) -> list[str]:
        return sorted(self._sessions)

    def providers_for(self, variant: str) -> list[str]:
        """Providers ONNX Runtime granted to this variant's session."""
        return list(self._per_variant.get(variant, self.providers))

    def run(self, variant: str, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return run_batched(self.session(variant), inputs, self._tuned.get(variant))
