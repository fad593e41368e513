"""Write BENCHMARKS.md's "Variant families" section from the shipped family CSVs
(``config/families``, made by ``python -m variants.families``) and, when given, the CSVs
``bench/variants/gpu_profile.py`` wrote on a GPU machine (``--gpu DIR``).

    .venv/bin/python bench/variants/families_report.py [--gpu DIR]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench._report import machine, write_section  # noqa: E402
from variants.families import FAMILY_NAMES, spec  # noqa: E402
from variants.families import resnet as rn  # noqa: E402
from variants.families.profiles import accuracies, latency_table, read_csv, shipped_csv, spread  # noqa: E402

EMULATED = "g4dn.xlarge"


def _members(family: str) -> dict[str, tuple[int, int]]:
    """member -> (parameters, MACs per input): ResNets from the architecture, digits from the graphs."""
    if family == "resnet":
        return {a.name: rn.architecture_counts(a) for a in rn.ARCHS}
    import tempfile

    from variants.families import digits

    with tempfile.TemporaryDirectory() as tmp:
        return {m.name: (m.params, m.macs) for m in digits.build(Path(tmp))}


def family_section(family: str, gpu: Path | None) -> list[str]:
    s = spec(family)
    local = read_csv(shipped_csv(family, "local"))
    derived = read_csv(shipped_csv(family))
    acc = accuracies(local)
    lat, emu = latency_table(local, "local"), latency_table(derived, EMULATED)
    gpu_rows = read_csv(gpu / f"{family}.h100.csv") if gpu and (gpu / f"{family}.h100.csv").exists() else []
    glat = latency_table(gpu_rows, "h100")
    costs = _members(family)
    b_lo, b_hi = s.batch_sizes[0], s.batch_sizes[-1]
    out = [f"### {family}", "", f"Accuracy: {s.accuracy_source}.", "",
           f"| member | top-1 % | parameters | MACs / input | local b{b_lo} ms | local b{b_hi} ms | "
           f"{EMULATED} (emulated) b{b_lo} ms | {EMULATED} (emulated) b{b_hi} ms |"
           + (f" H100 CUDA b{b_lo} ms | H100 CUDA b{b_hi} ms |" if glat else ""),
           "|---|---:|---:|---:|---:|---:|---:|---:|" + ("---:|---:|" if glat else "")]
    for v in sorted(acc, key=lambda v: acc[v]):
        p, m = costs[v]
        row = (f"| {v} | {100 * acc[v]:.2f} | {p:,} | {m:,} | {lat[v][b_lo]:.3f} | {lat[v][b_hi]:.3f} | "
               f"{emu[v][b_lo]:.3f} | {emu[v][b_hi]:.3f} |")
        if glat:
            row += f" {glat[v].get(b_lo, float('nan')):.3f} | {glat[v].get(b_hi, float('nan')):.3f} |"
        out.append(row)
    out += ["", "Trade-off on this machine (local), per batch: the fastest member, the most accurate, how much "
            "slower and how many top-1 points better the most accurate is:", "",
            "| batch | fastest | most accurate | latency ratio | accuracy points |", "|---:|---|---|---:|---:|"]
    for b, (fast, best, ratio, points) in spread(local, "local").items():
        out.append(f"| {b} | {fast} | {best} | {ratio:.1f}x | +{points:.2f} |")
    worst = min((r, t, b) for t in sorted({r.instance_type for r in derived})
                for b, (_, _, r, _) in spread(derived, t).items())
    out += ["", f"On the derived types the smallest ratio is {worst[0]:.1f}x ({worst[1]}, batch {worst[2]}); "
            "tests/variants/test_families.py checks >= 3x and >= 5 points at every batch of every type.", ""]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", type=Path, default=None, help="folder of bench/variants/gpu_profile.py's CSVs (type h100)")
    a = ap.parse_args(argv)
    lines = ["## Variant families: measured accuracy and latency (issue 13, deliverable 1)", "",
             f"Machine: {machine()}. Commands: `.venv/bin/python -m variants.families --repeats 7` (builds, "
             "profiles, writes config/families/*.csv), then `.venv/bin/python bench/variants/families_report.py`.",
             "Latency: median of 7 timed ONNX Runtime 1.31.1 runs (CPU provider, its default threads) after one "
             "warm-up, fp32, input made on the host and output returned to it, as `variants.profiler` times a "
             "variant. The machine is shared with other test runs: single points are noisy (a local row can dip "
             "at a larger batch); the derived rows are made non-decreasing in the batch as "
             "`costscale profile --local` does.",
             f"`{EMULATED} (emulated)`: the local latency times the type's emulation factor (`config.emulation`, "
             "the factors the worker pads with), NOT a GPU measurement. Those factors come from the Kairos "
             "recommendation models, on which a T4 is barely faster than a CPU (factor 1.37 at batch 1, 1.0 at "
             "batch 64); for CNNs a GPU is commonly an order of magnitude or more faster than two CPU cores (not "
             "measured here), so the emulated GPU rows of the resnet family likely understate a GPU by about that "
             "much. Inferentia types have no "
             "factor (no reference profile), so no rows.", ""]
    for family in FAMILY_NAMES:
        lines += family_section(family, a.gpu)
    lines += ["### GPU", "",
              "Not measured: this session's device tool answered \"no device machine is lent in this task\" at its "
              "first call (no device time spent). What is ready for a session that has one:",
              "",
              "- `onnxruntime-gpu==1.31.1` (PyPI, cp312 manylinux_2_28) is the CUDA 13 build: its "
              "`libonnxruntime_providers_cuda.so` needs libcublas.so.13, libcublasLt.so.13, libcudart.so.13 and "
              "libcurand.so.10, which the device image's PyTorch cu130 pip packages should provide (KINDS.md lists "
              "nvidia-cublas, nvidia-cuda-runtime, nvidia-curand, nvidia-cudnn-cu13; not checked on a machine). The wheel is 255.6 MB "
              "(284 MB provider library unpacked), over the 64 MiB a call carries: `zstd -19 --long=27` of the "
              "unpacked wheel is 204.6 MB, `split -b 49M` makes 4 chunks, one carried per call into /tmp/ortparts "
              "while the machine stays warm (30 s between calls), the zstd binary and liblz4 with the first.",
              "- `bench/variants/gpu_profile.sh --digits-dir DIR --builtin --torch` then reassembles, installs to /tmp/site, "
              "puts the nvidia/*/lib folders on LD_LIBRARY_PATH, checks that a session is granted "
              "CUDAExecutionProvider, and runs `bench/variants/gpu_profile.py`: each family member and the builtin MLP's "
              "generated variants per batch size on CUDA (ResNets to batch 64), and the same ResNets in PyTorch "
              "as a cross-check; `bench/variants/families_report.py --gpu DIR` adds the H100 columns here.",
              "- `bench/variants/gpu_profile.py` has run here with `--providers CPUExecutionProvider` only; its CUDA and "
              "PyTorch paths have not run. The digits SVM is an `ai.onnx.ml` SVMClassifier, which the CUDA provider "
              "does not implement: ONNX Runtime would place it on the CPU."]
    write_section("families", "\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
