"""CUTLASS's configurations as the space ``kopt search`` walks: the backend's ``kopt_search_space``.

A CUTLASS GEMM kernel declares, in one line, the problem kind whose CUTLASS configurations are the space::

    // kopt:cutlass_gemm a=f16 b=f16 c=f16 acc=f32 layout=tn

(``a``, ``b``, ``c`` and ``acc`` are cutlass_library's element names, ``layout`` A's letter then B's;
``level=N`` optionally picks CUTLASS's instantiation level.) That space is one categorical parameter,
``config``, over the ids of the SM90 configurations of that kind that fit the problem's M, N and K
(``kopt_cutlass.configs.filter_for_problem``); a configuration is written by
``kopt_cutlass.configs.render_kernel``, with the declaration kept at its end so the written kernel can be
searched again. The space has a prior: its best-ranked configurations for the problem
(``kopt_cutlass.configs.seed_order``), which a fresh study evaluates before its sampler proposes any;
and a neighbourhood (``near``): after the seeds, the ``near`` sampler (``auto``'s choice here) proposes the
unevaluated configuration nearest the best so far (``kopt_cutlass.configs.nearest``), not one at random
across the listing.

A file without the line is the core's to read (``// kopt:space`` lines).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from attrs import field, frozen

from kopt_core.errors import ConfigError
from kopt_core.records.fields import as_tuple
from kopt_core.records.search import Config, Parameter, Space, TrialRecord
from kopt_core.search.promotion import fastest_passing
from kopt_core.search.variants import config_id, write_variant
from kopt_cutlass.configs import (
    CutlassGemmConfig,
    enumerate_sm90_gemms,
    filter_for_problem,
    nearest,
    render_kernel,
    seed_order,
)

CUTLASS_KEYWORD = "kopt:cutlass_gemm"
CUTLASS_KEYS = ("a", "b", "c", "acc", "layout")
CUTLASS_OPTIONAL_KEYS = ("level",)
CONFIG_PARAMETER = "config"
_CUTLASS_LINE = re.compile(r"^\s*//\s*kopt:cutlass_gemm\b(?P<body>.*)$")
_CU_SPACE_LINE = re.compile(r"^\s*//\s*kopt:space\b")
_SHAPE = "// kopt:cutlass_gemm a=f16 b=f16 c=f16 acc=f32 layout=tn"


@frozen
class CutlassGemmSpace:
    """The CUTLASS SM90 configurations of one GEMM kind that fit one problem: parameter ``config`` over
    their ids, each written by ``kopt_cutlass.configs.render_kernel`` (with the declaration kept, so the
    written kernel can be searched again). A ``kopt_core.records.search.SearchSource`` with a prior."""

    space: Space
    declaration: str  # the normalised `// kopt:cutlass_gemm ...` line
    configs: tuple[CutlassGemmConfig, ...] = field(converter=as_tuple)
    problem: tuple[int, int, int] | None = None  # M, N, K: what the prior ranks the configurations for

    def prior(self, count: int) -> tuple[Config, ...]:
        """The ``count`` configurations to try first (``kopt_cutlass.configs.seed_order`` at the problem:
        best-ranked, one of each tile shape and kernel schedule before variants of one); none without a
        problem."""
        if self.problem is None or count <= 0:
            return ()
        M, N, K = self.problem
        return tuple({CONFIG_PARAMETER: config.id} for config in seed_order(self.configs, M, N, K)[:count])

    def near(self, evaluated: Sequence[TrialRecord], busy: set[str]) -> Config | None:
        """The configuration to evaluate next (the ``near`` sampler): the unevaluated one nearest the
        fastest passing so far (``kopt_cutlass.configs.nearest``, ties to the prior's order), the prior's
        next one while none has passed; never one evaluated or in ``busy``; None when none is left.
        ``evaluated`` and ``busy`` hold the study's configuration ids (``config_id({"config": id})``)."""
        if self.problem is None:
            return None
        skip = {r.config_id for r in evaluated} | set(busy)
        ranked = seed_order(self.configs, *self.problem)
        skipped = [config.id for config in ranked if config_id({CONFIG_PARAMETER: config.id}) in skip]
        fastest = fastest_passing(evaluated, 1)
        best = self.config_of(fastest[0].config) if fastest else None
        chosen = nearest(ranked, best, skipped)
        return None if chosen is None else {CONFIG_PARAMETER: chosen.id}

    @property
    def identity(self) -> str:
        return self.declaration

    def config_of(self, config: Mapping[str, Any]) -> CutlassGemmConfig:
        wanted = config.get(CONFIG_PARAMETER)
        for candidate in self.configs:
            if candidate.id == wanted:
                return candidate
        raise ConfigError(f"{wanted!r} is not one of the {len(self.configs)} CUTLASS configurations searched")

    def write(self, config: Config, folder: Path) -> Path:
        chosen = self.config_of(config)
        # at the end, so the compiler's line numbers are the emitted file's
        footer = f"\n// kopt search: CUTLASS configuration {chosen.id} of\n{self.declaration}\n"
        text = render_kernel(chosen).rstrip("\n") + "\n" + footer
        details = {
            "kind": "cutlass_gemm",
            "cutlass": {
                "id": chosen.id,
                "label": chosen.label,
                "procedural_name": chosen.procedural_name,
                "listing": chosen.listing,
            },
        }
        return write_variant(self.space, config, folder, text=text, details=details)

    def label(self, config: Mapping[str, Any]) -> str:
        chosen = self.config_of(config)
        return f"{chosen.id}: {chosen.label}"


def _problem(dims: Mapping[str, Any], source: str) -> tuple[int, int, int]:
    values = []
    for name in ("M", "N", "K"):
        value = dims.get(name)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ConfigError(
                f"{source}: a CUTLASS GEMM search needs the problem's M, N and K as positive integers, "
                f"got {name}={value!r}",
                hint="give them as dims: --M=4096 --N=4096 --K=4096",
            )
        values.append(value)
    return values[0], values[1], values[2]


def parse_cutlass_declaration(text: str, source: str = "<source>") -> dict[str, str] | None:
    """The keys of a file's one ``// kopt:cutlass_gemm`` line, or None when it has none. ConfigError
    for a second line, a missing, unknown or repeated key, or a token that is not ``key=value``."""
    found: list[tuple[int, str]] = []
    for number, line in enumerate(text.split("\n"), start=1):
        match = _CUTLASS_LINE.match(line)
        if match:
            found.append((number, match.group("body")))
    if not found:
        return None
    if len(found) > 1:
        lines = ", ".join(str(number) for number, _ in found)
        raise ConfigError(f"{source}: {len(found)} `kopt:cutlass_gemm` lines (lines {lines}); keep one")
    number, body = found[0]
    where = f"{source}:{number}"
    keys: dict[str, str] = {}
    for token in body.split():
        key, equals, value = token.partition("=")
        if not equals or not key or not value:
            raise ConfigError(f"{where}: `{token}` is not key=value", hint=f"write it as: {_SHAPE}")
        if key not in CUTLASS_KEYS + CUTLASS_OPTIONAL_KEYS:
            known = ", ".join(CUTLASS_KEYS + CUTLASS_OPTIONAL_KEYS)
            raise ConfigError(f"{where}: unknown key {key!r} (keys: {known})", hint=f"write it as: {_SHAPE}")
        if key in keys:
            raise ConfigError(f"{where}: {key} is given twice")
        keys[key] = value
    missing = [key for key in CUTLASS_KEYS if key not in keys]
    if missing:
        raise ConfigError(f"{where}: missing {', '.join(missing)}", hint=f"write it as: {_SHAPE}")
    if "level" in keys and not (keys["level"].isdigit() and int(keys["level"]) > 0):
        raise ConfigError(
            f"{where}: level={keys['level']!r} is not a positive integer (CUTLASS's instantiation level)"
        )
    return keys


def cutlass_gemm_space(
    path: str | Path, dims: Mapping[str, Any], *, text: str | None = None
) -> CutlassGemmSpace:
    """The CUTLASS configurations ``path``'s ``// kopt:cutlass_gemm`` line names that fit the problem of
    ``dims`` (M, N, K), as a space of one categorical parameter ``config``. ConfigError when the file has
    no such line or a bad one, the dims have no M, N, K, or no configuration fits."""
    source = str(path)
    if text is None:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read kernel file {path}: {exc}") from None
    keys = parse_cutlass_declaration(text, source)
    if keys is None:
        raise ConfigError(f"{source}: no `// kopt:cutlass_gemm` line", hint=f"add one: {_SHAPE}")
    if any(_CU_SPACE_LINE.match(line) for line in text.split("\n")):
        raise ConfigError(
            f"{source}: declares both `// kopt:cutlass_gemm` and `// kopt:space` lines; a search walks one",
            hint="keep the CUTLASS declaration (its configurations are the space) or the kopt:space lines",
        )
    M, N, K = _problem(dims, source)
    level = int(keys["level"]) if "level" in keys else None
    every = enumerate_sm90_gemms(
        keys["a"], keys["b"], keys["c"], keys["acc"], keys["layout"], instantiation_level=level
    )
    fitting = filter_for_problem(every, M, N, K)
    if not fitting:
        raise ConfigError(
            f"{source}: none of the {len(every)} CUTLASS SM90 configurations of this kind fits "
            f"M={M} N={N} K={K} (alignment, or clusters wider than the tile grid)",
            hint="check the dims; the configurations need e.g. K and N multiples of 8 for 16-bit inputs",
        )
    declaration = "// kopt:cutlass_gemm " + " ".join(
        f"{key}={keys[key]}" for key in CUTLASS_KEYS + CUTLASS_OPTIONAL_KEYS if key in keys
    )
    line = next(n for n, body in enumerate(text.split("\n"), start=1) if _CUTLASS_LINE.match(body))
    parameter = Parameter(CONFIG_PARAMETER, tuple(config.id for config in fitting), line)
    # "cu_defines", as the space was first written down: the kind is part of the space's id, which names
    # the study a search resumes (the variants are this module's, config.json says "cutlass_gemm")
    space = Space(source=source, kind="cu_defines", parameters=(parameter,), text=declaration)
    return CutlassGemmSpace(space=space, declaration=declaration, configs=fitting, problem=(M, N, K))


def cutlass_search_space(text: str, source: str, dims: Mapping[str, Any]) -> CutlassGemmSpace | None:
    """``kopt_search_space``'s answer: the space of the file's ``// kopt:cutlass_gemm`` line, or None
    when it has none (the core reads its ``// kopt:space`` lines)."""
    if parse_cutlass_declaration(text, source) is None:
        return None
    return cutlass_gemm_space(source, dims, text=text)
