"""Pipelines (issue #26, Loki): the tree and its validation, the multiplicative factors (Loki §4.2)
worked by hand, and the two-step planner (Loki §4) against hand-computed cases and a brute force."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.optimize import linprog

from variants.accuracy import milp as accuracy_milp
from variants.accuracy.planner import VariantProfile
from config.sections.pipeline_graph import PipelineError, build
from variants.pipelines.planner import plan_pipeline


@pytest.fixture(params=accuracy_milp.SOLVERS)
def solver(request):  # type: ignore[no-untyped-def]
    return request.param


def _chain(factor: float = 2.0, slo: float = 400.0, floor: float = 0.0):  # type: ignore[no-untyped-def]
    return build("traffic", [("det", "yolo", [("cls", factor)]), ("cls", "carnet", [])], slo, min_accuracy=floor)


# ---- the tree -----------------------------------------------------------------------------------

def test_the_tree_its_root_leaves_and_paths() -> None:
    p = build("p", [("a", "m1", [("b", 2.0), ("c", 0.5)]), ("b", "m2", [("d", 3.0)]), ("c", "m3", []), ("d", "m4", [])],
              300.0)
    assert p.root == "a" and p.tasks == ["a", "b", "c", "d"] and p.leaves() == ["c", "d"]
    assert p.path_to("d") == ["a", "b", "d"] and p.parent("a") is None
    assert p.task_demand(10.0) == {"a": 10.0, "b": 20.0, "c": 5.0, "d": 60.0}


@pytest.mark.parametrize("tasks, root, field, words", [
    ([("a", "m", [("b", 1.0)]), ("b", "m", [("a", 1.0)])], None, "pipelines[0].tasks", "cycle"),
    ([("a", "m", [("zz", 1.0)])], None, "pipelines[0].tasks[0].children[0].task", "no task 'zz'"),
    ([("a", "m", []), ("b", "m", [])], None, "pipelines[0].root", "several tasks have no parent"),
    ([("a", "m", [("a", 1.0)])], None, "pipelines[0].tasks[0].children[0].task", "names itself"),
    ([("a", "m", [("c", 1.0)]), ("b", "m", [("c", 1.0)]), ("c", "m", [])], "a",
     "pipelines[0].tasks[1].children[0].task", "two parents"),
    ([("a", "m", [("b", 0.0)]), ("b", "m", [])], None, "pipelines[0].tasks[0].children[0].factor", "> 0"),
    ([("a", "m", [("b", 1.0)]), ("b", "m", [])], "b", "pipelines[0].root", "has a parent"),
    ([("a", "m", [("b", 1.0)]), ("b", "m", []), ("a", "m", [])], None, "pipelines[0].tasks[2].name", "named twice"),
    ([("a", "m", []), ("b", "m", [("c", 1.0)]), ("c", "m", [("b", 1.0)])], "a", "pipelines[0].tasks[1]",
     "not reached from the root"),
])
def test_a_bad_tree_is_one_error_naming_the_field(tasks, root, field, words) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(PipelineError) as exc:
        build("p", tasks, 100.0, root=root)
    assert exc.value.field == field and words in str(exc.value)


def test_the_multiplicative_factor_example_of_loki_4_2_by_hand() -> None:
    """Loki §4.1-4.2: a detector that finds 10 cars in an image sends 10 requests to the car
    classifier; a less accurate detector (YOLOv5n against YOLOv5x) finds fewer, say 6. At 10 images
    per second the classifier gets 100 requests per second behind YOLOv5x, 60 behind YOLOv5n, and
    80 when the images are split evenly between the two."""
    p = _chain(factor=10.0)
    p = type(p)(**{**p.__dict__, "factors": {("yolov5n", "cls"): 6.0}})
    assert p.task_demand(10.0) == {"det": 10.0, "cls": 100.0}
    assert p.task_demand(10.0, {"det": "yolov5x"}) == {"det": 10.0, "cls": 100.0}
    assert p.task_demand(10.0, {"det": "yolov5n"}) == {"det": 10.0, "cls": 60.0}
    # Eq. 1-2 over the augmented graph: c = 1/2 along each detector variant
    routes = {(("det", "yolov5x"), ("cls", "c")): 0.5, (("det", "yolov5n"), ("cls", "c")): 0.5}
    assert sum(10.0 * f * p.multiplier(pre) for pre, f in routes.items()) == pytest.approx(80.0)


# ---- the planner, by hand -------------------------------------------------------------------------

# one type "cpu"; SLO 400 ms -> every task path within 200 ms
DET = [VariantProfile("yolo", "det-x", 0.90, {"cpu": {1: 100.0, 2: 180.0}}),     # 10 q/s (b1), 11.1 (b2)
       VariantProfile("yolo", "det-n", 0.80, {"cpu": {1: 25.0, 4: 80.0}})]       # 40 q/s (b1), 50 (b4)
CLS = [VariantProfile("carnet", "cls-l", 0.95, {"cpu": {1: 50.0, 4: 100.0}}),    # 20 q/s (b1), 40 (b4)
       VariantProfile("carnet", "cls-s", 0.85, {"cpu": {1: 10.0, 8: 40.0}})]     # 100 q/s (b1), 200 (b8)
VARIANTS = {"det": DET, "cls": CLS}


def test_hardware_scaling_first_the_fewest_workers_at_the_top_variants(solver) -> None:  # type: ignore[no-untyped-def]
    # 10 images/s, 2 cars each: det-x at batch 1 (10 q/s, 100 ms) and cls-l at batch 1 (20 q/s,
    # 50 ms; batch 4 carries it too, in 100 ms: the smaller budget wins): one worker each
    plan = plan_pipeline(_chain(2.0), VARIANTS, {"cpu": 4}, 10.0, solver=solver)
    assert plan.step == "hardware" and plan.status == "optimal"
    assert plan.workers == {("det", "det-x", "cpu", 1): 1, ("cls", "cls-l", "cpu", 1): 1}
    assert plan.served == pytest.approx(1.0) and plan.accuracy == pytest.approx(0.90 * 0.95)
    assert plan.budgets_ms == {"det": 100.0, "cls": 50.0}
    assert plan.task_qps == {"det": pytest.approx(10.0), "cls": pytest.approx(20.0)}
    # 30 images/s: det-x needs 3 workers (batch 2 at 180 ms leaves cls 20 ms: cls-l cannot), cls-l
    # 60 q/s at batch 4 needs 2: 5 workers
    plan = plan_pipeline(_chain(2.0), VARIANTS, {"cpu": 5}, 30.0, solver=solver)
    assert plan.step == "hardware" and plan.total_workers == 5


def test_accuracy_scaling_when_the_workers_run_out(solver) -> None:  # type: ignore[no-untyped-def]
    # 30 images/s on 4 workers: at the top variants it needs 5. By hand: every car request can go to
    # cls-l if two cls-l workers carry 60 q/s (batch 1: 20 q/s in 50 ms, batch 4: 40 q/s in 100 ms),
    # leaving two detectors for 30 images: det-x (10 images) and det-n at batch 1 (25 ms; 20 of its
    # 40): accuracy 1/3 x 0.90 x 0.95 + 2/3 x 0.80 x 0.95 = 0.7917 (3 det-x + 1 cls-s: 0.765;
    # 1 det-n + 2 cls-l: 0.76). The budgets: det 100 ms, cls 100 ms, 200 = SLO/2
    plan = plan_pipeline(_chain(2.0), VARIANTS, {"cpu": 4}, 30.0, solver=solver)
    assert plan.step == "accuracy" and plan.served == pytest.approx(1.0)
    assert plan.accuracy == pytest.approx(0.95 * (0.90 + 2 * 0.80) / 3)
    per_variant: dict = {}
    for (task, v, _, _), n in plan.workers.items():
        per_variant[(task, v)] = per_variant.get((task, v), 0) + n
    assert per_variant == {("det", "det-x"): 1, ("det", "det-n"): 1, ("cls", "cls-l"): 2}
    assert plan.budgets_ms == {"det": 100.0, "cls": 100.0}    # (cls-l at batch 1 or 4: the same budget)
    assert plan.routing[(("det", "det-n"), ("cls", "cls-l"))] == pytest.approx(2 / 3, abs=1e-5)   # CBC: 6 digits
    # a floor of 0.77 end to end: no path that serves it all is good enough; the plan serves what
    # meets the floor (det-n + cls-l: 0.76 < 0.77 too; det-x + cls-l 0.855 on 4 workers: 3 + 1 carry
    # 20 of the 30 images (cls-l 40 q/s = 20 images))
    plan = plan_pipeline(_chain(2.0, floor=0.77), VARIANTS, {"cpu": 4}, 30.0, solver=solver)
    assert plan.served == pytest.approx(20.0 / 30.0, abs=1e-6) and plan.accuracy == pytest.approx(0.855)


def test_bad_input_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="no variant"):
        plan_pipeline(_chain(), {"det": DET}, {"cpu": 2}, 1.0)
    with pytest.raises(ValueError, match="finite"):
        plan_pipeline(_chain(), VARIANTS, {"cpu": 2}, math.nan)
    with pytest.raises(ValueError, match="no worker"):
        plan_pipeline(_chain(), VARIANTS, {"cpu": 0}, 1.0)


# ---- against a brute force ------------------------------------------------------------------------

def _kinds(pipe, variants, pool):  # type: ignore[no-untyped-def]
    out = []
    for task, vs in variants.items():
        for v in vs:
            for t in pool:
                for b, lat in v.latency_ms.get(t, {}).items():
                    if lat <= pipe.slo_ms / 2:
                        out.append((task, v.variant, t, b, lat, b * 1000.0 / lat, v.accuracy))
    return out


def _route_lp(pipe, variants, placement, qps, floor):  # type: ignore[no-untyped-def]
    """(most served, then most accurate) for a fixed placement: two LPs with scipy (HiGHS), written
    apart from the planner."""
    names = {t: [v.variant for v in vs] for t, vs in variants.items()}
    acc = {(t, v.variant): v.accuracy for t, vs in variants.items() for v in vs}
    pres = list(pipe.prefixes(names))
    ix = {p: i for i, p in enumerate(pres)}
    leaves = pipe.leaves()
    A_ub, b_ub, A_eq, b_eq = [], [], [], []
    for task in pipe.tasks:
        for v in names[task]:
            row = np.zeros(len(pres))
            for p in pres:
                if p[-1] == (task, v):
                    row[ix[p]] = qps * pipe.multiplier(p)
            A_ub.append(row)
            b_ub.append(sum(q for (tk, vv, _, _, _, q, _) in placement if (tk, vv) == (task, v)))
    for p in pres:
        for e in pipe.edges.get(p[-1][0], ()):
            row = np.zeros(len(pres))
            row[ix[p]] = -1.0
            for v in names[e.child]:
                row[ix[p + ((e.child, v),)]] = 1.0
            A_eq.append(row)
            b_eq.append(0.0)
    roots = np.array([1.0 if len(p) == 1 else 0.0 for p in pres])
    A_ub.append(roots)
    b_ub.append(1.0)
    bounds = [(0, 0) if p[-1][0] in leaves and math.prod(acc[x] for x in p) < floor - 1e-12 else (0, 1) for p in pres]
    kw = dict(A_ub=np.array(A_ub), b_ub=b_ub, A_eq=np.array(A_eq) if A_eq else None, b_eq=b_eq or None, bounds=bounds,
              method="highs")
    r1 = linprog(-roots, **kw)
    served = -r1.fun
    e2e = np.array([math.prod(acc[x] for x in p) / len(leaves) if p[-1][0] in leaves else 0.0 for p in pres])
    kw["A_ub"] = np.vstack([kw["A_ub"], -roots])
    kw["b_ub"] = b_ub + [-(served - 1e-7)]
    r2 = linprog(-e2e, **kw)
    return served, -r2.fun


def _brute(pipe, variants, pool, qps):  # type: ignore[no-untyped-def]
    kinds = _kinds(pipe, variants, pool)
    workers = [t for t in sorted(pool) for _ in range(pool[t])]
    best = (-1.0, -1.0)
    for combo in itertools.product(*[[None] + [k for k in kinds if k[2] == t] for t in workers]):
        placed = [k for k in combo if k is not None]
        budgets = {t: max((k[4] for k in placed if k[0] == t), default=0.0) for t in pipe.tasks}
        if any(sum(budgets[t] for t in pipe.path_to(leaf)) > pipe.slo_ms / 2 + 1e-9 for leaf in pipe.leaves()):
            continue
        s, a = _route_lp(pipe, variants, placed, qps, pipe.min_accuracy)
        if (s > best[0] + 1e-7) or (abs(s - best[0]) <= 1e-7 and a > best[1]):
            best = (s, a)
    return best


@st.composite
def _cases(draw):  # type: ignore[no-untyped-def]
    shape = draw(st.sampled_from(["chain", "fork"]))
    f1 = draw(st.sampled_from([0.5, 1.0, 2.0, 3.0]))
    if shape == "chain":
        pipe = build("p", [("a", "ma", [("b", f1)]), ("b", "mb", [])], draw(st.sampled_from([100.0, 200.0, 400.0])),
                     min_accuracy=draw(st.sampled_from([0.0, 0.0, 0.6])))
    else:
        pipe = build("p", [("a", "ma", [("b", f1), ("c", draw(st.sampled_from([0.5, 1.0, 2.0])))]), ("b", "mb", []),
                           ("c", "mc", [])], draw(st.sampled_from([200.0, 400.0])))
    types = ["t0", "t1"][: draw(st.integers(1, 2))]
    variants = {}
    for task in pipe.tasks:
        vs = []
        for k in range(draw(st.integers(1, 2))):
            lat = {}
            for t in types:
                base = float(draw(st.integers(5, 120)))
                lat[t] = {1: base, 4: base * draw(st.sampled_from([2.0, 3.0, 4.0]))}
            vs.append(VariantProfile(task, f"{task}{k}", draw(st.integers(60, 99)) / 100, lat))
        variants[task] = vs
    n = draw(st.integers(2, 3 if shape == "chain" else 3))
    pool = {t: 0 for t in types}
    for _ in range(n):
        pool[draw(st.sampled_from(types))] += 1
    qps = float(draw(st.sampled_from([2.0, 10.0, 30.0, 80.0])))
    return pipe, variants, pool, qps


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_cases())
def test_the_two_steps_equal_a_brute_force_on_small_trees(case) -> None:  # type: ignore[no-untyped-def]
    pipe, variants, pool, qps = case
    if not any(pool.values()):
        return
    served, acc_w = _brute(pipe, variants, pool, qps)
    for solver in accuracy_milp.SOLVERS:        # one brute force, every solver (CBC: CBC_OPTIONS)
        plan = plan_pipeline(pipe, variants, pool, qps, solver=solver, accuracy_gap=0.0)
        assert plan.served == pytest.approx(max(served, 0.0), abs=1e-6), solver
        if plan.served > 1e-9:
            assert plan.accuracy * plan.served == pytest.approx(acc_w, abs=1e-6), solver
    if plan.step == "hardware":
        # step 1: all served at the top variants, with the fewest workers a brute force finds
        tops = {t: max(vs, key=lambda v: (v.accuracy, [-ord(ch) for ch in v.variant])).variant for t, vs in variants.items()}
        only = {t: [v for v in vs if v.variant == tops[t]] for t, vs in variants.items()}
        fewest = min((sum(sub.values()) for sub in _subpools(pool)
                      if _brute(pipe, only, sub, qps)[0] >= 1.0 - 1e-7), default=None)
        assert plan.total_workers == fewest


def _subpools(pool):  # type: ignore[no-untyped-def]
    types = sorted(pool)
    for counts in itertools.product(*[range(pool[t] + 1) for t in types]):
        yield dict(zip(types, counts))


# ---- in the config ----------------------------------------------------------------------------------

_YAML = """cluster: p
budget_per_hour: 3.0
models:
  - name: resnet
    family: resnet
    qos_ms: 1000
  - name: digits
    family: digits
    qos_ms: 1000
