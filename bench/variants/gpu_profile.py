"""Profile the variant families (and the builtin model's generated variants) on a GPU with ONNX
Runtime's CUDA execution provider, per batch size; optionally the same ResNets in PyTorch on CUDA
as a cross-check. Writes family CSVs (``model,variant,instance_type,batch_size,latency_ms,accuracy``)
with instance type ``--type`` (default ``h100``) and an ``env.txt`` of what ran.

    python bench/variants/gpu_profile.py --out DIR [--digits-dir DIR] [--repeats 20] [--torch]

The digits members are read from ``--digits-dir`` (built beforehand with
``python -m variants.families``' builders: the GPU machine need not have scikit-learn), the ResNets
are built here. A member that ONNX Runtime does not place on CUDA is reported with the provider it
got. ``bench/variants/gpu_profile.sh`` installs onnxruntime-gpu on a GPU machine and runs this; BENCHMARKS.md
"Variant families" says how. Run here with ``--providers CPUExecutionProvider`` (the GPU paths,
CUDA and ``--torch``, have not run yet: no GPU was lent to the session that wrote this).
"""
from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from variants.families import digits as digits_family  # noqa: E402
from variants.families import resnet  # noqa: E402
from variants.families.family import Member  # noqa: E402
from variants.families.profiles import ProfileRow, write_csv  # noqa: E402

CUDA = "CUDAExecutionProvider"
CPU = "CPUExecutionProvider"
RESNET_BATCHES = (1, 2, 4, 8, 16, 32, 64)
DIGITS_BATCHES = digits_family.SPEC.batch_sizes


def _env(lines: list[str]) -> None:
    import onnxruntime as ort

    lines.append(f"python {platform.python_version()}; onnxruntime {ort.__version__} from {Path(ort.__file__).parent}")
    lines.append(f"available providers: {ort.get_available_providers()}")
    try:
        import torch

        lines.append(f"torch {torch.__version__}, CUDA {torch.version.cuda}, device "
                     f"{torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'none'}")
    except Exception as exc:  # noqa: BLE001 - informative only
        lines.append(f"torch: {exc}")


def digits_members(d: Path) -> list[Member]:
    acc = {}
    for line in (d / "accuracy.txt").read_text().splitlines():
        name, a = line.split()
        acc[name] = float(a)
    return [Member(name, "digits", acc[name], True, 0, 0, d / f"{name}.onnx") for name, _, _ in digits_family.LADDER]


def profile(members: list[Member], batches, providers, itype: str, repeats: int, log: list[str]) -> list[ProfileRow]:
    from variants.profiler import profile_variant

    rows = []
    for m in members:
        t0 = time.monotonic()
        p = profile_variant(m.path, m.name, itype, model=m.family, providers=tuple(providers), batch_sizes=batches,
                            repeats=repeats, warmup=3)
        got = p.provider
        log.append(f"{m.name}: provider {got}, load {p.load_ms:.0f} ms, "
                   + ", ".join(f"b{b.batch_size} {b.p50_ms:.3f}" for b in p.batches) + f" ({time.monotonic() - t0:.1f} s)")
        print(log[-1], flush=True)
        rows += [ProfileRow(m.family, m.name, itype, b.batch_size, round(b.p50_ms, 4), m.accuracy) for b in p.batches]
    return rows


def torch_resnets(batches, repeats: int, itype: str, log: list[str]) -> list[ProfileRow]:
    """The same ResNets (torchvision's definitions, random weights) in PyTorch on CUDA, fp32, eager."""
    import torch
    import torchvision

    rows = []
    torch.backends.cudnn.benchmark = True
    for arch in resnet.ARCHS:
        net = getattr(torchvision.models, arch.name.replace("-", ""))(weights=None).cuda().eval()
        for b in batches:
            x = torch.randn(b, 3, 224, 224)
            with torch.inference_mode():
                for _ in range(3):
                    net(x.cuda()).cpu()
                ts = []
                for _ in range(repeats):
                    torch.cuda.synchronize()
                    t = time.perf_counter()
                    net(x.cuda()).cpu()     # host in, host out, as an ONNX Runtime run
                    ts.append((time.perf_counter() - t) * 1e3)
            rows.append(ProfileRow("resnet", arch.name, itype, b, round(float(np.median(ts)), 4), round(arch.top1 / 100, 5)))
        log.append(f"torch {arch.name}: " + ", ".join(f"b{r.batch_size} {r.latency_ms:.3f}" for r in rows[-len(batches):]))
        print(log[-1], flush=True)
        del net
        torch.cuda.empty_cache()
    return rows


def builtin_variants(out: Path, providers, itype: str, repeats: int, log: list[str]) -> list[ProfileRow]:
    """The worker's builtin MLP and its generated variants (fp32, int8, fp16, batch-tuned)."""
    from variants.runtime.builtin_models import build_mlp
    from variants.generator import generate_variants

    src = build_mlp(out / "mlp.onnx")
    vs = generate_variants(src, "mlp", out / "mlp-variants", hardware=("cpu", "gpu"), tuned_batches=(8,))
    members = [Member(v.name, "mlp", v.accuracy, False, 0, 0, v.path) for v in vs]
    return profile(members, (1, 8, 32, 64), providers, itype, repeats, log)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--digits-dir", type=Path, default=None)
    ap.add_argument("--type", default="h100", help="instance type written in the CSVs")
    ap.add_argument("--providers", default=f"{CUDA},{CPU}")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--resnets", default=",".join(a.name for a in resnet.ARCHS))
    ap.add_argument("--resnet-batches", default=",".join(map(str, RESNET_BATCHES)))
    ap.add_argument("--torch", action="store_true", help="also time the ResNets in PyTorch on CUDA")
    ap.add_argument("--builtin", action="store_true", help="also the builtin MLP's generated variants")
    a = ap.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    providers = a.providers.split(",")
    log: list[str] = []
    _env(log)
    print("\n".join(log), flush=True)
    work = Path(tempfile.mkdtemp(prefix="gpu-profile-"))   # not under --out: only the CSVs go back
    if a.digits_dir is not None:
        rows = profile(digits_members(a.digits_dir), DIGITS_BATCHES, providers, a.type, a.repeats, log)
        write_csv(a.out / f"digits.{a.type}.csv", rows)
    names = tuple(n for n in a.resnets.split(",") if n)
    rbatches = tuple(int(b) for b in a.resnet_batches.split(","))
    if names:
        rows = []
        for name in names:   # one graph at a time: the largest is 240 MB of weights
            members = resnet.build(work, names=(name,))
            rows += profile(members, rbatches, providers, a.type, a.repeats, log)
            members[0].path.unlink()
        write_csv(a.out / f"resnet.{a.type}.csv", rows)
    if a.builtin:
        write_csv(a.out / f"builtin.{a.type}.csv", builtin_variants(work, providers, a.type, a.repeats, log))
    if a.torch:
        write_csv(a.out / f"resnet.{a.type}-torch.csv", torch_resnets(rbatches, a.repeats, f"{a.type}-torch", log))
    (a.out / "env.txt").write_text("\n".join(log) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
