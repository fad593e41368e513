"""``pipelines[]`` in the config (issue #26, Loki): a rooted tree of tasks, each naming a configured
model (a model entry with a ``family`` gives the task its variants), under one end-to-end SLO.

```yaml
pipelines:
  - name: traffic            # the application name queries give (Submit, OIP)
    slo_ms: 400              # end to end
    min_accuracy: 0.6        # end to end, per query (0: no floor)
    tasks:
      - name: detect
        model: yolo
        children:
          - task: classify
            factor: 4        # requests to classify per detect request (the prior; measured live)
      - name: classify
        model: carnet
```

The root is the task no other names as a child (or ``root:``). Errors name the field and its line:
a cycle, a task with two parents, an unknown child, an unknown model, a missing root
(:func:`config.sections.pipeline_graph.build` decides; :func:`check_models` checks the models).
"""
from __future__ import annotations

from typing import Annotated, Iterable, Literal

from pydantic import Field, model_validator

from config.fields import Name, Strict
from config.sections.pipeline_graph import Pipeline, PipelineError, build


class PipelineChild(Strict):
    task: Name
    factor: Annotated[float, Field(gt=0, le=1e6)] = Field(
        1.0, description="requests this child gets per request of its parent (Loki's multiplicative factor; "
                         "the prior, measured at run time)")


class PipelineTask(Strict):
    name: Name
    model: Name | None = Field(None, description="a model in models[] (with a family, its variants serve the task)")
    application: Name | None = Field(
        None, description="or an application registered with the daemon (costscale models register, a registered "
                          "family): its variants serve the task, chosen as for any query of it; not replayed")
    children: list[PipelineChild] = []

    @model_validator(mode="after")
    def _one(self) -> "PipelineTask":
        if (self.model is None) == (self.application is None):
            raise ValueError("give model or application (one of them)")
        return self

    @property
    def serves(self) -> str:
        """The name its steps are asked by: the model's, or the application's."""
        return self.model or self.application or ""


class PipelineSpec(Strict):
    name: Name = Field(..., description="the application name of the pipeline's queries")
    slo_ms: Annotated[float, Field(gt=0)] = Field(..., description="end-to-end latency SLO in ms")
    min_accuracy: Annotated[float, Field(ge=0, le=1)] = Field(
        0.0, description="the least end-to-end accuracy a query may be served at (product along its path)")
    root: Name | None = Field(None, description="the root task (default: the one task no other names as a child)")
    tasks: Annotated[list[PipelineTask], Field(min_length=1)]
    scaling: Literal["loki", "per_task"] = Field(
        "loki", description="loki: the model loop plans the tasks' workers together (Loki's two steps: moves workers "
                            "between tasks, then trades end-to-end accuracy when they run out); per_task: each task's "
                            "model is scaled on its own (INFaaS, or accuracy_scaling when on)")

    @model_validator(mode="after")
    def _tree(self) -> "PipelineSpec":
        try:
            self.graph()
        except PipelineError as exc:
            raise ValueError(str(exc)) from None     # "tasks[1].children[0].task: ..." (parse_config_text finds its line)
        first: dict[str, str] = {}
        for i, t in enumerate(self.tasks):
            if self.scaling == "loki" and t.application is not None:
                raise ValueError(f"tasks[{i}].application: scaling: loki plans the tasks' workers together, which needs "
                                 "every task to name a configured model; give this pipeline scaling: per_task")
            if self.scaling == "loki" and t.model in first:
                raise ValueError(f"tasks[{i}].model: tasks {first[t.model]!r} and {t.name!r} serve model {t.model!r}: "
                                 "scaling: loki gives each task its model's workers; give this pipeline scaling: per_task")
            if t.model is not None:
                first.setdefault(t.model, t.name)
        return self

    def graph(self) -> Pipeline:
        return build(self.name, [(t.name, t.serves, [(c.task, c.factor) for c in t.children]) for t in self.tasks],
                     self.slo_ms, root=self.root, min_accuracy=self.min_accuracy, where="")


def check_models(pipelines: Iterable[PipelineSpec], models: Iterable[str]) -> None:
    """ValueError naming the field: a task whose model is not configured, a pipeline named twice or
    named as a model (both are application names a query gives)."""
    known = set(models)
    seen: set[str] = set()
    for i, p in enumerate(pipelines):
        if p.name in known:
            raise ValueError(f"pipelines[{i}].name: {p.name!r} is also a model's name; a query names one or the other")
        if p.name in seen:
            raise ValueError(f"pipelines[{i}].name: pipeline {p.name!r} is named twice")
        seen.add(p.name)
        for j, t in enumerate(p.tasks):
            if t.model is not None and t.model not in known:
                raise ValueError(f"pipelines[{i}].tasks[{j}].model: unknown model {t.model!r} "
                                 f"(models: {', '.join(sorted(known))})")


__all__ = ["PipelineChild", "PipelineSpec", "PipelineTask", "check_models"]
