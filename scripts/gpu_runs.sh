#!/usr/bin/env bash
# The run form on a GPU machine: kopt gate, then init + seed + iter open --iter 1 + select --iter 1 on a
# CUDA naive SGEMM and a Triton softmax. Each run folder (without its .ncu-rep reports) and every
# command's output are copied to $1 (default ./gpu_runs). docs/validation.md records what a round showed.
set -uo pipefail
out=$(realpath -m "${1:-./gpu_runs}")
mkdir -p "$out"
work=$(mktemp -d)
export PYTHONUNBUFFERED=1
step() { local name=$1; shift; echo "== $name: kopt $*" | tee -a "$out/commands.log"
  kopt "$@" >"$out/$name.out" 2>"$out/$name.err"; local rc=$?
  echo "   exit $rc" | tee -a "$out/commands.log"; tail -3 "$out/$name.err"; return $rc; }

run_case() {  # name backend kernel ref dims...
  local name=$1 backend=$2 kernel=$3 ref=$4; shift 4
  mkdir -p "$work/$name" && cp "$kernel" "$work/$name/"
  step "${name}_gate" gate --out "$work/$name/env.json" --backend "$backend" --json || return
  step "${name}_init" init --baseline "$work/$name/$(basename "$kernel")" --ref "$ref" --env "$work/$name/env.json" "$@" \
    || return
  local run; run=$(cat "$out/${name}_init.out")
  step "${name}_seed" seed --state "$run/state.json"
  step "${name}_open" iter open --state "$run/state.json" --iter 1
  step "${name}_select" select --state "$run/state.json" --iter 1
  step "${name}_status" status "$run"
  mkdir -p "$out/$name" && tar -C "$run" --exclude='*.ncu-rep' --exclude='*.so' -cf - . | tar -C "$out/$name" -xf -
}

run_case sgemm_naive cuda examples/cuda/sgemm_naive/kernel.cu examples/cuda/sgemm_naive/ref.py \
  --M=2048 --N=2048 --K=2048
run_case triton_softmax triton examples/triton/softmax/kernel.py examples/triton/softmax/ref.py --M=8192 --N=8192
rm -rf "$work"
