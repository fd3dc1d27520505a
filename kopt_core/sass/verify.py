"""Parse ``cuobjdump --dump-sass`` output and check it against ``references/sass_signatures.json``.

Rules (see the schema ``references/schemas/v1/sass_signatures.schema.json``):
  * a method marked ``not_applicable`` has no SASS footprint: status "not_applicable";
  * otherwise its rule for the architecture is looked up as the exact arch ("sm_90a"), the arch without
    the "a"/"f" suffix ("sm_90"), then "default"; no rule: "inconclusive" (never pass);
  * ``any``: at least one regex matches some instruction; ``all``: every regex matches some instruction;
    regexes are searched in the opcode mnemonic with its modifiers only ("HMMA.16816.F32"), so a kernel
    named ``hmma_demo`` proves nothing;
  * ``relative: present`` passes when the rule holds; ``more_than_baseline`` / ``fewer_than_baseline``
    compare the number of matching instructions with a baseline listing (for ``all``, every regex's
    count must compare so); no baseline, or an empty one: "inconclusive";
  * an empty listing (no instructions parsed) is "inconclusive"; a missing or failing cuobjdump in
    ``verify_file`` is "tool_error".
"""

from __future__ import annotations

import re
import subprocess
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import attrs
from attrs import field, frozen

from kopt_core.errors import EXIT_CONFIG, ConfigError, HardwareError
from kopt_core.process import run_in_group
from kopt_core.records.fields import as_tuple
from kopt_core.refdata import load_document
from kopt_core.tools import find_tool

SIGNATURES_FILE = "sass_signatures.json"
SCHEMA_FILE = "schemas/v1/sass_signatures.schema.json"
STATUSES = ("pass", "fail", "inconclusive", "not_applicable", "tool_error")
RELATIVES = ("present", "more_than_baseline", "fewer_than_baseline")
CUOBJDUMP_TIMEOUT_S = 120.0

_FUNCTION = re.compile(r"^\s*Function\s*:\s*(\S+)")
_ARCH = re.compile(r"^\s*code for\s+(sm_\w+)")
# /*0040*/   @!P0 HMMA.16816.F32 R4, R132.reuse, R136, R4 ;   /* 0x... */
_INSTRUCTION = re.compile(
    r"^\s*/\*[0-9a-fA-F]+\*/\s+"  # address
    r"(?:\{\s*)?"  # dual-issue brace of old listings
    r"(?:@!?U?P(?:T|[0-9]+)\s+)?"  # predicate
    r"([A-Z][A-Z0-9_]*(?:\.[A-Za-z0-9_]+)*)"  # mnemonic with modifiers
)


# --------------------------------------------------------------------------------------------- records


@frozen
class SassFunction:
    name: str
    arch: str = ""  # from the "code for sm_XX" line above it, when there is one
    instructions: tuple[str, ...] = field(default=(), converter=as_tuple)  # mnemonics with modifiers


@frozen
class SassListing:
    functions: tuple[SassFunction, ...] = field(default=(), converter=as_tuple)

    @property
    def instructions(self) -> tuple[str, ...]:
        return tuple(op for function in self.functions for op in function.instructions)

    def counts(self) -> Counter[str]:
        return Counter(self.instructions)

    @property
    def empty(self) -> bool:
        return not any(function.instructions for function in self.functions)


@frozen
class SassRule:
    arch: str  # the key it was found under ("sm_90", "default")
    mode: str  # any | all
    patterns: tuple[str, ...] = field(converter=as_tuple)
    relative: str = "present"

    def describe(self) -> str:
        joined = (" or " if self.mode == "any" else " and ").join(self.patterns)
        what = (
            f"an instruction matching {joined}"
            if self.mode == "any" or len(self.patterns) == 1
            else f"instructions matching each of {joined}"
        )
        if self.relative == "present":
            return f"[{self.arch}] {what}"
        more = "more" if self.relative == "more_than_baseline" else "fewer"
        return f"[{self.arch}] {more} instructions matching {joined} than the baseline"


@frozen
class CounterRule:
    """How a method without a SASS footprint shows in ncu instead: ``metric`` (a metric-registry key) in
    the champion's profile at most ``at_most`` times its value in the profile of the kernel the iteration
    started from (the same bundle). ``why`` says what the counter measures."""

    metric: str
    at_most: float
    why: str = ""

    def describe(self) -> str:
        return f"ncu {self.metric} at most {self.at_most:g}x the iteration's input kernel"


@frozen
class Signature:
    method: str
    not_applicable: str | None = None
    counters: CounterRule | None = None  # only beside not_applicable: the counter that shows the method
    rules: dict[str, SassRule] = field(factory=dict)  # arch -> SassRule
    note: str = ""

    def rule_for(self, arch: str) -> SassRule | None:
        for key in _arch_keys(arch):
            if key in self.rules:
                return self.rules[key]
        return None


