#!/usr/bin/env bash
# Run the OpenCL tests and benchmark on a machine with NVIDIA's OpenCL driver.
# Expects numpy, pyopencl, pytest and hypothesis installed and PYTHONPATH=src; run it
# from the repository root.  Logs go to $OUT/ when OUT is set, else to ./opencl-logs/.
set -u
cd "$(dirname "$0")/.."
OUT_DIR="${OUT:-opencl-logs}"
mkdir -p "$OUT_DIR"
PY="${PYTHON:-python3}"
export PYTHONPATH="${PYTHONPATH:-src}"

# NVIDIA's ICD is often installed without its vendors file in containers: add it if missing.
if [ ! -e /etc/OpenCL/vendors/nvidia.icd ] && ldconfig -p 2>/dev/null | grep -q libnvidia-opencl.so.1; then
  mkdir -p /etc/OpenCL/vendors 2>/dev/null && echo libnvidia-opencl.so.1 > /etc/OpenCL/vendors/nvidia.icd 2>/dev/null || true
fi

{
  echo "== $(date -u +%FT%TZ) $(uname -n)"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || echo "nvidia-smi: not found"
  "$PY" -c "import pyopencl as cl; [print(p.name, '|', d.name, '|', d.version) for p in cl.get_platforms() for d in p.get_devices()]"
} 2>&1 | tee "$OUT_DIR/devices.log"

# Prefer the NVIDIA device when there is one, unless TENSORLAYOUT_CL_DEVICE says otherwise.
if [ -z "${TENSORLAYOUT_CL_DEVICE:-}" ] && grep -qi nvidia "$OUT_DIR/devices.log"; then
  export TENSORLAYOUT_CL_DEVICE=NVIDIA
fi
echo "device choice: ${TENSORLAYOUT_CL_DEVICE:-first device}" | tee -a "$OUT_DIR/devices.log"

"$PY" -m pytest tests/test_opencl*.py -q -p no:cacheprovider -o addopts="" 2>&1 | tee "$OUT_DIR/pytest_opencl.log"
test_rc=${PIPESTATUS[0]}
"$PY" benchmarks/bench_opencl.py 2>&1 | tee "$OUT_DIR/bench_opencl.log"
bench_rc=${PIPESTATUS[0]}
# The other transfer path, for comparison (the device's default is the one above).
"$PY" benchmarks/bench_opencl.py --no-conv --path staged 2>&1 | tee "$OUT_DIR/bench_opencl_staged.log"
# Whole networks on images, next to the CPU runtime and onnxruntime (needs torch for the zoo).
"$PY" benchmarks/bench_model_opencl.py --device "${TENSORLAYOUT_CL_DEVICE:-0}" --size 224 --rounds 7 \
    --threads "$(nproc)" --tune --json "$OUT_DIR/model_opencl.json" 2>&1 | tee "$OUT_DIR/model_opencl.log"
echo "pytest exit $test_rc, benchmark exit $bench_rc" | tee "$OUT_DIR/status.log"
[ "$test_rc" = 0 ] && [ "$bench_rc" = 0 ]
