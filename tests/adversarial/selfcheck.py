"""Static checks of kopt's adversarial corpus, runnable without a GPU (not a pytest module).

    .venv-test/bin/python tests/adversarial/selfcheck.py [--no-nvcc]

For every kernel catalog.json names: the file exists, kopt reads its search space, each .cu builds with
nvcc as kopt builds it (once per BLOCK value), and each Python form imports in a fresh process (Triton
forms under TRITON_INTERPRET=1; a fresh process because several forms patch the interpreter at import).
The honest control's Python forms must also give z == x + y on the CPU.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]

IMPORT_ONLY = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("kopt_adversarial_kernel", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
"""

HONEST_TRITON = (
    IMPORT_ONLY
    + """
import torch
for seed in (0, 1):
    args = module.setup(16384, seed)["inputs"]
    args["z"].fill_(float("nan"))
    module.run_kernel(**args)
    assert torch.equal(args["z"], args["x"] + args["y"]), "honest Triton form is wrong"
"""
)

HONEST_TORCH = (
    IMPORT_ONLY
    + """
import torch
gen = torch.Generator(device="cpu").manual_seed(0)
x = torch.randn(16384, generator=gen, dtype=torch.float32)
y = torch.randn(16384, generator=gen, dtype=torch.float32)
for chunk in (0, 1):
    module.CHUNK = chunk
    z = torch.full_like(x, float("nan"))
    module.solve(x, y, z, 16384)
    assert torch.equal(z, x + y), "honest torch form is wrong"
"""
)


def main() -> int:
    sys.path.insert(0, str(REPO))
    from kopt_core.search.space import read_space

    use_nvcc = "--no-nvcc" not in sys.argv and shutil.which("nvcc") is not None
    catalog = json.loads((HERE / "catalog.json").read_text())
    entries = [catalog["control"], *catalog["classes"]]
    failures = []
    for entry in entries:
        for form, rel in entry["kernels"].items():
            path = HERE / rel
            label = f"{entry['id']}/{form}"
            try:
                space = read_space(path)
            except Exception as exc:  # ConfigError, or a missing file
                failures.append(f"{label}: space: {exc}")
                continue
            if form == "cuda":
                if not use_nvcc:
                    continue
                with tempfile.TemporaryDirectory() as tmp:
                    for block in space.parameters[0].values:
                        cmd = [
                            "nvcc",
                            "-shared",
                            "-Xcompiler",
                            "-fPIC",
                            "--default-stream",
                            "per-thread",
                            "-arch=sm_90",
                            f"-DBLOCK={block}",
                            "-o",
                            f"{tmp}/k.so",
                            str(path),
                        ]
                        done = subprocess.run(cmd, capture_output=True, text=True)
                        if done.returncode != 0:
                            failures.append(f"{label}: nvcc -DBLOCK={block}: {done.stderr.strip()}")
                continue
            env = dict(os.environ, TRITON_INTERPRET="1") if form == "triton" else dict(os.environ)
            env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
            script = IMPORT_ONLY
            if entry["id"] == "honest":
                script = HONEST_TRITON if form == "triton" else HONEST_TORCH
            done = subprocess.run(
                [sys.executable, "-c", script, str(path)],
                capture_output=True,
                text=True,
                env=env,
                timeout=300,
            )
            if done.returncode != 0:
                failures.append(f"{label}: import: {done.stderr.strip().splitlines()[-1:]}")
            print(f"ok  {label}" if done.returncode == 0 else f"BAD {label}")
    for line in failures:
        print("FAIL", line)
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