@frozen
class SignatureSet:
    schema_version: int
    signatures: dict[str, Signature]  # method id -> Signature
    source: str = ""

    def get(self, method: str) -> Signature | None:
        return self.signatures.get(method)


@frozen
class SassVerdict:
    method: str
    status: str  # pass | fail | inconclusive | not_applicable | tool_error
    matched: tuple[tuple[str, int], ...] = field(default=(), converter=as_tuple)  # (mnemonic, count)
    expected: str = ""
    reason: str = ""

    @property
    def passed(self) -> bool:
        return self.status == "pass"


class SassToolError(HardwareError):
    """cuobjdump is missing or failed on a file."""


class SassInputError(SassToolError):
    """cuobjdump ran, but the file holds no device code (empty, not a cubin, fatbin or CUDA library): the
    input is bad, not the tool. Still a SassToolError, so a run records it as a tool_error verdict;
    ``kopt sass`` on a loose file exits 4 with it."""

    exit_code = EXIT_CONFIG


class NoOwnDeviceCode(SassInputError):
    """The artifact has no device code of its own: its kernels are a library's (a PyTorch program that runs
    only libtorch's). As a candidate it cannot be verified (a tool_error verdict); as the baseline it has no
    listing to compare against, so the rules relative to a baseline are inconclusive and the others are
    still decided on the candidate."""


# what cuobjdump says when it ran on a file that holds no device code
_NO_DEVICE_CODE = re.compile(
    r"does not contain device code|invalid fatbin header|not an? (?:valid )?(?:elf|cubin|fatbin)",
    re.IGNORECASE,
)
INPUT_FORMS = "cuobjdump --dump-sass text (.sass, .txt), a cubin or a shared library with device code"


# --------------------------------------------------------------------------------------------- parsing


def parse_sass(text: str) -> SassListing:
    """Functions and their instruction mnemonics (with modifiers) from ``cuobjdump --dump-sass`` output.
    Predicates, addresses, operands, encodings and comments are dropped."""
    functions: list[SassFunction] = []
    name: str | None = None
    arch = ""
    current_arch = ""
    ops: list[str] = []

    def close() -> None:
        if name is not None or ops:
            functions.append(
                SassFunction(name=name if name is not None else "<unnamed>", arch=arch, instructions=ops)
            )

    for line in text.splitlines():
        match = _ARCH.match(line)
        if match:
            current_arch = match.group(1)
            continue
        match = _FUNCTION.match(line)
        if match:
            close()
            name, arch, ops = match.group(1), current_arch, []
            continue
        match = _INSTRUCTION.match(line)
        if match:
            if name is None and not ops:
                arch = current_arch
            ops.append(match.group(1))
    close()
    return SassListing(functions=functions)


# -------------------------------------------------------------------------------------------- counters


def counter_verdict(
    signature: Signature | None, before: Mapping[str, float | None], after: Mapping[str, float | None]
) -> SassVerdict | None:
    """The verdict of ``signature``'s counter rule on two profiles' metric values (``before``: the kernel
    the iteration started from; ``after``: its champion), or None when the method has no counter rule.
    pass: the counter fell to at most ``at_most`` of its value; fail: it did not (never strong: the
    counter is the kernel's, not the method's alone); inconclusive: either value is unknown, or there was
    nothing to remove (0 before)."""
    if signature is None or signature.counters is None:
        return None
    rule = signature.counters
    old, new = before.get(rule.metric), after.get(rule.metric)
    if old is None or new is None:
        missing = "the input kernel's" if old is None else "the champion's"
        status, reason = "inconclusive", f"{rule.metric} unknown in {missing} profile"
    elif old <= 0:
        status, reason = "inconclusive", f"{rule.metric} {old:.4g} -> {new:.4g}: nothing to remove"
    else:
        status = "pass" if new <= rule.at_most * old else "fail"
        reason = f"{rule.metric} {old:.4g} -> {new:.4g} ({new / old:.3g}x): {rule.why}"
    return SassVerdict(method=signature.method, status=status, expected=rule.describe(), reason=reason)


# --------------------------------------------------------------------------------------------- loading


