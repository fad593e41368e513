"""What a worker is started with (:class:`WorkerOptions`): the CLI (``costscale worker``) builds one
from flags, the local runner and the tests directly; :mod:`worker.server` runs it."""
from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from config.profiles import LatencyProfile, Stat
from variants.runtime.executor import Hardware
from worker.rejoin import REJOIN_AFTER_S
from dispatcher.auth import TOKEN_REFRESH_S


def default_cache_dir() -> Path:
    return Path(os.environ.get("COSTSCALE_CACHE_DIR") or Path(tempfile.gettempdir()) / f"costscale-{os.getuid()}")


@dataclass
class WorkerOptions:
    """Everything a worker needs; the CLI (``costscale worker``) builds one from flags."""

    instance_id: str
    instance_type: str
    listen: str = "127.0.0.1:0"
    models: dict[str, str] = field(default_factory=lambda: {"mlp": "builtin:mlp"})  # name -> spec
    dispatcher: str | None = None
    token: str = ""
    #: reads the cluster token again (its SSM parameter, ``--token-parameter``): rotation without a restart
    token_fetch: Callable[[], str | None] | None = None
    token_refresh_s: float = TOKEN_REFRESH_S
    advertise: str | None = None            # address given to the dispatcher (default: the bound one)
    providers: list[str] | None = None      # None: auto (CUDA first on GPU types, CPU otherwise)
    emulate_profile: str | None = None      # model name in the profile CSV to pad to
    #: a served model -> the profile CSV's model it is padded to (one whose name is not the CSV's;
    #: several models on one worker each run at their own latency, issue #24)
    model_profiles: dict[str, str] = field(default_factory=dict)
    profiles_path: Path | None = None       # profile CSV (default: the shipped Kairos profiles)
    profile: LatencyProfile | None = None   # explicit padding profile (wins over emulate_profile)
    profile_stat: Stat = "mean"
    hardware: Hardware | None = None        # default: from the instance catalog
    cache_dir: Path = field(default_factory=default_cache_dir)
    threads: int | None = None
    register_attempts: int | None = None    # None: retry until the dispatcher answers
    register_backoff_s: float = 0.5
    rejoin_after_s: float | None = REJOIN_AFTER_S   # register again after this silence (None: never)
    clock: Callable[[], float] = time.monotonic     # when a dispatcher last called (worker.rejoin)
    seed: int = 0
    # TLS (issue #14): this worker's certificate and key (its server side, and its client side
    # towards a dispatcher under mutual TLS); a CA whose clients alone may call it (mutual TLS);
    # the CA of the dispatcher's certificate (registration over TLS)
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_client_ca: str | None = None
    dispatcher_ca: str | None = None
    #: watch IMDS here for spot interruption notices (``worker.spot_watch``; None: no watch)
    imds_endpoint: str | None = None
    spot_poll_s: float = 5.0


__all__ = ["WorkerOptions", "default_cache_dir"]