instance_types:
  - type: c5n.2xlarge
launch:
  ami_id: ami-0123456789abcdef0
pipelines:
  - name: traffic
    slo_ms: 800
    tasks:
      - name: detect
        model: resnet
        children:
          - task: classify
            factor: 3
      - name: classify
        model: digits
"""


def test_a_pipeline_in_the_config_is_its_tree() -> None:
    from config.schema import parse_config_text

    cfg = parse_config_text(_YAML, "p.yaml")
    p = cfg.pipelines[0].graph()
    assert (p.name, p.root, p.slo_ms, p.leaves()) == ("traffic", "detect", 800.0, ["classify"])
    assert p.task_demand(2.0) == {"detect": 2.0, "classify": 6.0}


@pytest.mark.parametrize("old, new, line", [
    ("model: digits", "model: digitz",
     "p.yaml: line 24: pipelines[0].tasks[1].model: unknown model 'digitz' (models: digits, resnet)"),
    ("task: classify", "task: detect",
     "p.yaml: line 21: pipelines[0].tasks[0].children[0].task: task 'detect' names itself: a pipeline is a tree"),
    ("task: classify", "task: sort",
     "p.yaml: line 21: pipelines[0].tasks[0].children[0].task: no task 'sort' in this pipeline (tasks: detect, classify)"),
    ("      - name: classify", "      - name: detect",
     "p.yaml: line 23: pipelines[0].tasks[1].name: task 'detect' is named twice (first at tasks[0])"),
    ("  - name: traffic", "  - name: digits",
     "p.yaml: line 15: pipelines[0].name: 'digits' is also a model's name; a query names one or the other"),
    ("    slo_ms: 800", "    slo_ms: 800\n    root: classify",
     "p.yaml: line 17: pipelines[0].root: task 'classify' has a parent ('detect'): the root has none"),
])
def test_a_bad_pipeline_is_one_line_naming_field_and_line(old: str, new: str, line: str) -> None:
    from config.errors import ConfigError
    from config.schema import parse_config_text

    with pytest.raises(ConfigError) as exc:
        parse_config_text(_YAML.replace(old, new, 1), "p.yaml")
    assert exc.value.lines[0] == line


# ---- routing (Loki §5.1) and early dropping (Loki §5.2) --------------------------------------------

from variants.pipelines.routing import VariantSlot, most_accurate_first, next_hop, rest_below  # noqa: E402

SLOTS = [VariantSlot("det", "det-x", 0.90, 10.0, 100.0), VariantSlot("det", "det-n", 0.80, 40.0, 25.0),
         VariantSlot("cls", "cls-l", 0.95, 60.0, 50.0), VariantSlot("cls", "cls-s", 0.85, 100.0, 10.0)]


def test_most_accurate_first_by_hand() -> None:
    # 30 images/s: det-x takes its 10, det-n the other 20. det-x's 20 car requests fill cls-l first
    # (20 of its 60), det-n's 40 take cls-l's remaining 40: every car at cls-l
    p = _chain(2.0)
    t = most_accurate_first(p, SLOTS, 30.0)
    assert t.root == (("det-x", pytest.approx(1 / 3)), ("det-n", pytest.approx(2 / 3)))
    assert t.child[("det", "det-x", "cls")] == (("cls-l", 1.0),)
    assert t.child[("det", "det-n", "cls")] == (("cls-l", 1.0),)
    assert t.incoming[("cls", "cls-l")] == pytest.approx(60.0) and t.overflow == {"det": 0.0, "cls": 0.0}
    # 40 images/s: det-n 30; det-x's 20 cars to cls-l, det-n's 60: 40 to cls-l, 20 to cls-s
    t = most_accurate_first(p, SLOTS, 40.0)
    assert t.child[("det", "det-n", "cls")] == (("cls-l", pytest.approx(40 / 60)), ("cls-s", pytest.approx(20 / 60)))
    # 60 images/s: 10 past the detectors' 50, spread over them by capacity (10 x 1/5 to det-x)
    t = most_accurate_first(p, SLOTS, 60.0)
    assert t.overflow["det"] == pytest.approx(10.0)
    assert dict(t.root) == {"det-x": pytest.approx(12 / 60), "det-n": pytest.approx(48 / 60)}


def test_early_drop_fires_exactly_when_the_rest_of_the_slo_cannot_be_met() -> None:
    cls_l, cls_s = SLOTS[2], SLOTS[3]
    # 60 ms left, nothing after cls: cls-l (50 ms) fits -> the table's variant
    assert next_hop(60.0, 0.0, cls_l, [cls_l, cls_s]) == next_hop(50.0, 0.0, cls_l, [cls_l, cls_s])
    assert next_hop(50.0, 0.0, cls_l, [cls_l, cls_s]).variant == "cls-l"
    # 49.99 ms: cls-l no longer fits, cls-s (10 ms) does: rerouted
    hop = next_hop(49.99, 0.0, cls_l, [cls_l, cls_s])
    assert hop.variant == "cls-s" and hop.rerouted and not hop.drop
    # ... unless it has no capacity left: dropped
    assert next_hop(49.99, 0.0, cls_l, [cls_l, cls_s], spare={"cls-s": 0.0}).drop
    # 10 ms: cls-s exactly; 9.99: nothing fits: dropped
    assert next_hop(10.0, 0.0, cls_l, [cls_l, cls_s]).variant == "cls-s"
    assert next_hop(9.99, 0.0, cls_l, [cls_l, cls_s]).drop
    # the tasks below count: 30 ms still needed after cls -> cls-s needs 40 ms left
    assert next_hop(40.0, 30.0, cls_l, [cls_l, cls_s]).variant == "cls-s"
    assert next_hop(39.99, 30.0, cls_l, [cls_l, cls_s]).drop


def test_the_time_still_needed_below_a_task() -> None:
    p = build("p", [("a", "m", [("b", 1.0), ("c", 1.0)]), ("b", "m", [("d", 1.0)]), ("c", "m", []), ("d", "m", [])], 400.0)
    budgets = {"a": 10.0, "b": 20.0, "c": 50.0, "d": 25.0}
    assert rest_below(p, budgets, "a") == 50.0          # max(b + d = 45, c = 50)
    assert rest_below(p, budgets, "b") == 25.0 and rest_below(p, budgets, "d") == 0.0


def test_a_reload_that_changes_the_pipelines_keeps_the_running_ones_and_says_so() -> None:
    from config.schema import parse_config_text
    from config.sections.security import restart_only_changes

    running = parse_config_text(_YAML, "p.yaml")
    new = parse_config_text(_YAML.replace("factor: 3", "factor: 5"), "p.yaml")
    kept, changed = restart_only_changes(running, new)
    assert "pipelines" in changed and kept.pipelines == running.pipelines


# ---- costscale pipeline plan ------------------------------------------------------------------------

def test_the_readme_pipeline_plan_example(capsys) -> None:  # type: ignore[no-untyped-def]
    """README "Pipelines": at 30 q/s on 4 workers, accuracy scaling at 0.7917 (the hand-computed case
    above, from examples/pipeline.yaml); at 10 q/s hardware scaling, two workers, 0.855."""
    import json
    from pathlib import Path

    from daemon.cli import main

    ex = str(Path(__file__).resolve().parents[2] / "examples/pipeline.yaml")
    assert main(["pipeline", "plan", ex, "--demand", "30", "--pool", "c5n.2xlarge=4", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["step"] == "accuracy" and out["served"] == pytest.approx(1.0)
    assert round(out["accuracy"], 4) == 0.7917 and out["budgets_ms"] == {"detect": 100.0, "classify": 100.0}
    per = {}
    for w in out["workers"]:
        per[(w["task"], w["variant"])] = per.get((w["task"], w["variant"]), 0) + w["count"]
    assert per == {("detect", "det-x"): 1, ("detect", "det-n"): 1, ("classify", "cls-l"): 2}
    shares = {tuple(r["path"]): round(r["fraction"], 3) for r in out["routing"] if len(r["path"]) == 2}
    assert shares == {("det-n", "cls-l"): 0.667, ("det-x", "cls-l"): 0.333}
    assert round(out["task_qps"]["classify"], 1) == 60.0
    # README: the budget's 6 workers carry 30 images/s at full accuracy by this (Loki's) rule, on 5
    assert main(["pipeline", "plan", ex, "--demand", "30", "--pool", "c5n.2xlarge=6", "--json"]) == 0
    six = json.loads(capsys.readouterr().out)
    assert six["step"] == "hardware" and round(six["accuracy"], 4) == 0.855
    assert sum(w["count"] for w in six["workers"]) == 5
    assert main(["pipeline", "plan", ex, "--demand", "10", "--pool", "c5n.2xlarge=4"]) == 0
    text = capsys.readouterr().out
    assert "hardware scaling" in text and "end-to-end accuracy 0.8550, 2 workers" in text


@pytest.mark.parametrize("argv, words", [
    (["--demand", "-1", "--pool", "c5n.2xlarge=2"], "--demand must be a number of queries per second >= 0"),
    (["--demand", "nan", "--pool", "c5n.2xlarge=2"], "--demand must be"),
    (["--demand", "5"], "give --pool"),
    (["--demand", "5", "--pool", "m5.large=2"], "unknown instance type 'm5.large'"),
    (["--demand", "5", "--pool", "c5n.2xlarge=2", "--pipeline", "nope"], "no pipeline 'nope'"),
])
def test_pipeline_plan_bad_input_is_one_line_exit_2(capsys, argv, words) -> None:  # type: ignore[no-untyped-def]
    from pathlib import Path

    from daemon.cli import main

    ex = str(Path(__file__).resolve().parents[2] / "examples/pipeline.yaml")
    assert main(["pipeline", "plan", ex, *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0]


def test_models_whose_qos_add_up_past_the_pipeline_slo_are_warned_about() -> None:
    from config.checks import pipeline_qos_warnings
    from config.schema import parse_config_text

    cfg = parse_config_text(_YAML, "p.yaml")           # 1000 + 1000 ms along detect > classify, SLO 800
    assert pipeline_qos_warnings(cfg) == [
        "pipelines: traffic: the models along detect > classify have QoS adding up to 2000 ms, over the pipeline's "
        "800 ms: give each its part of the SLO as its qos_ms (the fleet plans each model for its own)"]
    ok = parse_config_text(_YAML.replace("qos_ms: 1000", "qos_ms: 400"), "p.yaml")
    assert pipeline_qos_warnings(ok) == []


def test_a_task_names_a_model_or_an_application_not_both() -> None:
    from config.errors import ConfigError
    from config.schema import parse_config_text

    per_task = _YAML.replace("    slo_ms: 800\n", "    slo_ms: 800\n    scaling: per_task\n")
    cfg = parse_config_text(per_task.replace("        model: digits", "        application: scanner"), "p.yaml")
    assert cfg.pipelines[0].graph().models == {"detect": "resnet", "classify": "scanner"}
    with pytest.raises(ConfigError) as exc:
        parse_config_text(_YAML.replace("        model: digits", "        model: digits\n        application: x"), "p.yaml")
    assert exc.value.lines[0] == "p.yaml: line 23: pipelines[0].tasks[1]: give model or application (one of them)"


def test_loki_scaling_needs_every_task_to_name_a_model() -> None:
    """``scaling: loki`` (the default) plans the tasks' workers together: a task naming a registered
    application (whose workers only a running daemon knows) is one line naming the field and line."""
    from config.errors import ConfigError
    from config.schema import parse_config_text

    with pytest.raises(ConfigError) as exc:
        parse_config_text(_YAML.replace("        model: digits", "        application: scanner"), "p.yaml")
    assert exc.value.lines[0].startswith("p.yaml: line 24: pipelines[0].tasks[1].application: scaling: loki plans the "
                                         "tasks' workers together")
    assert "give this pipeline scaling: per_task" in exc.value.lines[0]


def test_loki_scaling_needs_a_model_per_task() -> None:
    """Two tasks serving one model cannot each get that model's workers: one line, the second task's
    field and line, and the way out (``scaling: per_task``)."""
    from config.errors import ConfigError
    from config.schema import parse_config_text

    with pytest.raises(ConfigError) as exc:
        parse_config_text(_YAML.replace("        model: digits", "        model: resnet"), "p.yaml")
    assert exc.value.lines[0] == ("p.yaml: line 24: pipelines[0].tasks[1].model: tasks 'detect' and 'classify' serve "
                                  "model 'resnet': scaling: loki gives each task its model's workers; give this "
                                  "pipeline scaling: per_task")