def _build(document: dict[str, Any], where: str) -> SignatureSet:
    signatures = {}
    for method, entry in document["signatures"].items():
        if "not_applicable" in entry:
            counters = entry.get("counters")
            signatures[method] = Signature(
                method=method,
                not_applicable=entry["not_applicable"],
                note=entry.get("note", ""),
                counters=None if counters is None else CounterRule(**counters),
            )
            continue
        rules = {}
        for arch, rule in entry["patterns"].items():
            mode = "any" if "any" in rule else "all"
            for index, pattern in enumerate(rule[mode]):
                path = f"$.signatures['{method}'].patterns['{arch}'].{mode}[{index}]"
                try:
                    compiled = re.compile(pattern)
                except re.error as error:
                    raise ConfigError(f"{where}: {path}: not a valid regex {pattern!r}: {error}") from error
                if compiled.search("") is not None:
                    raise ConfigError(
                        f"{where}: {path}: {pattern!r} matches the empty mnemonic, so it "
                        "would pass on any listing"
                    )
            rules[arch] = SassRule(arch=arch, mode=mode, patterns=rule[mode], relative=rule["relative"])
        signatures[method] = Signature(method=method, rules=rules, note=entry.get("note", ""))
    return SignatureSet(schema_version=document["schema_version"], signatures=signatures, source=where)


def load_signatures(path: Path | str | None = None) -> SignatureSet:
    """The SASS signatures at ``path`` (default: the packaged ones), validated against the v1 schema.
    Raises ConfigError naming the file and the JSON path of the first problem."""
    document, where = load_document(
        path, default=SIGNATURES_FILE, schema_file=SCHEMA_FILE, what="SASS signatures"
    )
    return _build(document, where)


# --------------------------------------------------------------------------------------------- verifying


def _arch_keys(arch: str) -> list[str]:
    """ "sm_90a" -> ["sm_90a", "sm_90", "default"]; "90" -> ["sm_90", "default"]."""
    arch = str(arch).strip().lower()
    if re.fullmatch(r"\d{2,3}[af]?", arch):
        arch = f"sm_{arch}"
    keys = [arch]
    stripped = re.sub(r"(?<=\d)[af]$", "", arch)
    if stripped != arch:
        keys.append(stripped)
    keys.append("default")
    return keys


def _matches(pattern: str, counts: Counter[str]) -> dict[str, int]:
    compiled = re.compile(pattern)
    return {op: n for op, n in counts.items() if compiled.search(op)}


def _check(method: str, rule: SassRule, listing: SassListing, baseline: SassListing | None) -> SassVerdict:
    counts = listing.counts()
    per_pattern = [_matches(pattern, counts) for pattern in rule.patterns]
    matched: dict[str, int] = {}
    for found in per_pattern:
        matched.update(found)
    matched_pairs = tuple(sorted(matched.items(), key=lambda item: (-item[1], item[0])))
    expected = rule.describe()

    def verdict(status: str, reason: str) -> SassVerdict:
        return SassVerdict(
            method=method, status=status, matched=matched_pairs, expected=expected, reason=reason
        )

    if rule.relative == "present":
        if rule.mode == "any":
            if matched:
                return verdict("pass", f"found {sum(matched.values())} matching instruction(s)")
            return verdict("fail", "no instruction matches")
        missing = [p for p, found in zip(rule.patterns, per_pattern, strict=True) if not found]
        if missing:
            return verdict("fail", f"nothing matches {', '.join(missing)}")
        return verdict("pass", "every pattern matches")

    if baseline is None:
        return verdict("inconclusive", f"rule {rule.relative} needs a baseline listing and none was given")
    if baseline.empty:
        return verdict("inconclusive", "the baseline listing has no instructions")
    base_counts = baseline.counts()
    more = rule.relative == "more_than_baseline"
    if rule.mode == "any":
        pairs = [
            (
                " | ".join(rule.patterns),
                sum(matched.values()),
                sum(_union(rule.patterns, base_counts).values()),
            )
        ]
    else:
        pairs = [
            (p, sum(found.values()), sum(_matches(p, base_counts).values()))
            for p, found in zip(rule.patterns, per_pattern, strict=True)
        ]
    ok = all((cand > base) if more else (cand < base) for _, cand, base in pairs)
    detail = "; ".join(f"{p}: {cand} vs baseline {base}" for p, cand, base in pairs)
    return verdict("pass" if ok else "fail", detail)


def _union(patterns: Iterable[str], counts: Counter[str]) -> dict[str, int]:
    union: dict[str, int] = {}
    for pattern in patterns:
        union.update(_matches(pattern, counts))
    return union


