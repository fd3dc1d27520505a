"""What runs on the Ray nodes: one bench actor per GPU, and the build task.

``BenchActor`` is created by ``kopt_ray.pool.RayPool`` with ``num_gpus=1``, so Ray has set its
CUDA_VISIBLE_DEVICES to its GPU alone before this code runs. It hosts one
``kopt_core.bench.executor.WorkerExecutor``, whose bench worker subprocess inherits that pin: every
guarantee of the local executor holds inside the actor (a crash, a hang or a record that is not ok costs
that command and that bench worker, which is replaced; results come back as records, never as
exceptions). A command names its files by content key (``kopt_ray.content``): the actor unpacks each into
this node's cache unless it is there already, fetching the bundle from Ray's object store only then, and
benches the copies.

An actor that dies (its process killed, its node's raylet gone) would leave its bench worker behind, in a
process group of its own. Before each command the actor records that worker in
``<tempdir>/kopt-ray-workers/<actor id>.<pid>.pid``; its watchdog kills that group as soon as the actor
is gone, and the actor restarted by Ray (the id survives the restart) does the same with every file an
earlier life left, before anything else (``kopt_ray.watchdog``). A lost command's worker does not go on
holding the GPU.

``build_on_node`` is the build task: it unpacks the candidate's folder into a scratch folder of the node,
compiles it with the backend's compile hook (as ``kopt_core.steps.build_pool`` does for one job) and
returns the outcome's data and the artifact packed under its content key.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, cast

import attrs

from kopt_core.bench.executor import PairedPlan, WorkerExecutor
from kopt_core.errors import KoptError
from kopt_core.records import Artifact, BenchRequest, BenchResult, Candidate, Toolchain, from_data, to_data
from kopt_core.records.paired import PairedMeasurement
from kopt_ray import content
from kopt_ray.watchdog import kill_recorded, note, sweep

WORKERS_DIR_NAME = "kopt-ray-workers"
BUILDS_DIR_NAME = "kopt-ray-builds"
# A bundle the driver names: (content key, top-level name, [ObjectRef of its tar]). The ref travels inside
# a list, so Ray hands it over unresolved and the node fetches the bytes only when its cache lacks the key.
Packed = tuple[str, str, list[Any]]
# A file of a bench request: (its driver path, then the bundle that holds it).
Bundle = tuple[str, str, str, list[Any]]


class BenchActor:
    """One GPU of the cluster: a WorkerExecutor and this node's artifact cache; see the module docstring.
    Ray runs one method at a time on it (max_concurrency 1), so its bench worker runs one command at a
    time, as the pool's contract says."""

    def __init__(self) -> None:
        import ray

        actor_id = ray.get_runtime_context().get_actor_id() or "actor"
        workers = Path(tempfile.gettempdir()) / WORKERS_DIR_NAME
        workers.mkdir(parents=True, exist_ok=True)
        self._pidfile = workers / f"{actor_id}.{os.getpid()}.pid"
        # An earlier life of this actor (Ray restarted it: the id is the same) may have left its worker.
        earlier = [kill_recorded(path) for path in workers.glob(f"{actor_id}.*.pid") if path != self._pidfile]
        self.reaped = next((pid for pid in earlier if pid is not None), None)
        sweep(workers)
        self._watchdog = subprocess.Popen(
            [sys.executable, "-m", "kopt_ray.watchdog", str(self._pidfile)],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # outlives a SIGKILL of this process and of its group
        )
        self._executor = WorkerExecutor()

    # -- what the pool asks ------------------------------------------------------------------------
    def where(self) -> dict[str, Any]:
        """Where this actor runs: node id and address, its GPU ids as Ray gave them, its pid, the
        architecture of its GPU ("" when nvidia-smi lists none) and whether it reaped a lost worker."""
        import ray

        from kopt_core.hardware import arch_for_capability, detect_gpus

        gpus, _ = detect_gpus(timeout_s=10.0)
        return {
            "node_id": ray.get_runtime_context().get_node_id(),
            "node_ip": ray.util.get_node_ip_address(),
            "gpu_ids": [str(gpu) for gpu in ray.get_gpu_ids()],
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "pid": os.getpid(),
            "arch": arch_for_capability(gpus[0].capability) if gpus else "",
            "reaped": self.reaped,
            "cache": str(content.cache_root()),
        }

    def worker_pid(self) -> int | None:
        """The pid of the current bench worker (None when none runs)."""
        return self._executor.pid

    def cached(self) -> list[str]:
        """The content keys this node's cache holds."""
        return sorted(
            entry.name for entry in content.cache_root().iterdir() if not entry.name.startswith(".")
        )

    def start(self) -> None:
        self._executor.start()
        self._note_worker()

    def bench(
        self, request_data: dict[str, Any], bundles: list[Bundle]
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Bench the request (driver paths) on this node's copies of ``bundles``; (the result's data with the
        driver's paths, what became of each path: its copy and whether it was fetched or reused)."""
        request = from_data(request_data, BenchRequest)
        copies, placement = self._materialize(bundles)
        self._ready()
        moved = content.relocate_request(request, copies)
        result: BenchResult = self._executor.bench(moved)
        return to_data(content.restore_result(result, request, moved)), placement

    def paired(
        self, a_data: dict[str, Any], b_data: dict[str, Any], plan_data: dict[str, Any], bundles: list[Bundle]
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        a, b = from_data(a_data, BenchRequest), from_data(b_data, BenchRequest)
        copies, placement = self._materialize(bundles)
        self._ready()
        moved = (content.relocate_request(a, copies), content.relocate_request(b, copies))
        measurement: PairedMeasurement = self._executor.paired(*moved, from_data(plan_data, PairedPlan))
        return to_data(content.restore_measurement(measurement, (a, b), moved)), placement

    def close(self) -> None:
        """Stop the bench worker (an idle one exits at the end of its input) and the watchdog."""
        self._executor.close()
        self._pidfile.unlink(missing_ok=True)
        if self._watchdog.stdin is not None:
            self._watchdog.stdin.close()  # nothing recorded any more: it exits
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._watchdog.wait(timeout=5)

    # -- files -------------------------------------------------------------------------------------
    def _materialize(self, bundles: list[Bundle]) -> tuple[dict[str, str], dict[str, Any]]:
        """Each bundle in this node's cache (fetched only when missing): driver path -> copy, and the
        placement the pool reports ({driver path: {key, copy, fetched}})."""
        import ray

        copies: dict[str, str] = {}
        placement: dict[str, Any] = {}
        for original, key, name, holder in bundles:
            fetched = False
            if not content.is_cached(key, name):
                data = cast(bytes, ray.get(holder[0]))
                content.unpack_into_cache(key, name, data)
                fetched = True
            copy = str(content.cached_path(key, name))
            copies[original] = copy
            placement[original] = {"key": key, "copy": copy, "fetched": fetched}
        return copies, placement

    # -- the bench worker's pid --------------------------------------------------------------------
    def _ready(self) -> None:
        """Start the bench worker now (a no-op when it runs) and note its pid before the command."""
        self._executor.start()
        self._note_worker()

    def _note_worker(self) -> None:
        note(self._pidfile, self._executor.pid)


# ------------------------------------------------------------------------------------------ builds


def _where_in(path: Path, folder: Path) -> str | None:
    try:
        return path.resolve().relative_to(folder.resolve()).as_posix()
    except ValueError:
        return None


def build_on_node(
    key: str,
    candidate_data: dict[str, Any],
    folder: Packed,
    inside: str,
    toolchain_data: dict[str, Any] | None,
    arch: str | None,
) -> tuple[dict[str, Any], bytes]:
    """Build one job on this node: (what became of it, the artifact packed; b"" when it failed).

    The candidate's folder (``folder``: its content key, name and tar; ``inside``: the kernel's path
    within it, "" when the bundle is the kernel file alone) is unpacked into a scratch folder of its own;
    the backend's compile hook builds into ``<scratch>/build/<key>/``. The toolchain is the driver's when
    given, else ``Toolchain(arch=arch)`` when ``arch`` is given and the backend needs a GPU,
    else the one ``kopt_core.steps.bench.target_arch`` picks on this node. The returned data says where
    the artifact was (``source``: in the candidate's folder, ``build``: in the build folder, ``elsewhere``:
    a backend's own cache) and its path relative to there, so the driver can put it at the matching place.
    Like ``kopt_core.steps.build_pool``, a KoptError is the candidate's failure in the plugin's words and
    any other exception is too, with its type."""
    import ray

    from kopt_core.backends import backend_hooks
    from kopt_core.plugins import get_plugin_manager
    from kopt_core.steps.bench import target_arch

    _, name, holder = folder
    scratch = Path(tempfile.mkdtemp(prefix=f"{key}-", dir=_builds_root()))
    started = time.perf_counter()
    outcome: dict[str, Any] = {"artifact": None, "error": None, "seconds": 0.0}
    try:
        source_root = scratch / "src"
        source_root.mkdir()
        with tempfile.TemporaryDirectory(dir=scratch) as staging:
            data = cast(bytes, ray.get(holder[0]))
            content.unpack_into_cache("bundle", name, data, root=Path(staging))
            os.rename(Path(staging) / "bundle" / name, source_root / name)
        kernel = source_root / name / inside if inside else source_root / name
        copy_folder = kernel.parent  # the copy of the folder the kernel sits in on the driver
        candidate = attrs.evolve(from_data(candidate_data, Candidate), path=str(kernel))
        try:
            pm = get_plugin_manager()
            hooks = backend_hooks(pm, candidate.backend)
            if toolchain_data is not None:
                toolchain = from_data(toolchain_data, Toolchain)
            elif arch and hooks.info.needs_gpu:
                toolchain = Toolchain(arch=arch)
            else:
                toolchain = Toolchain(arch=target_arch(hooks.info))
            build_dir = scratch / "build" / key
            build_dir.mkdir(parents=True)
            artifact: Artifact = hooks.compile(candidate, build_dir, toolchain)
        except KoptError as exc:
            outcome["error"] = str(exc)
            return outcome, b""
        except Exception as exc:
            outcome["error"] = f"{type(exc).__name__}: {exc}"
            return outcome, b""
        built = Path(artifact.path)
        relative = _where_in(built, copy_folder)
        if relative is not None:
            place = "source"
        elif (relative := _where_in(built, build_dir)) is not None:
            place = "build"
        else:
            place, relative = "elsewhere", built.name
        outcome.update(
            artifact=to_data(artifact),
            place=place,
            relative=relative,
            name=built.name,
            key=content.content_key(built),
            copy_folder=str(copy_folder),
        )
        return outcome, content.pack(built)
    finally:
        outcome["seconds"] = time.perf_counter() - started
        shutil.rmtree(scratch, ignore_errors=True)


def _builds_root() -> Path:
    root = Path(tempfile.gettempdir()) / BUILDS_DIR_NAME
    root.mkdir(parents=True, exist_ok=True)
    return root


__all__ = ["BenchActor", "Bundle", "Packed", "build_on_node"]
