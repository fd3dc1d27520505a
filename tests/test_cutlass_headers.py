"""CUTLASS header discovery: search order, accepted layouts, rejections and versions (CPU only)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kopt_cutlass.headers import CutlassHeaders, compile_flags, discover, find_cutlass, read_version


def make_tree(
    include: Path, *, cute: bool = True, version: tuple[int, int, int] | None = (3, 5, 1), util: bool = False
) -> Path:
    """A fake CUTLASS include directory at ``include`` (and tools/util/include beside it if ``util``)."""
    (include / "cutlass").mkdir(parents=True)
    (include / "cutlass" / "cutlass.h").write_text("#pragma once\n")
    if cute:
        (include / "cute").mkdir()
        (include / "cute" / "tensor.hpp").write_text("#pragma once\n")
    if version is not None:
        major, minor, patch = version
        (include / "cutlass" / "version.h").write_text(
            "#pragma once\n"
            f"#define CUTLASS_MAJOR {major}\n"
            f"#define CUTLASS_MINOR {minor}\n"
            f"#define CUTLASS_PATCH {patch}\n"
            "#ifdef CUTLASS_VERSIONS_GENERATED\n#define CUTLASS_BUILD 0\n#endif\n"
        )
    if util:
        (include.parent / "tools" / "util" / "include" / "cutlass" / "util").mkdir(parents=True)
    return include


@pytest.fixture
def places(tmp_path):
    """One valid tree per source, with different versions so the winner is identifiable."""
    repo = tmp_path / "repo"
    make_tree(repo / "include", version=(3, 1, 0), util=True)
    incdir = make_tree(tmp_path / "incdir" / "include", version=(3, 2, 0))
    wheel = tmp_path / "site-packages"
    make_tree(wheel / "cutlass_library" / "source" / "include", version=(3, 3, 0), util=True)
    system = make_tree(tmp_path / "usr-local" / "cutlass-3.4" / "include", version=(3, 4, 0))
    empty_wheel = tmp_path / "empty-site-packages"
    empty_wheel.mkdir()
    return {
        "repo": repo,
        "incdir": incdir,
        "wheel": wheel,
        "empty_wheel": empty_wheel,
        "system": system,
        "globs": (str(tmp_path / "usr-local" / "cutlass*" / "include"),),
    }


def test_cutlass_path_beats_everything(places):
    env = {"CUTLASS_PATH": str(places["repo"]), "CUTLASS_INCLUDE_DIR": str(places["incdir"])}
    found = find_cutlass(env, wheel_root=places["wheel"], system_globs=places["globs"])
    assert found == CutlassHeaders(
        include_dir=str(places["repo"] / "include"),
        util_include_dir=str(places["repo"] / "tools" / "util" / "include"),
        source="CUTLASS_PATH",
        version="3.1.0",
    )


def test_include_dir_beats_wheel(places):
    env = {"CUTLASS_INCLUDE_DIR": str(places["incdir"])}
    found = find_cutlass(env, wheel_root=places["wheel"], system_globs=places["globs"])
    assert found is not None
    assert (found.source, found.version) == ("CUTLASS_INCLUDE_DIR", "3.2.0")
    assert found.include_dir == str(places["incdir"])
    assert found.util_include_dir is None


def test_wheel_beats_system(places):
    found = find_cutlass({}, wheel_root=places["wheel"], system_globs=places["globs"])
    assert found is not None
    assert found.source == "nvidia-cutlass wheel"
    assert found.version == "3.3.0"
    assert found.include_dir == str(places["wheel"] / "cutlass_library" / "source" / "include")
    util = places["wheel"] / "cutlass_library" / "source" / "tools" / "util" / "include"
    assert found.util_include_dir == str(util)


def test_system_glob_last(places):
    found = find_cutlass({}, wheel_root=places["empty_wheel"], system_globs=places["globs"])
    assert found is not None
    assert (found.source, found.version, found.include_dir) == ("system", "3.4.0", str(places["system"]))


def test_system_glob_newest_first(tmp_path):
    base = tmp_path / "usr-local"
    for version in ((3, 4, 0), (3, 10, 0), (3, 9, 2)):
        make_tree(base / f"cutlass-{version[0]}.{version[1]}" / "include", version=version)
    globs = (str(base / "cutlass*" / "include"),)
    found = find_cutlass({}, wheel_root=tmp_path / "nowheel", system_globs=globs)
    assert found is not None and found.version == "3.10.0"


def test_system_globs_in_order(tmp_path):
    opt = make_tree(tmp_path / "opt" / "cutlass" / "include", version=(3, 6, 0))
    globs = (str(tmp_path / "usr-local" / "cutlass*" / "include"), str(opt))
    headers, searched = discover({}, wheel_root=tmp_path / "nowheel", system_globs=globs)
    assert headers is not None and headers.include_dir == str(opt) and headers.source == "system"
    assert any("no match" in line for line in searched)


def test_cutlass_path_as_include_dir(places):
    env = {"CUTLASS_PATH": str(places["incdir"])}
    found = find_cutlass(env, wheel_root=places["wheel"], system_globs=places["globs"])
    assert found is not None
    assert (found.source, found.version) == ("CUTLASS_PATH", "3.2.0")
    assert found.include_dir == str(places["incdir"])


def test_cutlass_path_as_repo_root(places):
    env = {"CUTLASS_PATH": str(places["repo"])}
    found = find_cutlass(env, wheel_root=places["empty_wheel"], system_globs=())
    assert found is not None
    assert found.include_dir == str(places["repo"] / "include")


def test_tree_without_cute_is_rejected(tmp_path, places):
    old = make_tree(tmp_path / "cutlass2" / "include", cute=False, version=(2, 11, 0))
    headers, searched = discover(
        {"CUTLASS_PATH": str(old.parent)}, wheel_root=places["wheel"], system_globs=places["globs"]
    )
    assert headers is not None and headers.source == "nvidia-cutlass wheel"  # fell through to the next place
    rejected = [line for line in searched if line.startswith("CUTLASS_PATH=") and str(old) + ":" in line]
    assert len(rejected) == 1
    assert "cute/tensor.hpp" in rejected[0] and "CuTe" in rejected[0]


def test_nothing_found_lists_every_place(tmp_path):
    bogus = tmp_path / "no-such-dir"
    empty_wheel = tmp_path / "site-packages"
    empty_wheel.mkdir()
    opt = tmp_path / "opt" / "cutlass" / "include"
    globs = (str(tmp_path / "usr-local" / "cutlass*" / "include"), str(opt))
    env = {"CUTLASS_PATH": str(bogus), "CUTLASS_INCLUDE_DIR": ""}
    headers, searched = discover(env, wheel_root=empty_wheel, system_globs=globs)
    assert headers is None
    assert find_cutlass(env, wheel_root=empty_wheel, system_globs=globs) is None
    text = "\n".join(searched)
    assert f"CUTLASS_PATH={bogus}: {bogus / 'include'}: does not exist" in text
    assert "CUTLASS_INCLUDE_DIR: not set" in text
    assert str(empty_wheel / "cutlass_library" / "source" / "include") in text
    assert f"{globs[0]}: no match" in text
    assert f"{opt}: does not exist" in text
    assert not any(": found (" in line for line in searched)


def test_missing_cutlass_h_is_rejected(tmp_path):
    inc = tmp_path / "include"
    (inc / "cute").mkdir(parents=True)
    (inc / "cute" / "tensor.hpp").write_text("")
    env = {"CUTLASS_INCLUDE_DIR": str(inc)}
    headers, searched = discover(env, wheel_root=tmp_path / "w", system_globs=())
    assert headers is None
    assert f"CUTLASS_INCLUDE_DIR={inc}: {inc}: missing cutlass/cutlass.h" in searched


def test_version_parsing(tmp_path):
    assert read_version(make_tree(tmp_path / "a" / "include", version=(4, 0, 12))) == "4.0.12"
    assert read_version(make_tree(tmp_path / "b" / "include", version=None)) == ""
    found = find_cutlass(
        {"CUTLASS_INCLUDE_DIR": str(tmp_path / "b" / "include")}, wheel_root=tmp_path / "w", system_globs=()
    )
    assert found is not None and found.version == ""


def test_compile_flags(places):
    env = {"CUTLASS_PATH": str(places["repo"])}
    with_util = find_cutlass(env, wheel_root=places["wheel"], system_globs=())
    assert compile_flags(with_util) == [
        "--expt-relaxed-constexpr",
        "-DNDEBUG",
        f"-I{places['repo'] / 'include'}",
        f"-I{places['repo'] / 'tools' / 'util' / 'include'}",
    ]
    env = {"CUTLASS_INCLUDE_DIR": str(places["incdir"])}
    no_util = find_cutlass(env, wheel_root=places["wheel"], system_globs=())
    assert compile_flags(no_util) == ["--expt-relaxed-constexpr", "-DNDEBUG", f"-I{places['incdir']}"]
