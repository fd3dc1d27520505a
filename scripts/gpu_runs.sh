#!/usr/bin/env bash
# The run form on a GPU machine: kopt gate (once per backend), then init + seed + iter open --iter 1 +
# select --iter 1 on the naive SGEMM, the vector scale, a CUTLASS 2.x GEMM and a Triton softmax. Each run
# folder (without .ncu-rep reports and built libraries) and every command's output go to $1 (default
# ./gpu_runs). docs/validation.md records what a round showed.
set -uo pipefail
out=$(realpath -m "${1:-./gpu_runs}")
mkdir -p "$out"
work=$(mktemp -d)
export PYTHONUNBUFFERED=1
step() { local name=$1; shift; echo "== $name: kopt $*" | tee -a "$out/commands.log"
  kopt "$@" >"$out/$name.out" 2>"$out/$name.err"; local rc=$?
  echo "   exit $rc" | tee -a "$out/commands.log"; tail -3 "$out/$name.err"; return $rc; }

env_for() {  # backend -> the gate's env.json for it, written once
  local env="$work/env_$1.json"
  [ -f "$env" ] || step "gate_$1" gate --out "$env" --backend "$1" --json >/dev/null || return
  echo "$env"
}

run_case() {  # name backend kernel ref dims...
  local name=$1 backend=$2 kernel=$3 ref=$4 env; shift 4
  env=$(env_for "$backend") || return
  mkdir -p "$work/$name" && cp "$kernel" "$work/$name/"
  step "${name}_init" init --baseline "$work/$name/$(basename "$kernel")" --ref "$ref" --env "$env" "$@" || return
  local run; run=$(cat "$out/${name}_init.out")
  step "${name}_seed" seed --state "$run/state.json"
  step "${name}_open" iter open --state "$run/state.json" --iter 1
  step "${name}_select" select --state "$run/state.json" --iter 1
  mkdir -p "$out/$name" && tar -C "$run" --exclude='*.ncu-rep' --exclude='*.so' -cf - . | tar -C "$out/$name" -xf -
}

run_case sgemm_naive cuda examples/cuda/sgemm_naive/kernel.cu examples/cuda/sgemm_naive/ref.py \
  --M=2048 --N=2048 --K=2048
run_case vector_scale cuda examples/cuda/vector_scale/kernel.cu examples/cuda/vector_scale/ref.py --N=67108864
run_case cutlass_sm80 cutlass examples/cutlass/gemm_sm80_tensorop/kernel.cu examples/cutlass/gemm_sm80_tensorop/ref.py \
  --M=4096 --N=4096 --K=4096
run_case triton_softmax triton examples/triton/softmax/kernel.py examples/triton/softmax/ref.py --M=8192 --N=8192
cp "$work"/env_*.json "$out/" 2>/dev/null
rm -rf "$work"
