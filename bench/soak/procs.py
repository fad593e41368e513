"""The soak's processes: moto EC2 in server mode and the real daemon (``costscale run --local-workers``,
its wall clock sped up by :mod:`bench.soak.wallclock`) as subprocesses on 127.0.0.1, their config,
and what ``/proc`` says about a process (RSS, threads, open files, CPU, children)."""
from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import yaml

ROOT = Path(__file__).resolve().parents[2]
#: the Kairos §7 types the demo runs (daemon.demos.demo_config), each with a cap
TYPES = {"g4dn.xlarge": 3, "c5n.2xlarge": 3, "r5n.large": 4, "t3.xlarge": 3}
CLK_TCK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(cond: Callable[[], Any], timeout: float, what: str, proc: subprocess.Popen[bytes] | None = None,
             log: Path | None = None) -> Any:
    """``cond()``'s first truthy value, polled (a hang guard, not a measurement); RuntimeError naming
    ``what`` when ``timeout`` passes or ``proc`` exits first."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = cond()
        if got:
            return got
        if proc is not None and proc.poll() is not None:
            tail = log.read_text()[-3000:] if log is not None and log.exists() else ""
            raise RuntimeError(f"{what}: the process exited ({proc.returncode}) first\n{tail}")
        time.sleep(0.1)
    raise RuntimeError(f"{what}: not within {timeout:g} s")


def soak_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN")}
    env.update(AWS_ACCESS_KEY_ID="costscale-soak", AWS_SECRET_ACCESS_KEY="costscale-soak", AWS_DEFAULT_REGION="us-east-1",
               PYTHONPATH=str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else ""),
               PYTHONUNBUFFERED="1")
    return env


def start_moto(log: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    with log.open("wb") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                stdout=fh, stderr=subprocess.STDOUT, env=soak_env(), cwd=ROOT)
    endpoint = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            return False
    wait_for(up, 60, "moto server", proc, log)
    return proc, endpoint


def daemon_config(path: Path, spec: Any, cluster: str, endpoint: str, ami: str, budget: float,
                  pinned: dict[str, int] | None = None) -> None:
    """The soak daemon's config at ``path`` (0600): the demo's model and types, compressed intervals,
    the store pruned and the audit log rotated by the bounds ``spec`` names; ``pinned``: a pinned pool."""
    cfg = {
        "cluster": cluster, "region": "us-east-1", "budget_per_hour": budget, "objective": "min_cost", "headroom": 0.5,
        "models": [{"name": "rm2", "onnx": "builtin:mlp", "qos_ms": 350.0, "max_batch": 1000, "profile": "rm2"}],
        "instance_types": [{"type": t, "max": n} for t, n in TYPES.items()],
        "launch": {"ami_id": ami, "tags": {"purpose": "costscale-soak"}},
        "dispatcher": {"listen": "127.0.0.1:0", "policy": "kairos", "on_deadline": "drop"},
        "metrics": {"listen": "127.0.0.1:0"},
        "intervals": {"fleet_s": spec.fleet_s, "model_s": spec.model_s, "reconcile_s": spec.reconcile_s},
        "workload": {"batch_dist": "deeprecsys", "expected_qps": spec.rate},
        "state_path": str(path.parent / "state.db"),
        "state_retention": {"days": spec.retention_days, "every_s": spec.prune_every_s, "max_rows": spec.prune_max_rows},
        "forecast": {"retention_days": spec.demand_days},
        "audit_log": {"path": str(path.parent / "audit" / "audit.log"), "max_bytes": spec.audit_max_bytes,
                      "backups": spec.audit_backups},
        "on_shutdown": "terminate",
        "aws": {"endpoint_url": endpoint},
    }
    if pinned:
        cfg["pinned_pool"] = dict(pinned)
    if spec.scale_in_s is not None:
        cfg["intervals"]["scale_in_s"] = spec.scale_in_s
    scaling = {"generate_variants": spec.generate_variants}
    if spec.park_s is not None:
        scaling["vm_park_s"] = spec.park_s
    cfg["model_scaling"] = scaling
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        yaml.safe_dump(cfg, fh, sort_keys=False)


def start_daemon(cfg: Path, speed: float, log: Path) -> tuple[subprocess.Popen[bytes], int, int]:
    """``costscale run CFG --local-workers`` with its wall clock ``speed`` x; (process, gRPC port, metrics port)."""
    with log.open("wb") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "bench.soak.wallclock", repr(speed), "run", str(cfg),
                                 "--local-workers"], stdout=fh, stderr=subprocess.STDOUT, env=soak_env(), cwd=ROOT)

    def ports() -> tuple[int, int] | None:
        text = log.read_text(errors="replace")
        grpc_port = re.search(r"dispatcher listening on port (\d+)", text)
        metrics_port = re.search(r"metrics on http://[^:]+:(\d+)/metrics", text)
        return (int(grpc_port.group(1)), int(metrics_port.group(1))) if grpc_port and metrics_port else None
    g, m = wait_for(ports, 120, "the daemon's ports", proc, log)
    return proc, g, m


def stop(proc: subprocess.Popen[bytes], timeout: float = 60.0) -> int:
    """SIGTERM, then the exit status (SIGKILL after ``timeout``: -9)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return int(proc.returncode)


# ---- /proc ---------------------------------------------------------------------------------------

def proc_sample(pid: int) -> dict[str, float]:
    """RSS (MiB), threads (and how many of each name), open fds and CPU seconds (user + system) of ``pid``."""
    status = Path(f"/proc/{pid}/status").read_text()
    rss_kb = int(re.search(r"VmRSS:\s+(\d+)", status).group(1))   # type: ignore[union-attr]
    threads = int(re.search(r"Threads:\s+(\d+)", status).group(1))   # type: ignore[union-attr]
    stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(stat[11]) + int(stat[12])) / CLK_TCK
    names: dict[str, int] = {}
    for task in os.listdir(f"/proc/{pid}/task"):   # which threads: Python's, gRPC's event engine, ...
        try:
            name = Path(f"/proc/{pid}/task/{task}/comm").read_text().strip()
        except OSError:
            continue
        names[name] = names.get(name, 0) + 1
    return {"rss_mib": rss_kb / 1024.0, "threads": threads, "fds": len(os.listdir(f"/proc/{pid}/fd")), "cpu_s": cpu,
            "thread_names": names}


def children(pid: int) -> dict[int, str]:
    """``pid``'s child processes: pid -> state letter (``Z``: a zombie not reaped)."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(stat[1]) == pid:
            out[int(d)] = stat[0]
    return out


def cpu_s(pid: int) -> float:
    """CPU seconds of ``pid`` and of its children it waited for."""
    stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(x) for x in stat[11:15]) / CLK_TCK


__all__ = ["ROOT", "TYPES", "children", "cpu_s", "daemon_config", "free_port", "proc_sample", "soak_env",
           "start_daemon", "start_moto", "stop", "wait_for"]
