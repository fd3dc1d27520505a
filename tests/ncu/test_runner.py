"""The runner's decisions: which bundle, when to fall back to the light set, what counts as failure.

ncu itself runs in the GPU tests (tests/gpu/test_profile_gpu.py); here a stand-in script plays ncu's
exit codes so that each branch of the decision is exercised on a CPU machine."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from kopt_core.errors import HardwareError
from kopt_core.ncu.runner import choose_bundle, ncu_command, profile
from kopt_core.records import ProfileLaunch, ProfileOptions

# Behaves like ncu for the runner: writes the --export report unless told to fail for the set it got.
STAND_IN = """#!/bin/sh
set_name=""; export_base=""
while [ $# -gt 0 ]; do
  case "$1" in
    --set) set_name="$2"; shift 2 ;;
    --export) export_base="$2"; shift 2 ;;
    --metrics) metrics="$2"; shift 2 ;;
    *) shift ;;
  esac
done
echo "==PROF== set $set_name"
echo "==PROF== probe $PROBE"
[ -n "$metrics" ] && [ "$EXTRAS" = "reject" ] && { echo "==ERROR== Failed to find metric"; exit 1; }
case "$set_name" in
  full) [ "$FULL" = "exit11" ] && exit 11; [ "$FULL" = "hang" ] && sleep 30 ;;
  basic) [ "$LIGHT" = "fail" ] && { echo "==ERROR== ERR_NVGPUCTRPERM"; exit 1; } ;;
