"""The loops' sections of the config: how often each loop runs and the scale-in window
(``intervals``), and the model loop's (``model_scaling``: the INFaaS model and VM autoscalers,
§4.2; ``accuracy_scaling``: Proteus's accuracy planner or SuperServe's SlackFit).
"""
from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from config.fields import Name, Strict


class IntervalsSpec(Strict):
    fleet_s: Annotated[float, Field(gt=0)] = 30.0
    model_s: Annotated[float, Field(gt=0)] = 1.0
    reconcile_s: Annotated[float, Field(gt=0)] = 60.0
    # scale-in stabilization: the fleet plans for the highest demand of this window, so a dip does
    # not retire instances the next minute needs (Kubernetes HPA's default downscale window)
    scale_in_s: Annotated[float, Field(ge=0)] = 300.0


class AccuracyScalingSpec(Strict):
    """Accuracy scaling (Proteus §3-§4): an application with variants of more than one accuracy is
    placed and routed by the accuracy planner instead of the INFaaS model autoscaler, so a spike past
    what the pool serves at full accuracy is served by less accurate variants, never below the
    application's floor, and full accuracy comes back when it ends."""

    enabled: bool = False
    mode: Literal["plan", "slackfit"] = Field(
        "plan", description="plan: the accuracy planner places one variant per worker and routes queries (Proteus); "
                            "slackfit: every variant stays loaded and each dispatch picks the most accurate one that "
                            "serves the waiting queries within the head's slack (SuperServe §4.2, choose_for_queue)")
    replan_s: Annotated[float, Field(gt=0)] = Field(
        30.0, description="plan again this often when demand moved 10 % (a burst plans at once)")
    beta: Annotated[float, Field(ge=1, le=2)] = Field(1.05, description="plan for demand x beta (Proteus's default 1.05)")
    min_accuracy: dict[Name, Annotated[float, Field(ge=0, le=1)]] = Field(
        default_factory=dict, description="application -> the least accuracy its queries may be served at")
    burst_noise_z: Annotated[float, Field(ge=0, le=10)] = Field(
        4.0, description="a burst must lie this many Poisson standard deviations above the planned rate over "
                         "its 1 s window (0: Proteus's test alone); at a few q/s a noisy second is no burst")


class ModelScalingSpec(Strict):
    """The model loop (INFaaS §4.2): which model-autoscaler decides the variant instances, and the
    VM-autoscaler's timing."""

    solver: Literal["greedy", "ilp"] = Field(
        "greedy", description="greedy (INFaaS §4.2.2, sub-millisecond) or ilp (§4.2.1 with PuLP/CBC, optimal)")
    generate_variants: bool = Field(True, description="generate int8/fp16/batch-tuned variants of each model at start")
    vm_add_cooldown_s: Annotated[float, Field(ge=0)] = 30.0
    vm_remove_cooldown_s: Annotated[float, Field(ge=0)] = 120.0
    vm_low_utilization: Annotated[float, Field(gt=0, lt=1)] = 0.40
    accuracy_scaling: AccuracyScalingSpec = AccuracyScalingSpec()
    vm_park_s: Annotated[float, Field(ge=0)] = Field(
        120.0, description="a surplus instance stays parked (warm, no variant loaded, no queries) this long before it "
                           "is terminated; a spike meanwhile loads its variants back instead of launching; 0: terminate at once")


__all__ = ["AccuracyScalingSpec", "IntervalsSpec", "ModelScalingSpec"]
