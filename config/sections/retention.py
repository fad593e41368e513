"""What the daemon keeps, and for how long, so that it can run for months (issue #40):

```yaml
state_retention:
  days: 7                # closed intents, superseded plans, gone instances older than this are forgotten
  every_s: 3600          # how often the daemon prunes the state store
  max_rows: 10000        # rows forgotten per run at most (the next run takes the rest)
audit_log:
  path: /var/log/costscale/audit.log   # audit events as JSON lines, 0600; reopened on SIGHUP (logrotate)
  max_bytes: 0           # > 0: rotated at this size to audit.log.1 .. audit.log.<backups>; 0: logrotate's job
  backups: 5
```

An open intent (planned or sent) is never forgotten: it is what reconciliation repairs after a
crash (:mod:`scaler.fleet.retention`, which also says why a day at least). ``audit_log`` unset: the
audit events go to the daemon's log only (stderr, the journal), as before.
"""
from __future__ import annotations

from typing import Annotated

from pydantic import Field

from config.fields import Strict


class StateRetentionSpec(Strict):
    """How long the state store keeps its closed history (module docstring)."""

    days: Annotated[float, Field(ge=1, le=3650)] = Field(
        7.0, description="closed intents, superseded plans, gone instances and ended cooldowns older than this are "
                         "forgotten (>= 1: EC2 keeps a ClientToken at least 24 h after the instance's termination)")
    every_s: Annotated[float, Field(gt=0, le=86400)] = Field(3600.0, description="how often the daemon prunes")
    max_rows: Annotated[int, Field(ge=1, le=1_000_000)] = Field(
        10_000, description="rows forgotten per run at most; the next run takes the rest")


class AuditLogSpec(Strict):
    """A file of the audit events (module docstring)."""

    path: Annotated[str, Field(min_length=1)] = Field(
        description="the audit events as JSON lines, created 0600, reopened on SIGHUP (logrotate's create)")
    max_bytes: Annotated[int, Field(ge=0)] = Field(
        0, description="> 0: rotated at this size (path.1 .. path.<backups>); 0: never by costscale (logrotate)")
    backups: Annotated[int, Field(ge=1, le=100)] = Field(5, description="rotated copies kept with max_bytes")


__all__ = ["AuditLogSpec", "StateRetentionSpec"]