esac
printf 'report' > "$export_base.ncu-rep"
"""


@pytest.fixture
def fake_ncu(tmp_path) -> str:
    path = tmp_path / "ncu"
    path.write_text(STAND_IN)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def test_bundle_follows_the_kernel_duration():
    assert choose_bundle(3.1)[0] == "full"
    assert choose_bundle(10.0)[0] == "light"
    assert choose_bundle(None)[0] == "full"


def test_command_profiles_one_range_without_touching_clocks(tmp_path):
    command = ncu_command("ncu", "full", tmp_path / "r", ["python", "-m", "x"], "regex:gemm")
    assert command[:5] == ["ncu", "--profile-from-start", "off", "--clock-control", "none"]
    assert command[command.index("--set") + 1] == "full"
    assert command[command.index("--kernel-name") + 1] == "regex:gemm"
    assert command[-3:] == ["python", "-m", "x"]


def test_success_records_one_attempt(fake_ncu, tmp_path):
    report, bundle, reason, attempts = profile(["true"], tmp_path, ncu=fake_ncu, duration_ms=2.0)
    assert report.is_file() and bundle == "full" and len(attempts) == 1
    assert attempts[0].returncode == 0 and "2 ms < 10 ms" in reason
    assert "==PROF== set full" in Path(attempts[0].log).read_text()


def test_replay_failure_falls_back_to_light(fake_ncu, tmp_path, monkeypatch):
    monkeypatch.setenv("FULL", "exit11")
    report, bundle, reason, attempts = profile(["true"], tmp_path, ncu=fake_ncu, duration_ms=2.0)
    assert bundle == "light" and report.is_file()
    assert [(a.bundle, a.returncode) for a in attempts] == [("full", 11), ("light", 0)]
    assert "exited 11" in reason


def test_full_timeout_falls_back_to_light(fake_ncu, tmp_path, monkeypatch):
    monkeypatch.setenv("FULL", "hang")
    options = ProfileOptions(full_timeout_s=1)
    report, bundle, _, attempts = profile(["true"], tmp_path, options=options, ncu=fake_ncu, duration_ms=2.0)
    assert bundle == "light" and attempts[0].timed_out and attempts[0].seconds < 10


def test_a_forced_bundle_is_used_whatever_the_duration(fake_ncu, tmp_path):
    options = ProfileOptions(bundle="light")
    report, bundle, reason, attempts = profile(
        ["true"], tmp_path, options=options, ncu=fake_ncu, duration_ms=2.0
    )
    assert report.is_file() and bundle == "light" and reason == "forced: light"
    assert [a.bundle for a in attempts] == ["light"]


def test_the_launch_gives_the_kernel_filter_and_the_environment(fake_ncu, tmp_path):
    launch = ProfileLaunch(kernel_filter="regex:gemm", env={"PROBE": "from the backend"})
    _, _, _, attempts = profile(["true"], tmp_path, launch=launch, ncu=fake_ncu, duration_ms=2.0)
    command = list(attempts[0].command)
    assert command[command.index("--kernel-name") + 1] == "regex:gemm"
    assert "==PROF== probe from the backend" in Path(attempts[0].log).read_text()


def test_options_refuse_a_bundle_ncu_has_no_set_for():
    with pytest.raises(ValueError):
        ProfileOptions(bundle="auto")
    assert ProfileOptions().bundle is None and ProfileOptions().ncu_timeout_s == 600.0


def test_no_report_is_a_hardware_failure(fake_ncu, tmp_path, monkeypatch):
    monkeypatch.setenv("FULL", "exit11")
    monkeypatch.setenv("LIGHT", "fail")
    with pytest.raises(HardwareError, match="ERR_NVGPUCTRPERM") as info:
        profile(["true"], tmp_path, ncu=fake_ncu, duration_ms=2.0)
    assert info.value.exit_code == 3


def test_missing_ncu_is_a_hardware_failure(tmp_path, monkeypatch):
    monkeypatch.setattr("kopt_core.ncu.runner.find_ncu", lambda: None)
    with pytest.raises(HardwareError, match="ncu"):
        profile(["true"], tmp_path)


def test_the_light_bundle_adds_the_registry_metrics_the_basic_set_lacks(tmp_path):
    from kopt_core.ncu.runner import light_extra_metrics

    light = ncu_command("ncu", "light", tmp_path / "r", ["x"], None)
    assert light[light.index("--set") + 1] == "basic"
    assert light[light.index("--metrics") + 1] == ",".join(light_extra_metrics())
    assert "--metrics" not in ncu_command("ncu", "full", tmp_path / "r", ["x"], None)
    assert "--metrics" not in ncu_command("ncu", "light", tmp_path / "r", ["x"], None, light_extras=False)


def test_every_light_metric_is_a_name_real_ncu_reported_on_the_h200():
    """A name ncu does not know fails the whole run: each one must be in the real ncu 2025.3.1 full-set
    report of the H200; SASS-patched and section-derived metrics stay out (cost, not collectable)."""
    import csv
    import io

    from kopt_core.ncu.metrics import load_registry
    from kopt_core.ncu.runner import light_extra_metrics

    raw = (Path(__file__).parents[1] / "fixtures/h200/naive_full_raw.csv").read_text()
    rows = "".join(line for line in raw.splitlines(True) if line.startswith('"'))
    header = set(next(csv.reader(io.StringIO(rows))))
    names = light_extra_metrics()
    assert names and [n for n in names if n not in header] == []
    assert not [n for n in names if n.startswith(("sass__", "smsp__sass_", "derived__"))]
    # what the triggers of the warp-state and memory-workload methods read
    for wanted in (
        "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio",
        "smsp__average_warp_latency_per_inst_issued.ratio",
        "l1tex__t_sector_hit_rate.pct",
        "lts__t_sector_hit_rate.pct",
        "dram__bytes_read.sum",
        "dram__bytes_write.sum",
        "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
        "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
        "smsp__warps_eligible.avg.per_cycle_active",
    ):
        assert wanted in names, wanted
    basic_only = {n for s in load_registry().metrics if "basic" in s.sets for n in s.ncu_names[:1]}
    assert not basic_only & set(names)  # the basic set has them already


def test_light_extras_that_ncu_refuses_are_retried_with_the_basic_set(fake_ncu, tmp_path, monkeypatch):
    monkeypatch.setenv("EXTRAS", "reject")
    report, bundle, reason, attempts = profile(["true"], tmp_path, ncu=fake_ncu, duration_ms=20.0)
    assert report.is_file() and bundle == "light"
    assert [(a.bundle, a.returncode, "--metrics" in a.command) for a in attempts] == [
        ("light", 1, True),
        ("light", 0, False),
    ]
    assert "retried with the basic set alone" in reason


def test_a_light_run_that_fails_without_extras_too_is_a_hardware_failure(fake_ncu, tmp_path, monkeypatch):
    monkeypatch.setenv("LIGHT", "fail")
    with pytest.raises(HardwareError, match="ERR_NVGPUCTRPERM"):
        profile(["true"], tmp_path, ncu=fake_ncu, duration_ms=20.0)
    assert len(list(tmp_path.glob("ncu_*.log"))) == 1  # one log per bundle, the retry rewrote it
