"""Errors a user can cause, each carrying its exit code (docs/loop.md, "Exit codes").

0 verified success, 2 kernel validation / no valid kernel, 3 hardware / tool / ncu failure,
4 baseline / reference / dims configuration or static contract failure. Besides these, the CLI exits 1 for
kopt's own failure and 130 when interrupted (Ctrl-C, as a shell reports SIGINT: 128 + 2).
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_INVALID_KERNEL = 2
EXIT_HARDWARE = 3
EXIT_CONFIG = 4
EXIT_INTERRUPTED = 130  # Ctrl-C: 128 + SIGINT, what a shell reports for a process SIGINT stopped


class KoptError(Exception):
    """Base class: a failure explained in words, with the exit code the CLI returns for it."""

    exit_code = 1

    def __init__(self, message: str, *, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\n  -> {self.hint}"


class ConfigError(KoptError):
    """Bad kernel file, reference file or dims (exit 4)."""

    exit_code = EXIT_CONFIG


class HardwareError(KoptError):
    """No GPU, a missing tool, or a profiler that cannot read counters (exit 3)."""

    exit_code = EXIT_HARDWARE


class ValidationError(KoptError):
    """The kernel compiled and ran but failed correctness or stable timing (exit 2)."""

    exit_code = EXIT_INVALID_KERNEL
