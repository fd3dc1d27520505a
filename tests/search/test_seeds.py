"""Seeds a kernel declares (`// kopt:seed` lines, `kopt_seeds`): read from the source, checked against
its space, evaluated first as the space's prior, then the near sampler walks from the best so far one
value at a time (kopt_core.search.variants.DeclaredSpace.prior and near)."""

from __future__ import annotations

import optuna
import pytest

from kopt_core.errors import ConfigError
from kopt_core.records.search import TrialOutcome, TrialRecord
from kopt_core.search.study import NEAR, PRIOR, run_study
from kopt_core.search.variants import NEAR_SCAN, DeclaredSpace, config_id, declared_space, point_distance

CU = """// kopt:space BM = [32, 64, 128]
// kopt:space BK = [8, 16]
// kopt:space MODE = [fast, exact]
// kopt:constraint BM * BK <= 1024
// kopt:seed BM=128 BK=8 MODE=fast
// kopt:seed BM=32 BK=16 MODE=exact  // the careful one
#ifndef BM
#define BM 32
#endif
#ifndef BK
#define BK 8
#endif
#ifndef MODE
#define MODE fast
#endif
extern "C" void solve(const float* x, float* y, int N) { (void)x; (void)y; (void)N; (void)(BM + BK); }
"""

PY = """kopt_space = {"CHUNK": [256, 1024, 4096], "ROUNDS": [1, 2, 3]}
kopt_constraint = "CHUNK * ROUNDS <= 8192"
kopt_seeds = [
    {"CHUNK": 1024, "ROUNDS": 2},
    {"CHUNK": 4096, "ROUNDS": 1},
]
CHUNK = 256
ROUNDS = 1
"""


def test_cu_seeds_are_read_typed_in_order_and_are_the_prior(tmp_path):
    kernel = tmp_path / "k.cu"
    kernel.write_text(CU)
    source = declared_space(kernel, CU)
    assert source.seeds == ({"BM": 128, "BK": 8, "MODE": "fast"}, {"BM": 32, "BK": 16, "MODE": "exact"})
    assert source.prior(1) == source.seeds[:1] and source.prior(5) == source.seeds and source.prior(0) == ()


def test_py_seeds_are_read_in_order_and_are_the_prior(tmp_path):
    kernel = tmp_path / "k.py"
    source = declared_space(kernel, PY)
    assert source.seeds == ({"CHUNK": 1024, "ROUNDS": 2}, {"CHUNK": 4096, "ROUNDS": 1})


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("// kopt:seed BM=128 BK=8", r"k\.cu:5: seed .*missing \['MODE'\]"),
        ("// kopt:seed BM=128 BK=8 MODE=fast TM=4", r"k\.cu:5: seed .*unknown \['TM'\]"),
        ("// kopt:seed BM=256 BK=8 MODE=fast", r"k\.cu:5: seed .*BM=256 is not one of its values"),
        ("// kopt:seed BM=128 BK=16 MODE=fast", r"k\.cu:5: seed .* violates constraint `BM \* BK <= 1024`"),
        ("// kopt:seed BM=32 BK=16 MODE=exact", r"k\.cu:6: seed .* is given twice"),
        ("// kopt:seed BM128", r"k\.cu:5: `BM128` is not NAME=VALUE"),
        ("// kopt:seed BM=32 BM=64", r"k\.cu:5: BM is given twice"),
        ("// kopt:seed", r"k\.cu:5: an empty `// kopt:seed` line"),
    ],
)
def test_a_bad_cu_seed_is_refused_at_its_line(tmp_path, line, message):
    text = CU.replace("// kopt:seed BM=128 BK=8 MODE=fast", line)
    with pytest.raises(ConfigError, match=message):
        declared_space(tmp_path / "k.cu", text)


