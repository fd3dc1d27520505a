"""The near sampler: after the prior's seeds, a CUTLASS search proposes the unevaluated configuration
nearest its best so far (kopt_cutlass.configs.config_distance and nearest, CutlassGemmSpace.near), and
the study engine enqueues those proposals (run_study's ``near``), marked ``near best``, with TPE once the
neighbourhood has nothing left. Checked on cutlass_library's real listing and on the engine with an
in-memory Optuna storage and objectives whose times are known."""

from __future__ import annotations

import itertools
import math

import optuna
import pytest

from kopt_core.errors import ConfigError
from kopt_core.records.search import Parameter, Space, TrialOutcome, TrialRecord
from kopt_core.search.study import NEAR, PRIOR, run_study
from kopt_core.search.variants import config_id

pytest.importorskip("cutlass_library")

from kopt_cutlass.configs import (  # noqa: E402
    config_distance,
    effective_epilogue_schedule,
    effective_kernel_schedule,
    enumerate_sm90_gemms,
    filter_for_problem,
    nearest,
    seed_order,
)
from kopt_cutlass.search import CONFIG_PARAMETER, CutlassGemmSpace  # noqa: E402

SHAPE = (8192, 8192, 2048)


@pytest.fixture(scope="module")
def configs():
    return filter_for_problem(enumerate_sm90_gemms("f16", "f16", "f16", "f32", "tn"), *SHAPE)


@pytest.fixture(scope="module")
def space(configs) -> CutlassGemmSpace:
    declaration = "// kopt:cutlass_gemm a=f16 b=f16 c=f16 acc=f32 layout=tn"
    parameter = Parameter(CONFIG_PARAMETER, tuple(config.id for config in configs), 1)
    declared = Space(source="gemm.cu", kind="cu_defines", parameters=(parameter,), text=declaration)
    return CutlassGemmSpace(space=declared, declaration=declaration, configs=configs, problem=SHAPE)


def test_the_distance_is_zero_only_for_the_same_kernel_symmetric_and_counts_octaves(configs):
    def built(config):  # what CUTLASS builds: an Auto schedule is the schedule it resolves to
        return (
            config.tile_shape,
            config.cluster_shape,
            effective_kernel_schedule(config),
            effective_epilogue_schedule(config),
            config.tile_scheduler,
            config.stages,
            config.alignment_a,
            config.alignment_b,
        )

    for a, b in itertools.combinations(configs, 2):
        assert config_distance(a, b) == config_distance(b, a) >= 0
        assert (config_distance(a, b) == 0) == (built(a) == built(b))
    for config in configs:
        assert config_distance(config, config) == 0
    by = {
        (c.tile_shape, c.cluster_shape, c.kernel_schedule, c.epilogue_schedule, c.tile_scheduler): c
        for c in configs
    }
    coop = "cutlass::gemm::KernelTmaWarpSpecializedCooperative"
    epilogue = "cutlass::epilogue::TmaWarpSpecializedCooperative"
    wide = by[((128, 256, 64), (2, 1, 1), coop, epilogue, "")]
    tall = by[((256, 128, 64), (2, 1, 1), coop, epilogue, "")]
    square = by[((128, 128, 64), (2, 1, 1), coop, epilogue, "")]
    streamed = by[((128, 256, 64), (2, 1, 1), coop, epilogue, "cutlass::gemm::StreamKScheduler")]
    assert config_distance(wide, square) == 1  # one octave of N
    assert config_distance(wide, tall) == 2  # an octave of M and one of N
    assert config_distance(wide, streamed) == 1  # one schedule
    assert math.isclose(config_distance(tall, square), 1)


def test_nearest_follows_the_prior_until_a_best_then_the_closest_unevaluated(configs):
    ranked = seed_order(configs, *SHAPE)
    assert nearest(ranked, None) == ranked[0]
    assert nearest(ranked, None, [ranked[0].id, ranked[1].id]) == ranked[2]
    best = ranked[5]
    chosen = nearest(ranked, best, [best.id])
    others = [config for config in ranked if config.id != best.id]
    assert config_distance(best, chosen) == min(config_distance(best, config) for config in others)
    # ties go to the prior's order
    tied = [config for config in others if config_distance(best, config) == config_distance(best, chosen)]
    assert chosen == tied[0]
    assert nearest(ranked, best, [config.id for config in ranked]) is None
    assert nearest((), None) is None


def record(number: int, config: dict, value_ms: float | None) -> TrialRecord:
    status = "ok" if value_ms is not None else "failed"
    return TrialRecord(number, config_id(config), config, status, value_ms, "", 1.0)


