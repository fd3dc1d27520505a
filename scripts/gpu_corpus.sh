#!/usr/bin/env bash
# The cheat-proof timing round on a GPU machine (docs/validation.md records what it showed), one stage per
# call so that each ends inside a 10-minute limit:
#   bash scripts/gpu_corpus.sh medians OUT   honest medians against an older tree (OLD, default .gpu_old,
#                                            made by `git archive <commit> | tar -x -C .gpu_old`)
#   bash scripts/gpu_corpus.sh accuracy OUT  bench/timing_accuracy.py's spreads and agreement with ncu
#   bash scripts/gpu_corpus.sh bench OUT     the corpus through bench and a pairing, every form, and the
#                                            honest controls through all four entry points
#   bash scripts/gpu_corpus.sh explore OUT K/N   the corpus through explore with promotion and a search
#                                            trial, the K-th of N parts of the classes (alone, about
#                                            35 s a class: 1/2 and 2/2 each fit a call)
# Tests whose verdict rests on a time run alone on the GPU: the honest controls, content_memo's repeat
# trap, host_wait_side_stream's race, and explore (its baseline is the honest control, benched). bench's other tests run four at a time:
# their verdicts rest on checks, not on times. Never run two explores at once on one GPU: the honest
# baseline then fails the host-against-events check (docs/validation.md, 2026-12-02, second session).
# Each stage's logs and files end up in OUT/STAGE.tar.gz.
set -uo pipefail
stage=${1:?stage: medians, accuracy, bench or explore}
out=$(realpath -m "${2:-./gpu_out}")
old=${OLD:-.gpu_old}
mkdir -p "$out/$stage"
log="$out/$stage"
export PYTHONUNBUFFERED=1
if [ -d .whl ]; then  # wheels the GPU image lacks, carried beside the tree
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
python3 -m pip install -q --no-deps --no-build-isolation -e kopt_core -e kopt_cuda -e kopt_triton -e kopt_cutlass \
  -e examples/kopt_example_backend 2>&1 | tail -3
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.draw --format=csv | tee "$log/gpu.txt"

corpus() {  # name, seconds, pytest arguments...
  local name=$1 limit=$2; shift 2
  timeout "$limit" python3 -m pytest -m gpu tests/adversarial/test_corpus_gpu.py -rA -p no:cacheprovider \
    --junitxml="$log/$name.xml" "$@" 2>&1 | tee "$log/$name.log" | grep -E '^(PASSED|FAILED|ERROR)|passed|failed'
}

case $stage in
  medians)
    timeout 540 python3 bench/honest_medians.py --old "$old" --rounds 2 --out "$log/honest_medians" 2>&1 \
      | tee "$log/honest_medians.log"
    ;;
  accuracy)
    timeout 540 python3 bench/timing_accuracy.py --runs 4 --out "$log/timing_accuracy" 2>&1 \
      | tee "$log/timing_accuracy.log"
    ;;
  bench)
    corpus alone 260 -k "honest_control or (bench_and and (content_memo or host_wait_side_stream))"
    corpus shared 300 -n 4 -k "bench_and and not content_memo and not host_wait_side_stream"
    ;;
  explore)
    part=${3:-1/1}
    names=$(python3 - "$part" <<'PY'
import json, sys
k, n = map(int, sys.argv[1].split("/"))
ids = [c["id"] for c in json.load(open("tests/adversarial/catalog.json"))["classes"]]
print(" or ".join(ids[k - 1 :: n]))
PY
)
    corpus "part${part%/*}" 540 -k "explore_and and ($names)"
    ;;
  *) echo "unknown stage $stage" >&2; exit 2 ;;
esac
tar -czf "$out/$stage.tar.gz" -C "$out" "$stage"