@pytest.mark.parametrize(
    ("seeds", "message"),
    [
        ('kopt_seeds = {"CHUNK": 1024}', r"k\.py:3: kopt_seeds must be a list of dicts"),
        ("kopt_seeds = [1024]", r"k\.py:3: a kopt_seeds entry must be a dict"),
        ('kopt_seeds = [{"CHUNK": 4096, "ROUNDS": 3}]', r"k\.py:3: seed .* violates constraint"),
        ('kopt_seeds = [{"CHUNK": 1024}]', r"k\.py:3: seed .*missing \['ROUNDS'\]"),
        ('kopt_seeds = [{"CHUNK": 1024, "ROUNDS": 2.0}]', r"k\.py:3: seed .*ROUNDS=2\.0 is not one of"),
    ],
)
def test_a_bad_py_seed_is_refused_at_its_line(tmp_path, seeds, message):
    text = PY.replace(PY[PY.index("kopt_seeds") : PY.index("]\n", PY.index("kopt_seeds")) + 1], seeds)
    with pytest.raises(ConfigError, match=message):
        declared_space(tmp_path / "k.py", text)


def record(number: int, config: dict, value_ms: float | None) -> TrialRecord:
    status = "ok" if value_ms is not None else "failed"
    return TrialRecord(number, config_id(config), config, status, value_ms, "", 1.0)


def test_near_gives_the_seeds_until_one_passes_then_the_nearest_unevaluated_point(tmp_path):
    source = declared_space(tmp_path / "k.py", PY)
    first, second = source.seeds
    assert source.near((), set()) == first
    assert source.near((), {config_id(first)}) == second
    assert source.near((record(0, first, None),), set()) == second  # a failed seed is no anchor
    # from the best, CHUNK=1024 ROUNDS=2: one step away are (256, 2), (4096, 2), (1024, 1) and (1024, 3)
    evaluated = (record(0, first, 1.0), record(1, second, 2.0))
    proposed = source.near(evaluated, set())
    assert point_distance(source.space, first, proposed) == 1 and source.space.is_valid(proposed)
    assert proposed == {"CHUNK": 256, "ROUNDS": 2}  # ties to the earlier point of the space's order
    assert source.near(evaluated, {config_id(proposed)}) == {"CHUNK": 1024, "ROUNDS": 1}
    everything = tuple(record(n, p, 1.0 + n) for n, p in enumerate(source.space.valid_points()))
    assert source.near(everything, set()) is None
    assert DeclaredSpace(source.space).near is None  # no seeds, no neighbourhood: auto is TPE


def test_point_distance_counts_steps_in_each_declared_list(tmp_path):
    space = declared_space(tmp_path / "k.py", PY).space
    assert point_distance(space, {"CHUNK": 256, "ROUNDS": 1}, {"CHUNK": 4096, "ROUNDS": 2}) == 3
    assert point_distance(space, {"CHUNK": 1024, "ROUNDS": 2}, {"CHUNK": 1024, "ROUNDS": 2}) == 0


def test_a_space_too_large_to_scan_is_walked_one_and_two_steps_from_the_best(tmp_path):
    values = ", ".join(str(v) for v in range(100))
    text = f'kopt_space = {{"A": [{values}], "B": [{values}], "C": [{values}]}}\n'
    text += 'kopt_seeds = [{"A": 50, "B": 50, "C": 50}]\nA = 0\nB = 0\nC = 0\n'
    source = declared_space(tmp_path / "big.py", text)
    assert source.space.size > NEAR_SCAN
    best = {"A": 50, "B": 50, "C": 50}
    seen = [record(0, best, 1.0)]
    for number in range(1, 7):  # the six points one step away come first, then two steps
        proposed = source.near(seen, set())
        assert point_distance(source.space, best, proposed) == 1
        seen.append(record(number, proposed, 2.0))
    assert point_distance(source.space, best, source.near(seen, set())) == 2


def test_a_study_evaluates_the_seeds_then_walks_from_the_best(tmp_path):
    source = declared_space(tmp_path / "k.py", PY)
    fastest = {"CHUNK": 256, "ROUNDS": 3}  # no seed: reached by walking from the best seed

    def objective(point):
        return TrialOutcome("ok", 1.0 + point_distance(source.space, fastest, point))

    result = run_study(
        source.space,
        objective,
        storage=optuna.storages.InMemoryStorage(),
        study_name="seeds",
        trials=5,
        first=source.prior(2),
        progress=False,
        near=source.near,
    )
    assert [t.config for t in result.trials[:2]] == list(source.seeds)
    assert [t.seeded for t in result.trials] == [PRIOR, PRIOR, NEAR, NEAR, NEAR]
    assert result.best(1)[0].config == fastest
