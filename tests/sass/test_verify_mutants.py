"""kopt_core.sass.verify where the other SASS tests left mutants alive: every verdict field (method,
expected, reason) for every status, a verdict per method even after an unknown, not-applicable, rule-less
or empty case, the architecture lookup from the short forms, the signature file's loader, the parser's
unnamed and arch-less functions, and the file path through a stand-in cuobjdump (a script that prints the
real H200 listings of tests/fixtures/h200) that fails, hangs or finds no device code.

Signature sets are built here, not read from the packaged file, so that what is asserted is this module's
behaviour and not the current contents of references/sass_signatures.json."""

from __future__ import annotations

import importlib
import json
import os
import stat
import sys
from pathlib import Path

import pytest

from kopt_core.errors import ConfigError
from kopt_core.sass import load_signatures, parse_sass, verify

# by name: the package's ``verify`` (the function) hides the submodule from attribute access
sv = importlib.import_module("kopt_core.sass.verify")

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "h200"
NAIVE = (FIXTURES / "naive.sass.txt").read_text()  # 29 FFMA, 58 LDG.E, no tensor cores
CUTLASS = (FIXTURES / "cutlass_tc_sm80tc_on_sm90.sass.txt").read_text()  # 64 HMMA.16816.F32, 128 FFMA
TRITON_MM = (FIXTURES / "triton_matmul_sm90.sass.txt").read_text()  # 8 HGMMA.64x128x16.F32, sm_90a


def rule(mode: str, *patterns: str, relative: str = "present", arch: str = "default") -> sv.SassRule:
    return sv.SassRule(arch=arch, mode=mode, patterns=patterns, relative=relative)


def signatures(**rules_by_method: dict[str, sv.SassRule] | str) -> sv.SignatureSet:
    """A signature set: method (with "_" for ".") -> {arch: rule}, or a string: why not applicable."""
    built = {}
    for key, value in rules_by_method.items():
        method = key.replace("__", ".")
        if isinstance(value, str):
            built[method] = sv.Signature(method=method, not_applicable=value)
        else:
            built[method] = sv.Signature(method=method, rules=value)
    return sv.SignatureSet(schema_version=1, signatures=built, source="sigs.json")


# ------------------------------------------------------------------------------------ what is expected


@pytest.mark.parametrize(
    ("made", "expected"),
    [
        (rule("any", "^HMMA", "^HGMMA"), "[default] an instruction matching ^HMMA or ^HGMMA"),
        (rule("any", "^HMMA"), "[default] an instruction matching ^HMMA"),
        (rule("all", "^LDGSTS"), "[default] an instruction matching ^LDGSTS"),
        (
            rule("all", "^LDGSTS", "^LDSM", arch="sm_80"),
            "[sm_80] instructions matching each of ^LDGSTS and ^LDSM",
        ),
        (
            rule("any", "^FFMA", "^HMMA", relative="more_than_baseline"),
            "[default] more instructions matching ^FFMA or ^HMMA than the baseline",
        ),
        (
            rule("all", "^BRA", "^BSSY", relative="fewer_than_baseline", arch="sm_90"),
            "[sm_90] fewer instructions matching ^BRA and ^BSSY than the baseline",
        ),
    ],
)
def test_a_rule_describes_what_it_expects(made, expected):
    assert made.describe() == expected


def test_a_checked_verdict_carries_what_was_expected():
    sigs = signatures(compute__tensor_core={"default": rule("any", "^HMMA", "^HGMMA")})
    (passed,) = verify(parse_sass(CUTLASS), ["compute.tensor_core"], arch="sm_90", signatures=sigs)
    assert passed == sv.SassVerdict(
        method="compute.tensor_core",
        status="pass",
        matched=(("HMMA.16816.F32", 64),),
        expected="[default] an instruction matching ^HMMA or ^HGMMA",
        reason="found 64 matching instruction(s)",
    )
    (failed,) = verify(parse_sass(NAIVE), ["compute.tensor_core"], arch="sm_90", signatures=sigs)
    assert (failed.expected, failed.reason) == (passed.expected, "no instruction matches")


