"""Regenerate the family CSVs: ``python -m variants.families [--family digits|resnet|all] [--out DIR]``.

Builds each family's members (digits: trained, exported and measured; resnet: graphs), profiles
them on this machine's CPU with ONNX Runtime, and writes ``<family>.local.csv`` (measured, type
``local``) and ``<family>.csv`` (every type with an emulation factor, derived) to ``--out``
(default: the ``config/families`` folder this package ships). Prints each family's trade-off
(fastest member, most accurate member, latency ratio, accuracy points) per batch size.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from variants.families import FAMILY_NAMES, build_family, spec
from variants.families.profiles import derive, measure, spread, write_csv


def _default_out() -> Path:
    import config.families

    return Path(config.families.__file__).parent


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m variants.families", description=__doc__.splitlines()[0])
    ap.add_argument("--family", choices=(*FAMILY_NAMES, "all"), default="all")
    ap.add_argument("--out", type=Path, default=None, help="where the CSVs go (default: config/families)")
    ap.add_argument("--work", type=Path, default=None, help="where the ONNX files go (default: a temporary folder)")
    ap.add_argument("--repeats", type=int, default=5, help="timed runs per batch size (median kept)")
    ap.add_argument("--image-size", type=int, default=224, help="resnet input resolution (published: 224)")
    ap.add_argument("--threads", type=int, default=None, help="ONNX Runtime intra-op threads (default: its own)")
    a = ap.parse_args(argv)
    out = a.out or _default_out()
    names = FAMILY_NAMES if a.family == "all" else (a.family,)
    with tempfile.TemporaryDirectory(prefix="families-") as tmp:
        work = a.work or Path(tmp)
        for name in names:
            s = spec(name)
            t0 = time.monotonic()
            kw = {"image_size": a.image_size} if name == "resnet" else {}
            members = build_family(name, work / name, **kw)
            print(f"{name}: built {len(members)} members in {time.monotonic() - t0:.1f} s: "
                  + ", ".join(f"{m.name} {100 * m.accuracy:.2f}%" for m in members), flush=True)
            local = measure(members, s.batch_sizes, repeats=a.repeats, threads=a.threads,
                            on_member=lambda n: print(f"  profiling {n}", flush=True))
            write_csv(out / f"{name}.local.csv", local)
            write_csv(out / f"{name}.csv", derive(local))
            for b, (fast, best, ratio, points) in spread(local, "local").items():
                print(f"  batch {b:>3}: fastest {fast}, most accurate {best}: x{ratio:.2f} latency, +{points:.2f} points")
            print(f"{name}: wrote {out / (name + '.local.csv')} and {out / (name + '.csv')} "
                  f"({time.monotonic() - t0:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