def test_the_cutlass_space_proposes_near_its_fastest_passing_configuration(space):
    ranked = seed_order(space.configs, *SHAPE)
    point = {CONFIG_PARAMETER: ranked[0].id}
    assert space.near((), set()) == point  # nothing evaluated: the prior's first
    assert space.near((), {config_id(point)}) == {CONFIG_PARAMETER: ranked[1].id}  # in flight: skipped
    slow, fast, broken = ranked[0], ranked[7], ranked[3]
    evaluated = (
        record(0, {CONFIG_PARAMETER: slow.id}, 2.0),
        record(1, {CONFIG_PARAMETER: fast.id}, 1.0),
        record(2, {CONFIG_PARAMETER: broken.id}, None),  # failed: never the anchor, never again
    )
    proposed = space.config_of(space.near(evaluated, set()))
    done = {slow.id, fast.id, broken.id}
    assert proposed.id not in done
    left = [config for config in space.configs if config.id not in done]
    assert config_distance(fast, proposed) == min(config_distance(fast, config) for config in left)
    everything = tuple(record(n, {CONFIG_PARAMETER: c.id}, 1.0 + n) for n, c in enumerate(space.configs))
    assert space.near(everything, set()) is None


def test_the_study_evaluates_the_seeds_then_the_neighbourhood_marked_near_best(space):
    ranked = seed_order(space.configs, *SHAPE)
    fastest = ranked[10]  # neither a seed nor the prior's next: found only by walking near the best

    def time_of(config) -> float:
        return 1.0 + config_distance(fastest, config)  # the nearer the fastest, the faster

    order: list[str] = []

    def objective(point):
        order.append(point[CONFIG_PARAMETER])
        return TrialOutcome("ok", time_of(space.config_of(point)))

    seeds = tuple({CONFIG_PARAMETER: config.id} for config in ranked[:3])
    result = run_study(
        space.space,
        objective,
        storage=optuna.storages.InMemoryStorage(),
        study_name="near",
        trials=12,
        first=seeds,
        progress=False,
        near=space.near,
    )
    assert order[:3] == [config.id for config in ranked[:3]]
    assert [t.seeded for t in result.trials] == [PRIOR] * 3 + [NEAR] * 9
    assert result.seeded == 3  # only the prior's seeds count as seeds
    # every proposal after the seeds is the nearest unevaluated configuration to the best at that moment
    for n in range(3, 12):
        so_far = result.trials[:n]
        best = space.config_of(min(so_far, key=lambda t: (t.value_ms, t.number)).config)
        left = [c for c in space.configs if c.id not in {t.config["config"] for t in so_far}]
        proposed = space.config_of(result.trials[n].config)
        assert config_distance(best, proposed) == min(config_distance(best, c) for c in left)
    assert result.best(1)[0].config == {CONFIG_PARAMETER: fastest.id}


def test_tpe_proposes_once_the_neighbourhood_is_exhausted_and_auto_is_tpe_without_one():
    values = tuple(range(6))
    declared = Space(source="k.py", kind="py_assignments", parameters=(Parameter("X", values, 1),), text="")

    def two_only(evaluated, busy):  # a neighbourhood of two configurations
        seen = {t.config_id for t in evaluated} | busy
        left = [{"X": x} for x in (4, 5) if config_id({"X": x}) not in seen]
        return left[0] if left else None

    def objective(point):
        return TrialOutcome("ok", float(point["X"]))

    result = run_study(
        declared, objective, storage=optuna.storages.InMemoryStorage(), study_name="n", trials=5,
        progress=False, near=two_only, sampler="near",
    )  # fmt: skip
    assert [t.config for t in result.trials[:2]] == [{"X": 4}, {"X": 5}]
    assert [t.seeded for t in result.trials] == [NEAR, NEAR, "", "", ""]
    plain = run_study(
        declared, objective, storage=optuna.storages.InMemoryStorage(), study_name="a", trials=3,
        progress=False,
    )  # fmt: skip
    assert [t.seeded for t in plain.trials] == ["", "", ""]  # auto without a neighbourhood: TPE
    assert plain.sampler == "tpe" and result.sampler == "near"  # the sampler that proposed, recorded
    grid = run_study(
        declared, objective, storage=optuna.storages.InMemoryStorage(), study_name="g", sampler="grid",
        progress=False, near=two_only,
    )  # fmt: skip
    assert len(grid.trials) == 6 and all(t.seeded == "" for t in grid.trials)  # grid is grid
    with pytest.raises(ConfigError, match="the near sampler needs a space"):
        run_study(
            declared, objective, storage=optuna.storages.InMemoryStorage(), study_name="x",
            sampler="near", trials=1, progress=False,
        )  # fmt: skip
