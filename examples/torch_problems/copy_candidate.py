"""A command generator for kopt optimize: the hand-written solution given on its command line is the
iteration's one branch, and the best kernel so far is the ablation of each method the brief names (the
kernel without what the solution adds).

    kopt optimize --baseline DIR/baseline.py --ref DIR/ref.py --generator command --k 1 --iterations 1 \\
        -- python examples/torch_problems/copy_candidate.py examples/torch_problems/solutions/X.py

kopt runs it in the iteration's folder with the brief's path in KOPT_BRIEF_JSON.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

from kopt_core.records.loop import AblationSpec, BranchSpec, Candidates
from kopt_core.run.candidates import write_candidates


def main(solution: str) -> int:
    brief = json.loads(Path(os.environ["KOPT_BRIEF_JSON"]).read_text())
    folder = Path(os.environ.get("KOPT_ITER_DIR") or ".")
    methods = tuple(method["id"] for method in brief["methods"])
    branch = brief["files"]["branches"][0]
    (folder / branch).parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(solution, folder / branch)
    ablations = []
    for method in methods:
        file = brief["files"]["ablations"][method]
        (folder / file).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(brief["best"]["path"], folder / file)
        ablations.append(AblationSpec(method=method, file=file, note="the best kernel so far, without it"))
    candidates = Candidates(
        iteration=int(os.environ["KOPT_ITER"]),
        generator="copy_candidate (a hand-written solution)",
        methods=methods,
        branches=(BranchSpec(id="b1", file=branch, methods=methods, note=Path(solution).name),),
        ablations=tuple(ablations),
    )
    print(write_candidates(folder, candidates))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