# --------------------------------------------------------------------------- one verdict per method


def test_every_method_gets_its_verdict_whatever_the_ones_before_it_got():
    sigs = signatures(
        memory__kernel_fusion="fuses kernels: nothing to see in one kernel's SASS",
        compute__wgmma={"sm_90": rule("any", "^HGMMA", arch="sm_90")},
        compute__tensor_core={"default": rule("any", "^HMMA", "^HGMMA")},
    )
    methods = ["compute.magic", "memory.kernel_fusion", "compute.wgmma", "compute.tensor_core"]
    verdicts = verify(parse_sass(CUTLASS), methods, arch="sm_80", signatures=sigs)
    assert verdicts == [
        sv.SassVerdict(
            method="compute.magic",
            status="inconclusive",
            expected="",
            reason="no SASS signature for 'compute.magic' in sigs.json",
        ),
        sv.SassVerdict(
            method="memory.kernel_fusion",
            status="not_applicable",
            expected="no SASS footprint",
            reason="fuses kernels: nothing to see in one kernel's SASS",
        ),
        sv.SassVerdict(
            method="compute.wgmma",
            status="inconclusive",
            expected="a rule for sm_80 (have: sm_90)",
            reason="no SASS rule for arch 'sm_80' (looked up sm_80, default)",
        ),
        sv.SassVerdict(
            method="compute.tensor_core",
            status="pass",
            matched=(("HMMA.16816.F32", 64),),
            expected="[default] an instruction matching ^HMMA or ^HGMMA",
            reason="found 64 matching instruction(s)",
        ),
    ]


def test_an_empty_listing_is_inconclusive_for_every_method_and_says_what_was_expected():
    sigs = signatures(
        compute__tensor_core={"default": rule("any", "^HMMA")},
        memory__cp_async={"default": rule("all", "^LDGSTS", "^LDGDEPBAR")},
    )
    empty = parse_sass("Fatbin ptx code:\n================\narch = sm_90\n")
    assert verify(empty, ["compute.tensor_core", "memory.cp_async"], arch="sm_90", signatures=sigs) == [
        sv.SassVerdict(
            method="compute.tensor_core",
            status="inconclusive",
            expected="[default] an instruction matching ^HMMA",
            reason="the listing has no instructions (no device code parsed)",
        ),
        sv.SassVerdict(
            method="memory.cp_async",
            status="inconclusive",
            expected="[default] instructions matching each of ^LDGSTS and ^LDGDEPBAR",
            reason="the listing has no instructions (no device code parsed)",
        ),
    ]


def test_a_rule_less_arch_lists_every_rule_there_is_and_every_key_looked_up():
    sigs = signatures(
        compute__wgmma={
            "sm_90a": rule("any", "^HGMMA", arch="sm_90a"),
            "sm_100": rule("any", "^UTCHMMA", arch="sm_100"),
        }
    )
    (verdict,) = verify(parse_sass(TRITON_MM), ["compute.wgmma"], arch="sm_89", signatures=sigs)
    assert (verdict.expected, verdict.reason) == (
        "a rule for sm_89 (have: sm_100, sm_90a)",
        "no SASS rule for arch 'sm_89' (looked up sm_89, default)",
    )
    (verdict,) = verify(parse_sass(TRITON_MM), ["compute.wgmma"], arch="90f", signatures=sigs)
    assert verdict.reason == "no SASS rule for arch '90f' (looked up sm_90f, sm_90, default)"


# ------------------------------------------------------------------------------ architecture lookup


