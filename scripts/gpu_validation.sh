#!/usr/bin/env bash
# One round of GPU validation on a machine with an NVIDIA GPU: install kopt (offline, no build
# isolation), run the gpu-marked tests, and bench the bundled examples. Logs go to $1 (default ./gpu_out).
# docs/validation.md records what a round showed on the H200.
set -uo pipefail
out=${1:-./gpu_out}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
if [ -d .whl ]; then  # wheels the GPU image lacks (cattrs), carried beside the tree
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
python3 -m pip install -q --no-deps --no-build-isolation -e kopt_core -e kopt_cuda -e kopt_triton -e kopt_cutlass \
  -e examples/kopt_example_backend 2>&1 | tail -3
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$out/gpu.txt"
python3 -m pytest -m gpu tests/gpu -v -rA 2>&1 | tee "$out/pytest_gpu.log"
for case in "vector_scale --N=67108864" "sgemm_naive --M=2048 --N=2048 --K=2048" "reduce_sum --N=16777216"; do
  set -- $case
  kopt bench "examples/cuda/$1/kernel.cu" --ref "examples/cuda/$1/ref.py" "${@:2}" --out "$out/bench_$1.json" \
    2>&1 | tee "$out/bench_$1.txt"
done
