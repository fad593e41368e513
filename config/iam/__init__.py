"""The IAM policy documents costscale ships (issue #38, deliverable 3): which permissions each
part of a deployment needs, derived from the boto3 calls the code makes, one statement per purpose.

* ``control-host.json``: the daemon (and its dispatcher) on the control host: list, launch, tag at
  launch and terminate its cluster's instances, pass the workers' role, the cluster lease in
  DynamoDB, the cluster token in SSM, AWS's public image parameters (``launch`` images given as
  ``ssm_parameter``: ``/aws/service/*``), the vCPU quotas in Service Quotas, the Price List API.
* ``worker.json``: the workers' instance profile: read the cluster token.
* ``worker-s3.json`` (with ``launch.wheelhouse`` or ``s3://`` models): the workers' instance profile reads
  objects of one bucket (the wheelhouse ``costscale bundle`` published, the models it serves).
* ``replicas.json`` (with ``lease.replicas``): the replicas' items in the lease table.
* ``s3-models.json`` (model registration and offline jobs from S3): objects in one bucket.
* ``spot.json`` (with a ``spot`` section): spot prices, and the interruption queue when
  ``spot.interruption_queue`` is set.
* ``doctor.json`` (optional, beside control-host for whoever runs ``costscale doctor``): the
  describe calls the pre-flight makes and the daemon never does, one statement per check (region,
  image, network, offerings, dispatcher) and IAM's policy simulator on the caller (simulate); all
  ``Resource: *``, as EC2's describe calls allow no narrower resource. Not one of the daemon's documents (:data:`DAEMON_DOCUMENTS`).

Each statement's ``Sid`` says what it is for; ``Resource`` ARNs hold placeholders (``{region}``,
``{account}``, ``{cluster}``, ``{table}``, ``{bucket}``, ``{queue}``, ``{worker_role}``) that
:func:`render` fills (``python -m config.iam NAME key=value ...`` prints the filled document).
``tests/cloud/test_iam_policies.py`` proves on moto, with IAM enforced, that these documents allow every
e2e path and that each statement is needed (``tests/cloud/test_iam_doctor.py``: doctor.json and every check); README "IAM policies" is generated from them
(:func:`readme_section`).
"""
from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any, Mapping

HERE = Path(__file__).resolve().parent
#: the documents, in the order the README lists them, and whose role or extra each one is
DOCUMENTS: dict[str, str] = {
    "control-host": "the control host's role (the daemon and its dispatcher)",
    "worker": "the workers' instance profile role",
    "worker-s3": "the workers' instance profile, with `launch.wheelhouse` or `s3://` models (the bootstrap reads them)",
    "replicas": "the control host, with `lease.replicas` (several dispatcher replicas)",
    "s3-models": "the control host, for model registration and offline jobs from S3",
    "spot": "the control host, with a `spot` section (the queue: with `spot.interruption_queue`)",
    "doctor": "optional, beside control-host, for whoever runs `costscale doctor`: the reads the daemon never "
              "makes (each statement's `Sid` names the check it serves)",
}
#: the document ``costscale doctor`` needs beside control-host (none of the daemon's paths calls its actions)
DOCTOR = "doctor"
#: the documents of the daemon's own paths (tests/cloud/test_iam_policies.py proves these; tests/cloud/test_iam_doctor.py doctor's)
DAEMON_DOCUMENTS: tuple[str, ...] = tuple(d for d in DOCUMENTS if d != DOCTOR)
#: the placeholders ARNs may hold, and what fills each
PLACEHOLDERS: dict[str, str] = {
    "region": "the config's `region`",
    "account": "the AWS account id",
    "cluster": "the config's `cluster`",
    "table": "`lease.table` (default costscale-leases)",
    "bucket": "the bucket of the `s3://` URIs callers name (and of `launch.wheelhouse`)",
    "queue": "the queue name at the end of `spot.interruption_queue`",
    "worker_role": "the role of `launch.iam_instance_profile`",
}
_PLACEHOLDER = re.compile(r"\{([a-z_]+)\}")


@cache
def _raw(name: str) -> str:
    if name not in DOCUMENTS:
        raise KeyError(f"no IAM document {name!r} (one of {', '.join(DOCUMENTS)})")
    return (HERE / f"{name}.json").read_text()


def load(name: str) -> dict[str, Any]:
    """The document ``name`` as shipped (placeholders unfilled); a fresh copy each call."""
    return dict(json.loads(_raw(name)))


def statements(name: str) -> list[dict[str, Any]]:
    """The statements of document ``name``."""
    return list(load(name)["Statement"])


def as_list(value: str | list[str]) -> list[str]:
    """An ``Action`` or ``Resource`` element as a list."""
    return [value] if isinstance(value, str) else list(value)


def placeholders(doc: Any) -> set[str]:
    """The placeholders a document (or any part of one) holds."""
    return set(_PLACEHOLDER.findall(json.dumps(doc)))


def render(doc: Any, values: Mapping[str, str]) -> Any:
    """``doc`` with every ``{placeholder}`` in its strings filled from ``values``; KeyError naming
    the placeholders ``values`` lacks."""
    missing = placeholders(doc) - set(values)
    if missing:
        raise KeyError(f"no value for {', '.join(sorted(missing))} (" +
                       "; ".join(f"{m}: {PLACEHOLDERS.get(m, '?')}" for m in sorted(missing)) + ")")

    def fill(v: Any) -> Any:
        if isinstance(v, str):
            return _PLACEHOLDER.sub(lambda m: str(values[m.group(1)]), v)
        if isinstance(v, list):
            return [fill(x) for x in v]
        if isinstance(v, dict):
            return {fill(k): fill(x) for k, x in v.items()}
        return v

    return fill(doc)


def readme_section() -> str:
    """The README's list of the documents and their statements (a test checks the README holds
    exactly this between its ``iam-policies`` markers)."""
    lines = [f"- `config/iam/{name}.json`: {who}" for name, who in DOCUMENTS.items()]
    lines += ["", "| document | statement (`Sid`) | actions | resource |", "|---|---|---|---|"]
    for name in DOCUMENTS:
        for st in statements(name):
            actions = ", ".join(f"`{a}`" for a in as_list(st["Action"]))
            res = as_list(st["Resource"])
            where = ", ".join(f"`{r}`" for r in res[:2]) + (f" (+{len(res) - 2} more)" if len(res) > 2 else "")
            if st.get("Condition"):
                cond = "; ".join(f"`{k}` = `{v}`" for op in st["Condition"].values() for k, v in op.items())
                where += f" where {cond}"
            lines.append(f"| {name} | {st['Sid']} | {actions} | {where} |")
    return "\n".join(lines) + "\n"


__all__ = ["DAEMON_DOCUMENTS", "DOCTOR", "DOCUMENTS", "PLACEHOLDERS", "as_list", "load", "placeholders", "readme_section", "render", "statements"]
