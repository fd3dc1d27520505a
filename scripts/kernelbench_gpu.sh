#!/usr/bin/env bash
# The torch backend on the GPU (docs/validation.md, "PyTorch problems"): kopt suite over
# examples/torch_problems/manifest.json (every problem eager against eager, the hand-written solutions,
# the broken and cheating ones), then kopt optimize on one imported problem through the command
# generator. Results under OUT (default build/kernelbench); PART (default all) is suite, optimize or all.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-build/kernelbench}
PART=${2:-all}
mkdir -p "$OUT"
if [ "$PART" = suite ] || [ "$PART" = all ]; then
  kopt suite --manifest examples/torch_problems/manifest.json --out "$OUT/suite" --budget-s 2 | tee "$OUT/suite.txt"
fi
[ "$PART" = optimize ] || [ "$PART" = all ] || exit 0
kopt import kernelbench examples/torch_problems/level2/04_scale_shift_swish.py --out "$OUT/swish" --force
ROOT=$(pwd)
(cd "$OUT" && kopt optimize --baseline swish/baseline.py --ref swish/ref.py \
  --generator command --k 1 --iterations 1 --sanitizer-timeout "${SANITIZER_TIMEOUT:-60}" \
  -- python3 "$ROOT/examples/torch_problems/copy_candidate.py" \
  "$ROOT/examples/torch_problems/solutions/scale_shift_swish__triton.py") 2>&1 | tee "$OUT/optimize.txt"
