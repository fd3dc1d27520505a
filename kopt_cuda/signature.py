"""Read the ``extern "C" void solve(...)`` entry point of a CUDA or CUTLASS kernel file.

The signature is the whole contract between a user's ``.cu`` file and kopt: pointer parameters become
buffers (``const`` pointees are inputs), by-value parameters become dims given on the command line. The
parser is deliberately small and lexical rather than a C++ front end: it only has to recognise one
function declaration, and it must work on a machine without a compiler (preflight runs on CPU).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import pairwise

from kopt_core.errors import ConfigError
from kopt_core.records.kernel import KernelInterface, Param

_FLOAT16 = ("half", "__half", "cutlass::half_t")
_BFLOAT16 = ("__nv_bfloat16", "nv_bfloat16", "cutlass::bfloat16_t")
_CSTDINT = {
    "int8_t": "int8",
    "uint8_t": "uint8",
    "int16_t": "int16",
    "uint16_t": "uint16",
    "int32_t": "int32",
    "uint32_t": "uint32",
    "int64_t": "int64",
    "uint64_t": "uint64",
    "size_t": "uint64",
    "ptrdiff_t": "int64",
}

# Element spelling (whitespace-normalised, no leading "::") -> torch dtype name.
TORCH_DTYPE_OF: dict[str, str] = {
    "float": "float32",
    "double": "float64",
    **{spelling: "float16" for spelling in _FLOAT16},
    **{spelling: "bfloat16" for spelling in _BFLOAT16},
    "__nv_fp8_e4m3": "float8_e4m3fn",
    "cutlass::float_e4m3_t": "float8_e4m3fn",
    "__nv_fp8_e5m2": "float8_e5m2",
    "cutlass::float_e5m2_t": "float8_e5m2",
    "bool": "bool",
    "char": "int8",
    "signed char": "int8",
    "unsigned char": "uint8",
    "short": "int16",
    "short int": "int16",
    "signed short": "int16",
    "unsigned short": "uint16",
    "unsigned short int": "uint16",
    "int": "int32",
    "signed": "int32",
    "signed int": "int32",
    "unsigned": "uint32",
    "unsigned int": "uint32",
    "long": "int64",
    "long int": "int64",
    "signed long": "int64",
    "long long": "int64",
    "long long int": "int64",
    "signed long long": "int64",
    "unsigned long": "uint64",
    "unsigned long int": "uint64",
    "unsigned long long": "uint64",
    "unsigned long long int": "uint64",
    **_CSTDINT,
    **{f"std::{name}": dtype for name, dtype in _CSTDINT.items()},
}

# Scalar dtype name -> the ctypes type a loader passes it as. Only these may be passed by value:
# ctypes has no half, bfloat16 or fp8 type to pass a scalar of those.
SCALAR_CTYPES: dict[str, str] = {
    "bool": "c_bool",
    "int8": "c_int8",
    "uint8": "c_uint8",
    "int16": "c_int16",
    "uint16": "c_uint16",
    "int32": "c_int32",
    "uint32": "c_uint32",
    "int64": "c_int64",
    "uint64": "c_uint64",
    "float32": "c_float",
    "float64": "c_double",
}

_QUALIFIERS = {"const", "volatile", "__restrict__", "__restrict", "restrict"}
_BUILTIN_WORDS = {"signed", "unsigned", "short", "long", "int", "char", "float", "double", "bool", "void"}
# Words that may precede the return type of a C-linkage host function.
_SPECIFIERS = {"extern", "inline", "__inline__", "__host__", "__forceinline__", "__noinline__", "static"}
# A kernel or device function named solve cannot be called from the host through the library.
_DEVICE_WORDS = {"__global__", "__device__"}
# A statement that starts with one of these calls ``solve`` rather than declaring it.
_STATEMENT_WORDS = {
    "return",
    "else",
    "do",
    "goto",
    "throw",
    "co_return",
    "co_yield",
    "co_await",
    "new",
    "delete",
    "sizeof",
    "typedef",
    "using",
    "case",
}

_NAME = r"(?:::\s*)?[A-Za-z_]\w*(?:\s*::\s*[A-Za-z_]\w*)*"
_PREFIX_TOKEN = re.compile(rf'"[^"\n]*"|{_NAME}|\*|&|\S')
_PARAM_TOKEN = re.compile(rf"\.\.\.|{_NAME}|\S")
_ATTRIBUTE = re.compile(r"__attribute__\s*\(|__declspec\s*\(|\[\[")
_SUPPORTED = (
    "float, double, half/__half/cutlass::half_t, __nv_bfloat16/cutlass::bfloat16_t, "
    "__nv_fp8_e4m3/__nv_fp8_e5m2 (and the cutlass::float_e4m3_t/float_e5m2_t spellings), bool, "
    "char, short, int, long, long long and their unsigned forms, int8_t..uint64_t, size_t, ptrdiff_t"
)
_SUPPORTED_SCALARS = (
    "bool, char, short, int, long, long long and their unsigned forms, int8_t..uint64_t, size_t, "
    "ptrdiff_t, float, double"
)


def parse_solve(source: str, path: str = "<source>", entry: str = "solve") -> KernelInterface:
    """Return the parameters of the C-linkage ``entry`` function defined in ``source``.

    Raises ``ConfigError`` naming ``path`` and the line when the entry point is missing, not
    ``extern "C"``, ambiguous, or has a parameter kopt cannot turn into a buffer or a dim.
    """
    text = _blank_attributes(_blank_preprocessor(_strip_comments_and_strings(source)))
    sites = _declarations(text, entry)
    c_sites = [site for site in sites if site.extern_c]
    if not c_sites:
        if sites:
            raise ConfigError(
                f'{path}:{sites[0].line}: {entry}(...) is not declared extern "C", so the shared library '
                f"exports it under a mangled C++ name that kopt cannot call. Write it as "
                f'extern "C" void {entry}(...) (or put it inside an extern "C" {{ ... }} block).'
            )
        raise ConfigError(
            f'{path}: no entry point found. A CUDA kernel file must expose extern "C" void {entry}(...) '
            f"taking the buffers as pointers and the dims as integers, for example "
            f'extern "C" void {entry}(const float* input, float* output, int N), and launch its '
            f"kernels from it."
        )
    site = _choose(c_sites, path, entry)
    if site.is_static:
        raise ConfigError(
            f"{path}:{site.line}: {entry}(...) is declared static, so the shared library would not export "
            f"it. Remove static."
        )
    if site.device_only:
        raise ConfigError(
            f"{path}:{site.line}: {entry}(...) is a __global__/__device__ function; it must be a host "
            f'function that launches the kernels: extern "C" void {entry}(...).'
        )
    if site.return_type != "void":
        raise ConfigError(
            f"{path}:{site.line}: {entry}(...) returns '{site.return_type}'; kopt ignores results and reads "
            f'the output buffers instead. Declare it extern "C" void {entry}(...).'
        )
    params = _parse_params(text, site, path, entry)
    return KernelInterface(entry=entry, params=params, source=path, line=site.line)


@dataclass(frozen=True)
class _Site:
    """One place where ``solve`` is declared or defined."""

    line: int
    extern_c: bool
    is_definition: bool
    is_static: bool
    device_only: bool
    return_type: str
    params_start: int  # offset just after "("
    params_end: int  # offset of the matching ")"


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def _blank(chunk: str) -> str:
    """Spaces in place of ``chunk``, newlines kept, so offsets past it keep their line numbers."""
    return re.sub(r"[^\n]", " ", chunk)


def _strip_comments_and_strings(source: str) -> str:
    """Blank comments and string/char literal contents, keeping every newline so lines still count.

    A string whose content is exactly ``C`` is kept, so that ``extern "C"`` survives while
    ``extern "C++"`` and any ``solve`` inside a string do not.
    """
    out: list[str] = []
    i, n = 0, len(source)
    while i < n:
        char = source[i]
        if source.startswith("//", i):
            end = source.find("\n", i)
            end = n if end < 0 else end
            out.append(_blank(source[i:end]))
            i = end
        elif source.startswith("/*", i):
            end = source.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out.append(_blank(source[i:end]))
            i = end
        elif char == '"' and re.search(r"(?<!\w)(?:u8|u|U|L)?R$", source[max(0, i - 4) : i]):
            open_paren = source.find("(", i)
            delimiter = source[i + 1 : open_paren] if open_paren >= 0 else ""
            close = source.find(f'){delimiter}"', max(open_paren, i))
            end = n if open_paren < 0 or close < 0 else close + len(delimiter) + 2
            out.append('"' + _blank(source[i + 1 : end - 1]) + '"')
            i = end
        elif char in "\"'":
            if char == "'" and re.search(r"(?<![\w'])\d[\w']*$", source[max(0, i - 64) : i]):
                out.append(char)  # a digit separator (1'000'000), not a character literal
                i += 1
                continue
            end = i + 1
            while end < n and source[end] not in (char, "\n"):
                end += 2 if source[end] == "\\" else 1
            end = min(end, n)
            content = source[i + 1 : end]
            kept = content if char == '"' and content == "C" else _blank(content)
            out.append(char + kept + source[end : end + 1])  # the closing quote (or newline, or nothing)
            i = end + 1
        else:
            out.append(char)
            i += 1
    return "".join(out)


def _blank_preprocessor(text: str) -> str:
    """Blank preprocessor directives (with their continuation lines).

    Macros may hold unbalanced braces or a ``solve`` that is never compiled as written; the common
    ``#ifdef __cplusplus / extern "C" { / #endif`` guard still leaves its ``extern "C" {`` in place.
    """
    lines = text.split("\n")
    continued = False
    for index, line in enumerate(lines):
        if continued or line.lstrip().startswith("#"):
            continued = line.rstrip().endswith("\\")
            lines[index] = " " * len(line)
    return "\n".join(lines)


def _matching(text: str, open_index: int, opening: str, closing: str) -> int:
    """Offset of the bracket closing the one at ``open_index``, or ``len(text)`` if it never closes."""
    depth = 0
    for index in range(open_index, len(text)):
        if text[index] == opening:
            depth += 1
        elif text[index] == closing:
            depth -= 1
            if depth == 0:
                return index
    return len(text)


def _extern_c_blocks(text: str) -> list[tuple[int, int]]:
    blocks = []
    for match in re.finditer(r'\bextern\s*"C"\s*\{', text):
        open_index = match.end() - 1
        blocks.append((open_index, _matching(text, open_index, "{", "}")))
    return blocks


def _blank_attributes(text: str) -> str:
    """Blank ``__attribute__((...))``, ``__declspec(...)`` and ``[[...]]``.

    They may sit between ``extern "C"`` and ``void`` (``visibility("default")`` is common in shared
    libraries), and their parentheses would otherwise look like an expression around ``solve``.
    """
    while match := _ATTRIBUTE.search(text):
        if match.group() == "[[":
            end = text.find("]]", match.end())
            end = len(text) if end < 0 else end + 2
        else:
            end = _matching(text, match.end() - 1, "(", ")") + 1
        text = text[: match.start()] + _blank(text[match.start() : end]) + text[end:]
    return text


def _declarations(text: str, entry: str) -> list[_Site]:
    """Every declaration or definition of a free function named ``entry`` (calls are skipped)."""
    blocks = _extern_c_blocks(text)
    sites = []
    for match in re.finditer(rf"\b{re.escape(entry)}\s*\(", text):
        # A declaration starts after the previous statement, block or macro invocation ("FOO(x)").
        boundary = max(text.rfind(char, 0, match.start()) for char in ";{})")
        prefix = text[boundary + 1 : match.start()]
        if prefix.rstrip().endswith("::"):
            continue  # a member or namespaced function, never the C entry point
        tokens = _PREFIX_TOKEN.findall(prefix)
        if any(not re.fullmatch(rf'"[^"]*"|{_NAME}|\*|&', token) for token in tokens):
            continue  # an expression ("x = solve(", "if (a) solve(") or a label
        words = [token for token in tokens if not token.startswith('"')]
        if _STATEMENT_WORDS.intersection(words):
            continue
        type_tokens = [t for t in words if t not in _SPECIFIERS and t not in _DEVICE_WORDS]
        if not type_tokens:
            continue  # a call statement: "solve(a, b);"
        linkage = any(pair == ("extern", '"C"') for pair in pairwise(tokens))
        in_block = any(start < match.start() < end for start, end in blocks)
        params_end = _matching(text, match.end() - 1, "(", ")")
        after = re.search(r"[;{]", text[params_end:])
        sites.append(
            _Site(
                line=_line_of(text, match.start()),
                extern_c=linkage or in_block,
                is_definition=after is not None and after.group() == "{",
                is_static="static" in words,
                device_only=bool(_DEVICE_WORDS.intersection(words)) and "__host__" not in words,
                return_type=re.sub(r" (?=[*&])", "", " ".join(re.sub(r"\s+", "", t) for t in type_tokens)),
                params_start=match.end(),
                params_end=params_end,
            )
        )
    return sites


def _choose(sites: list[_Site], path: str, entry: str) -> _Site:
    """The one definition (or, in a header-like file, the one declaration) of the entry point."""
    definitions = [site for site in sites if site.is_definition]
    candidates = definitions or sites
    if len(candidates) > 1:
        lines = ", ".join(str(site.line) for site in candidates)
        raise ConfigError(
            f'{path}:{candidates[1].line}: extern "C" {entry}(...) is '
            f"{'defined' if definitions else 'declared'} more than once (lines {lines}); kopt needs exactly "
            f"one entry point per kernel file. Keep one and rename or remove the others."
        )
    return candidates[0]


def _split_params(text: str, start: int, end: int) -> list[tuple[str, int]]:
    """Split the parameter list at top-level commas, keeping each piece's offset for line numbers."""
    pieces, depth, piece_start = [], 0, start
    for index in range(start, end):
        char = text[index]
        if char in "(<[{":
            depth += 1
        elif char in ")>]}":
            depth -= 1
        elif char == "," and depth == 0:
            pieces.append((text[piece_start:index], piece_start))
            piece_start = index + 1
    pieces.append((text[piece_start:end], piece_start))
    return pieces


