"""kopt: make GPU kernels faster with evidence instead of guesswork.

The core is backend-agnostic: it defines the hooks (``kopt_core.hookspecs``), the records that are
persisted (``kopt_core.records``), the measurement harness (``kopt_core.bench``) and the ``kopt`` CLI.
Backends (CUDA, CUTLASS, Triton, third-party) are plugins registered through the ``kopt`` entry-point
group.
"""

__version__ = "0.1.0"

from kopt_core.plugins import hookimpl  # noqa: E402  (the marker plugins decorate their hooks with)

__all__ = ["__version__", "hookimpl"]