@pytest.mark.parametrize(
    ("arch", "keys"),
    [
        ("sm_90a", ["sm_90a", "sm_90", "default"]),
        ("90a", ["sm_90a", "sm_90", "default"]),
        ("90", ["sm_90", "default"]),
        (" SM_90A ", ["sm_90a", "sm_90", "default"]),
        ("100F", ["sm_100f", "sm_100", "default"]),
        (90, ["sm_90", "default"]),
        ("sm_80", ["sm_80", "default"]),
        ("9", ["9", "default"]),  # not an arch number: looked up as given
    ],
)
def test_the_arch_is_looked_up_exact_then_without_its_suffix_then_default(arch, keys):
    assert sv._arch_keys(arch) == keys


def test_a_short_arch_finds_the_rule_of_its_sm_key():
    wgmma = rule("any", "^HGMMA", arch="sm_90")
    signature = sv.Signature(method="compute.wgmma", rules={"sm_90": wgmma})
    assert signature.rule_for("90a") is wgmma
    assert signature.rule_for("90") is wgmma
    assert signature.rule_for("80") is None


# ------------------------------------------------------------------------------------------ loading


def write_signatures(path: Path, entries: dict) -> Path:
    path.write_text(json.dumps({"schema_version": 1, "signatures": entries}))
    return path


def test_a_loaded_file_keeps_each_method_its_note_and_where_it_came_from(tmp_path):
    path = write_signatures(
        tmp_path / "sigs.json",
        {
            "memory.kernel_fusion": {"not_applicable": "fuses two kernels into one", "note": "see fusion"},
            "latency.grid_sizing": {"not_applicable": "a launch parameter, not code"},
            "compute.tensor_core": {
                "patterns": {
                    "sm_90": {"any": ["^HGMMA", "^HMMA"], "relative": "present"},
                    "default": {"all": ["^X"], "relative": "more_than_baseline"},
                },
                "note": "mma.sync or wgmma",
            },
        },
    )
    loaded = load_signatures(path)
    assert (loaded.schema_version, loaded.source) == (1, str(path))
    assert loaded.signatures == {
        "memory.kernel_fusion": sv.Signature(
            method="memory.kernel_fusion", not_applicable="fuses two kernels into one", note="see fusion"
        ),
        "latency.grid_sizing": sv.Signature(
            method="latency.grid_sizing", not_applicable="a launch parameter, not code", note=""
        ),
        "compute.tensor_core": sv.Signature(
            method="compute.tensor_core",
            rules={
                "sm_90": sv.SassRule(arch="sm_90", mode="any", patterns=("^HGMMA", "^HMMA")),
                "default": sv.SassRule(
                    arch="default", mode="all", patterns=("^X",), relative="more_than_baseline"
                ),
            },
            note="mma.sync or wgmma",
        ),
    }
    # "^X" matches "XXXX" but not the empty mnemonic: it is a valid pattern


def test_an_invalid_regex_names_the_file_the_method_the_arch_and_the_position(tmp_path):
    path = write_signatures(
        tmp_path / "sigs.json",
        {
            "compute.wgmma": {
                "patterns": {"sm_90": {"all": ["^HGMMA", "(^HMMA"], "relative": "present"}},
                "note": "wgmma",
            }
        },
    )
    with pytest.raises(ConfigError) as raised:
        load_signatures(path)
    assert raised.value.message == (
        f"{path}: $.signatures['compute.wgmma'].patterns['sm_90'].all[1]: not a valid regex '(^HMMA': "
        "missing ), unterminated subpattern at position 0"
    )


def test_a_pattern_that_matches_the_empty_mnemonic_is_refused_with_its_path(tmp_path):
    path = write_signatures(
        tmp_path / "sigs.json",
        {
            "compute.fp8": {
                "patterns": {"default": {"any": ["^QGMMA", "F8|"], "relative": "present"}},
                "note": "fp8",
            }
        },
    )
    with pytest.raises(ConfigError) as raised:
        load_signatures(path)
    assert raised.value.message == (
        f"{path}: $.signatures['compute.fp8'].patterns['default'].any[1]: 'F8|' matches the empty mnemonic, "
        "so it would pass on any listing"
    )


