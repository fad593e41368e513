"""Which costscale and which worker protocol this process speaks (issue #38): a worker registers
with both, and the dispatcher refuses one whose either differs from its own
(:meth:`dispatcher.workers.registry.WorkerRegistry.register`). The launch puts the daemon's exact
version in each worker's user data (:mod:`scaler.cloud.user_data`), so a worker installed from a
stock image runs the version that launched it."""
from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

#: the distribution name (pyproject ``[project] name``)
DISTRIBUTION = "costscale"
#: the dispatcher-worker protocol (``dispatcher/proto/costscale.proto``): raise it with any change a
#: worker or dispatcher of the other number cannot follow
PROTOCOL_VERSION = 1
#: what a source tree that was never installed reports (no package metadata)
UNKNOWN = "0+unknown"


def costscale_version() -> str:
    """This process's costscale version, from the installed package's metadata (``UNKNOWN`` when
    costscale runs from a tree that was never installed)."""
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return UNKNOWN


def version_mismatch(worker_version: str, worker_protocol: int, own_version: str, own_protocol: int) -> str | None:
    """The one line refusing a worker of another costscale or protocol version, naming both sides;
    None when both match. A worker that sends no version (an old worker, before issue #38) is
    refused too: nothing says it speaks this protocol."""
    if worker_version == own_version and worker_protocol == own_protocol:
        return None
    theirs = f"costscale {worker_version} (protocol {worker_protocol})" if worker_version else \
        "no version (a worker older than costscale's version check)"
    return (f"version mismatch: worker runs {theirs}, dispatcher runs costscale {own_version} "
            f"(protocol {own_protocol}); install costscale=={own_version} on the worker")


__all__ = ["DISTRIBUTION", "PROTOCOL_VERSION", "UNKNOWN", "costscale_version", "version_mismatch"]
