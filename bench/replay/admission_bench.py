"""CPU per model-less query of the live admission (``Admission.validate``, getVariant included):
BENCHMARKS "replay-speed", fourth pass. Run from a tree's root, e.g. two trees side by side:

    PYTHONPATH=. .venv/bin/python bench/replay/admission_bench.py [--calls 20000]

A dispatcher whose registry holds application "vision" (model "other" and one CPU variant), built as
``tests/dispatcher/test_modelless.py`` builds it, with 16 and 32 workers, half hosting each variant,
each with 20 recent calls and a third with a call under way; the query asks ``min_accuracy`` 0 (every
worker hosts a variant that serves it) or 0.95 against a 0.9 variant (half do). Prints µs of CPU per
``validate`` call (``time.process_time``), twice per case."""
from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "dispatcher")]

import test_modelless as tm  # noqa: E402

from dispatcher.proto import costscale_pb2 as pb  # noqa: E402


async def case(workers: int, accuracy: float, min_accuracy: float, calls: int) -> list[float]:
    tmp = Path(tempfile.mkdtemp())
    d, reg = tm._vision(tmp, tm._cfg(tmp), accuracy=accuracy)
    try:
        tm._hosting(d, {f"i-{k}": ({"other"} if k % 2 else {"other-fp32-cpu"}) for k in range(workers)})
        now = d.rt.clock()
        for k, (_, w) in enumerate(sorted(d.admission.registry.workers.items())):
            for j in range(20):
                s = now - 2.5 + j * 0.12 + k * 0.001
                w.busy.append((s, s + 0.05 + 0.001 * (k % 7)))
            if k % 3 == 0:
                w.idle, w.busy_until = False, now + 0.01 * (k % 5)
        req = pb.SubmitRequest(application="vision", batch_size=1, min_accuracy=min_accuracy)
        out = []
        for _ in range(2):
            t0 = time.process_time()
            for _ in range(calls):
                d.admission.validate(req)
            out.append((time.process_time() - t0) / calls * 1e6)
        return out
    finally:
        for w in d.workers.values():
            await w.client.close()
        reg.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=20000, help="validate calls per measurement")
    args = ap.parse_args()
    if args.calls < 1:
        print("admission_bench: --calls must be >= 1", file=sys.stderr)
        return 2
    for workers in (16, 32):
        for accuracy, min_accuracy, what in ((1.0, 0.0, "all workers"), (0.9, 0.95, "half the workers")):
            us = asyncio.run(case(workers, accuracy, min_accuracy, args.calls))
            print(f"{workers} workers, {what} serve the query: " + ", ".join(f"{x:.1f}" for x in us) + " us per query")
    return 0


if __name__ == "__main__":
    sys.exit(main())