def test_an_unreadable_or_malformed_signature_file_says_what_it_is(tmp_path):
    missing = tmp_path / "nowhere.json"
    with pytest.raises(ConfigError, match=rf"^cannot read the SASS signatures {missing}: "):
        load_signatures(missing)
    bad = write_signatures(tmp_path / "bad.json", {"compute.fp8": {"note": "neither patterns nor a reason"}})
    with pytest.raises(ConfigError) as raised:
        load_signatures(bad)
    assert raised.value.message.startswith(f"{bad}: $.signatures['compute.fp8']")
    assert raised.value.hint.startswith("the SASS signatures must follow ")


# ------------------------------------------------------------------------------------------ parsing


def test_instructions_before_any_function_header_form_an_unnamed_function_with_the_first_arch():
    text = (
        "\tcode for sm_80\n"
        "        /*0000*/                   MOV R1, c[0x0][0x28] ;\n"
        "\tcode for sm_90\n"
        "        /*0010*/                   EXIT ;\n"
    )
    assert parse_sass(text).functions == (
        sv.SassFunction(name="<unnamed>", arch="sm_80", instructions=("MOV", "EXIT")),
    )


def test_a_function_takes_the_arch_it_was_declared_under_and_none_without_one():
    text = (
        "\t\tFunction : first\n"
        "        /*0000*/                   NOP ;\n"
        "\tcode for sm_90a\n"
        "\t\tFunction : second\n"
        "\tcode for sm_100\n"
        "        /*0000*/                   EXIT ;\n"
        "\t\tFunction : empty\n"
    )
    assert parse_sass(text).functions == (
        sv.SassFunction(name="first", arch="", instructions=("NOP",)),
        sv.SassFunction(name="second", arch="sm_90a", instructions=("EXIT",)),
        sv.SassFunction(name="empty", arch="sm_100", instructions=()),
    )


# -------------------------------------------------------------------------- verify_artifact and files


RELATIVE = signatures(
    compute__register_tiling={"default": rule("any", "^FFMA", "^HMMA", relative="more_than_baseline")},
    memory__magic={
        "default": rule("any", r"^LDG\.E\.64$")
    },  # not a packaged method: only these signatures know it
)


def test_an_artifact_and_its_baseline_are_both_disassembled_and_verified_with_the_given_signatures():
    texts = {"candidate": CUTLASS, "baseline": NAIVE}
    asked = []

    def disassemble(target):
        asked.append(target)
        return texts[target]

    verdicts = sv.verify_artifact(
        disassemble,
        "candidate",
        ["compute.register_tiling", "memory.magic"],
        "sm_90",
        "baseline",
        signatures=RELATIVE,
    )
    assert asked == ["candidate", "baseline"]
    assert [(v.status, v.reason) for v in verdicts] == [
        ("pass", "^FFMA | ^HMMA: 192 vs baseline 29"),
        ("pass", "found 2 matching instruction(s)"),
    ]


def test_an_artifact_without_a_baseline_leaves_a_relative_rule_inconclusive():
    asked = []

    def disassemble(target):
        asked.append(target)
        return CUTLASS

    (verdict,) = sv.verify_artifact(
        disassemble, "candidate", ["compute.register_tiling"], "sm_90", signatures=RELATIVE
    )
    assert asked == ["candidate"]
    assert verdict.status == "inconclusive"


def test_a_disassembler_that_fails_gives_a_tool_error_verdict_per_method():
    def disassemble(target):
        if target == "baseline":
            raise sv.SassToolError("cuobjdump: cannot open baseline")
        return CUTLASS

    verdicts = sv.verify_artifact(
        disassemble,
        "candidate",
        ["compute.register_tiling", "memory.magic"],
        "sm_90",
        "baseline",
        signatures=RELATIVE,
    )
    assert verdicts == [
        sv.SassVerdict(method=m, status="tool_error", expected="", reason="cuobjdump: cannot open baseline")
        for m in ("compute.register_tiling", "memory.magic")
    ]


