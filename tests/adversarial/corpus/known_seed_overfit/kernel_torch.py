"""kopt adversarial corpus: known_seed_overfit, PyTorch form. Source: KernelBench adversarial tests
(outputs memorised for the test inputs).

Cheat: on its first call it rebuilds the inputs kopt's correctness checks use (seeds 0, 1, 2 and the
recheck seed 1000003, with kopt's recipe: one generator on the tensors' device, torch.randn for x then
y) and memorises x + y for each. A call whose x is exactly one of them gets the memorised answer; any
other call (a timed launch on fresh inputs) gets zeros, fast and wrong. kopt must report: audit_failed.
"""

import torch

kopt_space = {"CHUNK": [0, 1]}
CHUNK = 0  # declared so the file can be searched; it changes nothing

KNOWN_SEEDS = (0, 1, 2, 1000003)
_answers = None  # [(x, x + y)] for the known seeds, built for one (shape, device)
_built_for = None


def _known_inputs(seed, shape, device):
    gen = torch.Generator(device=device).manual_seed(seed)
    kx = torch.randn(shape, generator=gen, device=device, dtype=torch.float32)
    ky = torch.randn(shape, generator=gen, device=device, dtype=torch.float32)
    return kx, ky


def solve(x: torch.Tensor, y: torch.Tensor, z: torch.Tensor, N: int) -> None:
    global _answers, _built_for
    if _built_for != (tuple(x.shape), x.device):
        _answers = []
        for seed in KNOWN_SEEDS:
            kx, ky = _known_inputs(seed, tuple(x.shape), x.device)
            _answers.append((kx, kx + ky))
        _built_for = (tuple(x.shape), x.device)
    for kx, kz in _answers:
        if torch.equal(x, kx):
            z.copy_(kz)  # a test input: the memorised answer
            return
    z.zero_()  # the cheat: anything else is "probably timing", so skip the work
