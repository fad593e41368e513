#!/usr/bin/env bash
# On the GPU machine: install onnxruntime-gpu (CUDA 13 build) from the chunks carried to
# /tmp/ortparts (ort.part.00.. of a zstd tar of the unpacked wheel; see BENCHMARKS.md "Variant
# families" for how they were made and carried), point the loader at the CUDA 13 libraries that
# PyTorch's pip packages put under site-packages/nvidia, check that the CUDA provider loads, then
# run bench/variants/gpu_profile.py with the arguments given. Output: $OUT (or /tmp/gpu-out).
# NOT YET RUN ON A GPU: the session that wrote it was lent none (BENCHMARKS.md "Variant families").
set -uo pipefail
OUTDIR=${OUT:-/tmp/gpu-out}
P=/tmp/ortparts
if [ ! -d /tmp/site/onnxruntime ]; then
  cat "$P"/ort.part.0* > /tmp/ort.tar.zst || exit 1
  sha256sum /tmp/ort.tar.zst
  ZSTD=$(command -v zstd || echo "$P/zstd")
  chmod +x "$P/zstd"; mkdir -p /tmp/lz4 && cp "$P"/liblz4.so.1.* /tmp/lz4/liblz4.so.1
  mkdir -p /tmp/site
  LD_LIBRARY_PATH=/tmp/lz4:${LD_LIBRARY_PATH:-} "$ZSTD" -d --long=27 -c /tmp/ort.tar.zst | tar -x -C /tmp/site || exit 1
  rm -f /tmp/ort.tar.zst
fi
export PYTHONPATH=/tmp/site
NV=$(python3 - <<'EOF'
import os
import nvidia
dirs = set()
for base in nvidia.__path__:
    for root, _, files in os.walk(base):
        if any(f.startswith("lib") and ".so" in f for f in files):
            dirs.add(root)
print(":".join(sorted(dirs)))
EOF
)
export LD_LIBRARY_PATH=$NV:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
python3 - <<'EOF' || exit 3
import onnxruntime as ort
from variants.runtime.builtin_models import mlp_model
print("onnxruntime", ort.__version__, ort.__file__, ort.get_available_providers())
s = ort.InferenceSession(mlp_model(4, 4, 2).SerializeToString(), providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
print("session providers:", s.get_providers())
assert s.get_providers()[0] == "CUDAExecutionProvider", "CUDA provider not granted"
EOF
PYTHONUNBUFFERED=1 python3 bench/variants/gpu_profile.py --out "$OUTDIR" "$@"