def _parse_params(text: str, site: _Site, path: str, entry: str) -> tuple[Param, ...]:
    pieces = _split_params(text, site.params_start, site.params_end)
    if len(pieces) == 1 and pieces[0][0].strip() in ("", "void"):
        return ()
    params: list[Param] = []
    seen: dict[str, int] = {}
    for position, (piece, offset) in enumerate(pieces, start=1):
        leading = len(piece) - len(piece.lstrip())
        line = _line_of(text, offset + leading)
        param = _parse_param(" ".join(piece.split()), position, f"{path}:{line}", entry)
        if param.name in seen:
            raise ConfigError(
                f"{path}:{line}: parameter '{param.name}' of {entry}(...) is declared twice (also "
                f"parameter {seen[param.name]}); give each parameter its own name."
            )
        seen[param.name] = position
        params.append(param)
    return tuple(params)


def _parse_param(written: str, position: int, where: str, entry: str) -> Param:
    """Turn one written parameter (``const float* __restrict__ x``) into a ``Param``."""
    what = f"parameter {position} of {entry}(...) ('{written}')"
    if "..." in written:
        raise ConfigError(
            f"{where}: {entry}(...) is variadic ('...'); kopt passes a fixed list of buffers and dims. "
            f"Declare every parameter with its type and name."
        )
    if "=" in written:
        raise ConfigError(
            f"{where}: {what} has a default argument; kopt passes every parameter explicitly and a C "
            f"function cannot have defaults. Remove '= ...' and give the value as a dim."
        )
    if "&" in written:
        raise ConfigError(
            f"{where}: {what} is a reference; a C entry point takes buffers as pointers and dims by "
            f"value. Write it as a pointer (T* name) or a plain value (int name)."
        )
    if "[" in written:
        raise ConfigError(
            f"{where}: {what} is an array; write it as a pointer (const T* name for an input, T* name for "
            f"an output)."
        )
    tokens = [re.sub(r"\s+", "", token).removeprefix("::") for token in _PARAM_TOKEN.findall(written)]
    if any(token != "*" and not re.fullmatch(_NAME, token) for token in tokens):
        raise ConfigError(
            f"{where}: kopt cannot read {what}; write buffers as 'const T* name' (input) or 'T* name' "
            f"(output) and dims as 'int name'."
        )
    stars = tokens.count("*")
    if stars > 1:
        raise ConfigError(
            f"{where}: {what} is a pointer to a pointer; kopt passes each buffer as one device pointer. "
            f"Pass each buffer as its own 'T* name' parameter."
        )
    last = tokens[-1] if tokens else ""
    kind_words = [t for t in tokens[:-1] if t != "*" and t not in _QUALIFIERS]
    if last in ("*", "") or last in _QUALIFIERS or last in _BUILTIN_WORDS or not kind_words:
        raise ConfigError(
            f"{where}: {what} has no name; kopt matches buffers and dims to the reference by name. "
            f"Name it, e.g. 'const float* input' or 'int N'."
        )
    name, type_tokens = last, tokens[:-1]
    star = type_tokens.index("*") if stars else len(type_tokens)
    pointee, after_star = type_tokens[:star], type_tokens[star + 1 :]
    if any(token not in _QUALIFIERS for token in after_star):
        raise ConfigError(f"{where}: kopt cannot read {what}; write it as 'const T* name' or 'T* name'.")
    base = " ".join(token for token in pointee if token not in _QUALIFIERS)
    qualifiers = "".join(f"{q} " for q in ("const", "volatile") if q in pointee)
    is_const = "const" in pointee
    if stars:
        ctype = f"{qualifiers}{base}*"
        if base == "void":
            # The element type comes from the reference's buffers(**dims) description.
            return Param(name=name, kind="buffer", ctype=ctype, dtype=None, is_const=is_const)
        dtype = TORCH_DTYPE_OF.get(base)
        if dtype is None:
            raise ConfigError(
                f"{where}: parameter '{name}' of {entry}(...) points to '{base}', which kopt cannot map to "
                f"a tensor dtype. Supported element types: {_SUPPORTED}. For any other element type, "
                f"declare the parameter 'void* {name}' (or 'const void* {name}') and give its dtype in an "
                f"explicit buffer description in the reference (a buffers(**dims) function)."
            )
        return Param(name=name, kind="buffer", ctype=ctype, dtype=dtype, is_const=is_const)
    dtype = TORCH_DTYPE_OF.get(base)
    if dtype not in SCALAR_CTYPES:
        raise ConfigError(
            f"{where}: parameter '{name}' of {entry}(...) has type '{base}', which kopt cannot pass by "
            f"value. Dims and scalars may be: {_SUPPORTED_SCALARS}. Pass anything else through a buffer "
            f"(a pointer parameter)."
        )
    return Param(name=name, kind="scalar", ctype=f"{qualifiers}{base}", dtype=dtype)
