"""Checking a compiled kernel's SASS for the instructions an optimization method promises.

``references/sass_signatures.json`` says, per method id, which opcode mnemonics (regexes over the
mnemonic with its modifiers, never operands or symbol names) show the method on each architecture, or
why the method has no SASS footprint. ``kopt_core.sass.verify`` parses ``cuobjdump --dump-sass``
output and turns a listing (and optionally a baseline listing) into one verdict per method: pass,
fail, inconclusive, not_applicable or tool_error. Nothing here ever passes by default.
"""

from kopt_core.sass.verify import (
    NoOwnDeviceCode,
    SassFunction,
    SassListing,
    SassToolError,
    SassVerdict,
    disassemble_file,
    load_signatures,
    parse_sass,
    verify,
    verify_artifact,
    verify_file,
)

__all__ = [
    "NoOwnDeviceCode",
    "SassFunction",
    "SassListing",
    "SassToolError",
    "SassVerdict",
    "disassemble_file",
    "load_signatures",
    "parse_sass",
    "verify",
    "verify_artifact",
    "verify_file",
]
