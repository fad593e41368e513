"""How far ahead to forecast: the lead of a type about to be launched (issue #39 deliverable 2; pure).

``lead_s(type) = boot delay of the type + one fleet tick``: a launch decided at a tick serves once
the instance has booted and its worker answers, and the tick that decides it comes up to one
interval after the demand moved. The boot delay is **measured**, per type: the time from launch
(pending) to the worker's first answer, an exponentially weighted mean over the cluster's own
launches (:class:`BootDelays`, weight :data:`EWMA_ALPHA` on the newest). Until a type has been
measured, the config's ``forecast.boot_delay_s`` stands for it (by type, else by hardware class,
else :data:`DEFAULT_BOOT_S`: the replay's 90 s GPU / 60 s CPU, ``sim.replay.run.DEFAULT_BOOT_S``).

AWS EC2 predictive scaling launches ahead by a fixed buffer (300 s by default, "SchedulingBufferTime"
in https://docs.aws.amazon.com/autoscaling/ec2/userguide/ec2-auto-scaling-predictive-scaling.html);
here the buffer is learned per type, because a GPU type with a Deep Learning AMI and a worker
installing itself boots for minutes, a small CPU type in one.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping

#: the weight of the newest launch in a type's boot-delay mean
EWMA_ALPHA = 0.3
#: launch-to-serving by hardware class before a type was measured or configured (the replay's)
DEFAULT_BOOT_S: dict[str, float] = {"gpu": 90.0, "inferentia": 90.0, "cpu": 60.0}
#: a measurement outside (0, this] is not a boot (a clock jump, an instance adopted long after launch)
MAX_BOOT_S = 3 * 3600.0


@dataclass(frozen=True)
class BootDelays:
    """Each type's measured boot delay (EWMA, s) and how many launches it rests on."""

    mean_s: Mapping[str, float] = field(default_factory=dict)
    launches: Mapping[str, int] = field(default_factory=dict)

    def observe(self, instance_type: str, boot_s: float) -> "BootDelays":
        """With one more launch of ``instance_type`` that took ``boot_s`` from pending to first answer
        (a value that is not a boot is ignored: the same state back)."""
        if not (math.isfinite(boot_s) and 0 < boot_s <= MAX_BOOT_S):
            return self
        old = self.mean_s.get(instance_type)
        new = boot_s if old is None else EWMA_ALPHA * boot_s + (1 - EWMA_ALPHA) * old
        return BootDelays({**self.mean_s, instance_type: new},
                          {**self.launches, instance_type: self.launches.get(instance_type, 0) + 1})

    def boot_s(self, instance_type: str, configured_s: float) -> float:
        """The measured delay of ``instance_type``, else ``configured_s``."""
        return float(self.mean_s.get(instance_type, configured_s))


def configured_boot_s(boot_delay_s: Mapping[str, float], instance_type: str, hardware: str) -> float:
    """The config's boot delay for a type: its own entry, else its hardware class's, else the default."""
    return float(boot_delay_s.get(instance_type, boot_delay_s.get(hardware, DEFAULT_BOOT_S.get(hardware, 60.0))))


def lead_s(delays: BootDelays, instance_type: str, configured_s: float, fleet_s: float) -> float:
    """The forecast's lead for a launch of ``instance_type``: its boot delay plus one fleet tick."""
    return delays.boot_s(instance_type, configured_s) + float(fleet_s)


__all__ = ["BootDelays", "DEFAULT_BOOT_S", "EWMA_ALPHA", "MAX_BOOT_S", "configured_boot_s", "lead_s"]