def verify(
    listing: SassListing,
    method_ids: Sequence[str],
    *,
    arch: str,
    baseline: SassListing | None = None,
    signatures: SignatureSet | None = None,
) -> list[SassVerdict]:
    """One verdict per method id, in order (see the module docstring for the rules)."""
    signatures = signatures or load_signatures()
    verdicts = []
    for method in method_ids:
        signature = signatures.get(method)
        if signature is None:
            verdicts.append(
                SassVerdict(
                    method=method,
                    status="inconclusive",
                    expected="",
                    reason=f"no SASS signature for {method!r} in {signatures.source}",
                )
            )
            continue
        if signature.not_applicable is not None:
            verdicts.append(
                SassVerdict(
                    method=method,
                    status="not_applicable",
                    expected="no SASS footprint",
                    reason=signature.not_applicable,
                )
            )
            continue
        rule = signature.rule_for(arch)
        if rule is None:
            verdicts.append(
                SassVerdict(
                    method=method,
                    status="inconclusive",
                    expected=f"a rule for {arch} (have: {', '.join(sorted(signature.rules))})",
                    reason=f"no SASS rule for arch {arch!r} (looked up {', '.join(_arch_keys(arch))})",
                )
            )
            continue
        if listing.empty:
            verdicts.append(
                SassVerdict(
                    method=method,
                    status="inconclusive",
                    expected=rule.describe(),
                    reason="the listing has no instructions (no device code parsed)",
                )
            )
            continue
        verdicts.append(_check(method, rule, listing, baseline))
    return verdicts


# --------------------------------------------------------------------------------------------- files


def disassemble_file(path: str | Path, cuobjdump: str | None = None) -> str:
    """``cuobjdump --dump-sass`` of a cubin or shared library, with the given cuobjdump (a backend may
    ship its own: the Triton wheel does) or the CUDA toolkit's. SassToolError if it is missing or fails."""
    if Path(path).is_file() and Path(path).stat().st_size == 0:
        raise SassInputError(f"{path} is empty: no device code to disassemble", hint=f"give {INPUT_FORMS}")
    tool = cuobjdump or find_tool("cuobjdump")
    if tool is None:
        raise SassToolError(
            "cuobjdump not found (no backend offered one, and none in the CUDA toolkit)",
            hint="install the CUDA toolkit, or pip install triton (its wheel ships cuobjdump)",
        )
    # an argv list, no shell (cuobjdump uses none either); absolute, so that a name starting with "-" is
    # never read as an option
    command = [tool, "--dump-sass", str(Path(path).absolute())]
    completed = run_in_group(command, timeout_s=CUOBJDUMP_TIMEOUT_S, stdin=subprocess.DEVNULL)
    if completed.returncode is None:
        # said as Python says it: "[Errno 2] No such file ...", "Command [...] timed out after 60 seconds"
        why = (
            subprocess.TimeoutExpired(command, CUOBJDUMP_TIMEOUT_S)
            if completed.timed_out
            else completed.error.partition(": ")[2]
        )
        raise SassToolError(f"cannot run {tool} on {path}: {why}")
    said = (completed.stderr or completed.stdout).strip()
    if completed.returncode != 0 and _NO_DEVICE_CODE.search(said):
        raise SassInputError(
            f"{path} holds no device code ({Path(tool).name} says: {said.splitlines()[0][:300]})",
            hint=f"give {INPUT_FORMS}",
        )
    if completed.returncode != 0:
        raise SassToolError(
            f"{tool} --dump-sass {path} failed (exit {completed.returncode}): "
            f"{(completed.stderr or completed.stdout).strip()[:500]}"
        )
    return completed.stdout


# What ``verify_artifact`` disassembles: an Artifact (a backend's), a path (a loose file).
T = TypeVar("T")


def verify_artifact(
    disassemble: Callable[[T], str],
    target: T,
    methods: Sequence[str],
    arch: str,
    baseline: T | None = None,
    *,
    signatures: SignatureSet | None = None,
) -> list[SassVerdict]:
    """Disassemble ``target`` (and ``baseline``) with ``disassemble`` and verify; a missing or failing
    disassembler gives "tool_error" verdicts, never a pass. A baseline with no device code of its own
    (``NoOwnDeviceCode``) is no baseline: the relative rules are inconclusive and say why."""
    try:
        listing = parse_sass(disassemble(target))
        unread = ""
        try:
            reference = parse_sass(disassemble(baseline)) if baseline is not None else None
        except NoOwnDeviceCode as error:
            reference, unread = None, f"the baseline has no listing: {error}"
    except SassToolError as error:
        return [
            SassVerdict(method=method, status="tool_error", expected="", reason=str(error))
            for method in methods
        ]
    verdicts = verify(listing, methods, arch=arch, baseline=reference, signatures=signatures)
    if not unread:
        return verdicts
    return [
        attrs.evolve(v, reason=f"{v.reason}; {unread}") if v.status == "inconclusive" else v for v in verdicts
    ]


def verify_file(
    path: str | Path,
    methods: Sequence[str],
    arch: str,
    baseline_path: str | Path | None = None,
    *,
    signatures: SignatureSet | None = None,
    cuobjdump: str | None = None,
) -> list[SassVerdict]:
    """``verify_artifact`` over files disassembled with ``cuobjdump`` (or the CUDA toolkit's)."""
    return verify_artifact(
        lambda path: disassemble_file(path, cuobjdump),
        path,
        methods,
        arch,
        baseline_path,
        signatures=signatures,
    )
