"""What the pipeline planner needs from the config (issue #26): each task's variants with their
accuracies and latencies. Pure: the config and the latency profiles come in.

A task whose model names a family (:mod:`variants.families.applications`) has the family's
variants, each with its accuracy and its latency per type and batch. A task whose model has no
family has one variant, the model itself, at its profile (mean latency at each profiled batch) on
every allowed type it has a profile for, with accuracy 1.0: unscored, so accuracy scaling can only
trade the other tasks' accuracy.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from config.budget import BUDGET_EPS
from config.sections.pipelines import PipelineSpec
from config.profiles import ProfileTable
from config.schema import Config
from variants.accuracy.planner import VariantProfile
from variants.families.applications import application

if TYPE_CHECKING:
    from config.sections.pipeline_graph import Pipeline
    from variants.pipelines.scaling import PipelineWorker


def task_variants(cfg: Config, profiles: ProfileTable, spec: PipelineSpec) -> dict[str, list[VariantProfile]]:
    """Task -> its variants (see the module docstring). ValueError (one line) for a task with no
    latency on any allowed type."""
    allowed = set(cfg.catalog())
    out: dict[str, list[VariantProfile]] = {}
    for task in spec.tasks:
        if task.model is None:
            raise ValueError(f"pipeline {spec.name}: task {task.name!r} names application {task.application!r}, which "
                             "only a running daemon knows: plan it with a model entry (with its family)")
        m = cfg.model(task.model)
        if m.family:
            app = application(m)
            vs = [VariantProfile(m.name, v, acc, {t: dict(app.latency[(v, t)]) for t in app.types(v) if t in allowed})
                  for v, acc in app.variants]
        else:
            lat = {}
            for t in sorted(allowed):
                if profiles.has(m.profile_name, t):
                    p = profiles.get(m.profile_name, t)
                    lat[t] = {int(b): float(ms) for b, ms in zip(p.batch_sizes, p.mean_ms)}
            vs = [VariantProfile(m.name, m.name, 1.0, lat)]
        vs = [v for v in vs if v.latency_ms]
        if not vs:
            raise ValueError(f"pipeline {spec.name}: task {task.name!r} (model {m.name}) has no latency on any "
                             f"allowed type ({', '.join(sorted(allowed))})")
        out[task.name] = vs
    return out


def budget_workers(cfg: Config, pipe: "Pipeline", variants: dict[str, list[VariantProfile]]) -> list["PipelineWorker"]:
    """The workers the budget buys of the cheapest allowed type, dealt over the pipeline's tasks in
    turn, each at its task's most accurate variant (what hardware scaling has to work with)."""
    from variants.pipelines.planner import top_variants
    from variants.pipelines.scaling import PipelineWorker

    prices = cfg.prices()
    t = min(cfg.catalog(), key=lambda x: (prices[x], x))
    tops = top_variants(variants)
    n = int(cfg.budget_per_hour // prices[t] + BUDGET_EPS)
    return [PipelineWorker(f"w{i:03d}", t, pipe.tasks[i % len(pipe.tasks)], tops[pipe.tasks[i % len(pipe.tasks)]])
            for i in range(n)]


__all__ = ["budget_workers", "task_variants"]