def test_a_baseline_without_device_code_of_its_own_is_no_baseline_but_the_candidate_is_still_checked():
    def disassemble(target):
        if target == "baseline":
            raise sv.NoOwnDeviceCode("baseline.py runs only libtorch's kernels")
        return CUTLASS

    relative, present = sv.verify_artifact(
        disassemble,
        "candidate",
        ["compute.register_tiling", "memory.magic"],
        "sm_90",
        "baseline",
        signatures=RELATIVE,
    )
    assert relative.status == "inconclusive"
    assert relative.reason.endswith("; the baseline has no listing: baseline.py runs only libtorch's kernels")
    assert (present.status, present.reason) == ("pass", "found 2 matching instruction(s)")
    # the same failure on the candidate leaves nothing to check
    with_none = sv.verify_artifact(
        lambda target: disassemble("baseline"),
        "candidate",
        ["memory.magic"],
        "sm_90",
        "baseline",
        signatures=RELATIVE,
    )
    assert [v.status for v in with_none] == ["tool_error"]


def fake_cuobjdump(folder: Path, body: str) -> str:
    """An executable standing in for cuobjdump: ``--dump-sass FILE`` runs ``body`` (Python) with the file
    as ``path``."""
    script = folder / "cuobjdump"
    script.write_text(f"#!{sys.executable}\nimport sys, time\npath = sys.argv[2]\n{body}\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


@pytest.fixture
def cat(tmp_path) -> str:
    """A cuobjdump that prints the file it is given (the "cubins" below hold listings)."""
    return fake_cuobjdump(tmp_path, "sys.stdout.write(open(path).read())")


def test_a_file_and_its_baseline_file_go_through_cuobjdump_with_the_given_signatures(tmp_path, cat):
    (tmp_path / "candidate.cubin").write_text(CUTLASS)
    (tmp_path / "baseline.cubin").write_text(NAIVE)
    verdicts = sv.verify_file(
        tmp_path / "candidate.cubin",
        ["compute.register_tiling", "memory.magic"],
        "sm_90",
        tmp_path / "baseline.cubin",
        signatures=RELATIVE,
        cuobjdump=cat,
    )
    assert [(v.status, v.reason) for v in verdicts] == [
        ("pass", "^FFMA | ^HMMA: 192 vs baseline 29"),
        ("pass", "found 2 matching instruction(s)"),
    ]
    assert sv.disassemble_file(tmp_path / "candidate.cubin", cat) == CUTLASS


def test_a_one_byte_file_is_given_to_cuobjdump_but_an_empty_one_is_bad_input(tmp_path, cat):
    one = tmp_path / "one.cubin"
    one.write_text("\n")
    assert sv.disassemble_file(one, cat) == "\n"
    empty = tmp_path / "empty.cubin"
    empty.write_bytes(b"")
    with pytest.raises(sv.SassInputError) as raised:
        sv.disassemble_file(empty, cat)
    assert (raised.value.message, raised.value.hint) == (
        f"{empty} is empty: no device code to disassemble",
        f"give {sv.INPUT_FORMS}",
    )


def test_the_toolkit_cuobjdump_is_looked_up_by_name_and_its_absence_explained(tmp_path, monkeypatch):
    asked = []

    def find_tool(name):
        asked.append(name)
        return None

    monkeypatch.setattr(sv, "find_tool", find_tool)
    (tmp_path / "k.cubin").write_bytes(b"\x7fELF")
    with pytest.raises(sv.SassToolError) as raised:
        sv.disassemble_file(tmp_path / "k.cubin")
    assert asked == ["cuobjdump"]
    assert (raised.value.message, raised.value.hint) == (
        "cuobjdump not found (no backend offered one, and none in the CUDA toolkit)",
        "install the CUDA toolkit, or pip install triton (its wheel ships cuobjdump)",
    )


def test_a_cuobjdump_that_cannot_start_is_a_tool_error(tmp_path):
    (tmp_path / "k.cubin").write_bytes(b"\x7fELF")
    tool = str(tmp_path / "no-such-cuobjdump")
    with pytest.raises(sv.SassToolError) as raised:
        sv.disassemble_file(tmp_path / "k.cubin", tool)
    assert type(raised.value) is sv.SassToolError
    assert raised.value.message.startswith(f"cannot run {tool} on {tmp_path / 'k.cubin'}: [Errno 2]")


def test_a_cuobjdump_that_hangs_is_stopped_and_is_a_tool_error(tmp_path, monkeypatch):
    monkeypatch.setattr(sv, "CUOBJDUMP_TIMEOUT_S", 0.5)
    tool = fake_cuobjdump(tmp_path, "time.sleep(5)")
    (tmp_path / "k.cubin").write_bytes(b"\x7fELF")
    with pytest.raises(sv.SassToolError) as raised:
        sv.disassemble_file(tmp_path / "k.cubin", tool)
    assert raised.value.message.startswith(f"cannot run {tool} on {tmp_path / 'k.cubin'}: Command ")
    assert raised.value.message.endswith("timed out after 0.5 seconds")


def test_a_file_without_device_code_is_bad_input_with_cuobjdumps_first_line(tmp_path):
    said = "cuobjdump info    : File '" + "x" * 400 + "' does not contain device code"
    tool = fake_cuobjdump(tmp_path, f"sys.stderr.write({said!r} + '\\nsecond line\\n'); sys.exit(1)")
    (tmp_path / "host.so").write_bytes(b"\x7fELF")
    with pytest.raises(sv.SassInputError) as raised:
        sv.disassemble_file(tmp_path / "host.so", tool)
    assert (raised.value.message, raised.value.hint) == (
        f"{tmp_path / 'host.so'} holds no device code (cuobjdump says: {said[:300]})",
        f"give {sv.INPUT_FORMS}",
    )


def test_a_no_device_code_message_on_success_is_output_not_an_error(tmp_path):
    tool = fake_cuobjdump(tmp_path, "print('Function : does not contain device code'); sys.exit(0)")
    (tmp_path / "k.cubin").write_bytes(b"\x7fELF")
    assert sv.disassemble_file(tmp_path / "k.cubin", tool) == "Function : does not contain device code\n"


@pytest.mark.parametrize(
    ("stream", "code"),
    [("stderr", 1), ("stderr", 2), ("stdout", 1)],
)
def test_any_other_failure_is_a_tool_error_with_what_cuobjdump_said(tmp_path, stream, code):
    said = "fatal: " + "y" * 600
    tool = fake_cuobjdump(tmp_path, f"sys.{stream}.write({said!r}); sys.exit({code})")
    (tmp_path / "k.cubin").write_bytes(b"\x7fELF")
    with pytest.raises(sv.SassToolError) as raised:
        sv.disassemble_file(tmp_path / "k.cubin", tool)
    assert type(raised.value) is sv.SassToolError  # not bad input: the tool failed
    assert (
        raised.value.message
        == f"{tool} --dump-sass {tmp_path / 'k.cubin'} failed (exit {code}): {said[:500]}"
    )


def test_cuobjdump_is_given_the_absolute_path(tmp_path, monkeypatch):
    tool = fake_cuobjdump(tmp_path, "print(path)")
    (tmp_path / "-k.cubin").write_bytes(b"\x7fELF")
    monkeypatch.chdir(tmp_path)
    assert sv.disassemble_file("-k.cubin", tool) == f"{os.path.join(tmp_path, '-k.cubin')}\n"
