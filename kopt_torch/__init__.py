"""kopt-torch: kopt's backend for PyTorch problems (KernelBench's format) and their ModelNew solutions.

Built on the public plugin contract only (kopt_core.hookspecs, the records, the launcher protocol): the
``torch`` backend (kopt_torch.plugin), KernelBench problems as references (kopt_torch.kbimport,
kopt_torch.reference), and suites scored by fast_p (kopt_torch.suite, kopt_torch.scores).
"""

__version__ = "0.1.0"
