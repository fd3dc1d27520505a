"""The ``ray`` executor's pool: one bench worker actor per GPU of a Ray cluster (docs/executors.md).

``RayPool`` implements ``kopt_core.bench.pool.WorkerPool``. Entering it connects to the cluster (or starts
one in this process with ``address=local``) and creates ``int(cluster_resources()["GPU"])`` actors
(``kopt_ray.actor.BenchActor``), each with ``num_gpus=1``, so Ray pins each to one GPU; the slots are
``ray:<node address>/gpu<id>``, the ranking worker (slot 0) on the driver's node when it has a GPU. An
actor that does not come up within ``READY_TIMEOUT_S`` (its GPU taken by other work) is left out; none
coming up, like a cluster that cannot be reached or declares no GPU, is a HardwareError (exit 3).
Leaving it closes every actor's bench worker, kills the actors and, when this pool connected this process
to Ray, disconnects (which stops a cluster it started).

What the pool guarantees, beyond what every WorkerPool does:

- Every guarantee of the local executor holds inside each actor (it hosts a WorkerExecutor): a kernel that
  crashes, hangs or is not ok costs that command a failed record and that bench worker, never the actor.
  Such a command is never sent again.
- Files move by content: a bench names driver paths (the artifact, its source, the reference); the pool
  puts each into Ray's object store once per content key, and the actor benches its node's copy, unpacked
  once per node (``kopt_ray.content``). This holds on one machine too: the bench never reads the driver's
  file. The records that come back name the driver's paths.
- A lost actor costs the command in flight, which is sent again: to the same slot once Ray has restarted
  its actor, or to another live worker when it will not come back; at most ``MAX_ATTEMPTS`` sends. When no
  worker is left, a command raises HardwareError (exit 3).
- ``build_all`` builds on the cluster, as Ray tasks of one CPU each, when a worker is on another node
  (``builds=auto``; ``cluster`` always, ``local`` never): each job's kernel folder is shipped by content,
  compiled by its backend's compile hook on the node, and the artifact comes back under its content key. It
  is put on this host where the job would have built it, so the steps find it, and the actors fetch it
  from the object store by that key without another upload. Otherwise the step's own compile pool builds
  (``local(jobs)``).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from attrs import frozen

from kopt_core.bench.executor import PairedPlan
from kopt_core.bench.pool import LocalBuild
from kopt_core.errors import ConfigError, HardwareError
from kopt_core.records import BenchRequest, BenchResult, Toolchain, from_data, to_data
from kopt_core.records.paired import PairedMeasurement
from kopt_ray import content
from kopt_ray.actor import BenchActor, Bundle, Packed, build_on_node

if TYPE_CHECKING:
    from kopt_core.steps.build_pool import BuildJob, BuildOutcome

ADDRESS_HELP = (
    "the Ray cluster: auto (the running one, the default: RAY_ADDRESS, else the one `ray start` started on "
    "this node), ray://HOST:10001 (Ray Client), HOST:6379 (the head node), or local (start a cluster in "
    "this process: one machine, tests)"
)
NUM_GPUS_HELP = (
    "with address=local only: the GPUs the local cluster declares (default: the ones Ray finds); a "
    "machine without GPUs can declare some for tests"
)
NUM_CPUS_HELP = "with address=local only: the CPUs the local cluster declares (default: this machine's)"
BUILDS_HELP = (
    "where builds run: auto (the default: as Ray tasks when a worker is on another node, else in this "
    "host's compile pool), cluster (always as Ray tasks), local (always in this host's compile pool)"
)
OPTIONS = {
    "address": ADDRESS_HELP,
    "num_gpus": NUM_GPUS_HELP,
    "num_cpus": NUM_CPUS_HELP,
    "builds": BUILDS_HELP,
}

MAX_ATTEMPTS = 3  # sends of one command when actors are lost under it
MAX_RESTARTS = 3  # restarts Ray gives each actor
READY_TIMEOUT_S = 180.0  # for the actors to come up, and for a lost one to come back
COMMAND_MARGIN_S = 300.0  # over a command's own timeout: fetching its files, the worker's start and end
BUILD_TASK_RETRIES = 2  # Ray's own retries of a build task whose worker or node died
CLOSE_TIMEOUT_S = 15.0
# The kernel's folder travels with a cluster build when it is at most this big; else the kernel file alone.
FOLDER_MAX_FILES = 1000
FOLDER_MAX_BYTES = 64 << 20

_HOST = r"(?:[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\])"
_ADDRESS = re.compile(rf"(?:ray://{_HOST}(?::(?P<client_port>\d+))?|{_HOST}:(?P<port>\d+))")
_LOST = "the actor died or could not be reached"
CONNECT_TIMEOUT_S = 10.0
LOST_HINT = "check the cluster's nodes (ray status); the command can be run again once they are back"
RAY_CLIENT_PORT = 10001  # Ray Client's port when a ray:// address names none
CLUSTER_HINT = (
    "start a cluster (`ray start --head` on one node, `ray start --address=HEAD:6379` on the others) or "
    "name one with --executor-option address=HOST:6379; address=local starts one in this process"
)


@frozen
class RaySettings:
    """The ``ray`` executor's options, checked (``parse_options``)."""

    address: str = "auto"
    num_gpus: int | None = None
    num_cpus: int | None = None
    builds: str = "auto"


def _count(options: dict[str, str], key: str) -> int | None:
    if key not in options:
        return None
    text = options[key].strip()
    if not text.isdigit() or int(text) < 1:
        raise ConfigError(
            f"executor option {key}={options[key]!r}: give a positive whole number",
            hint=f"{key}: {OPTIONS[key]}",
        )
    return int(text)


def parse_options(options: dict[str, str]) -> RaySettings:
    """The settings ``options`` give; ConfigError (exit 4) naming the option for a bad value."""
    address = options.get("address", "auto").strip()
    if address not in ("auto", "local"):
        match = _ADDRESS.fullmatch(address)
        port = match and (match.group("port") or match.group("client_port"))
        if match is None or (port is not None and not 0 < int(port) < 65536):
            raise ConfigError(
                f"executor option address={address!r} is not a Ray address",
                hint="give auto, local, ray://HOST:10001 or HOST:6379",
            )
    num_gpus, num_cpus = _count(options, "num_gpus"), _count(options, "num_cpus")
    if address != "local" and (num_gpus is not None or num_cpus is not None):
        given = ", ".join(key for key in ("num_gpus", "num_cpus") if key in options)
        raise ConfigError(
            f"executor option {given} only applies to address=local (a cluster declares its own resources)",
            hint="drop it, or declare the GPUs when starting each node: ray start ... --num-gpus=N",
        )
    builds = options.get("builds", "auto").strip()
    if builds not in ("auto", "cluster", "local"):
        raise ConfigError(f"executor option builds={builds!r}: give auto, cluster or local", hint=BUILDS_HELP)
    return RaySettings(address=address, num_gpus=num_gpus, num_cpus=num_cpus, builds=builds)


def check_options(options: dict[str, str]) -> None:
    parse_options(options)


def open_pool(options: dict[str, str]) -> RayPool:
    return RayPool(parse_options(options))


def _check_reachable(address: str) -> None:
    """HardwareError (exit 3) at once when ``address`` names a host and port nothing listens on; Ray
    itself would retry for minutes before it said so."""
    match = _ADDRESS.fullmatch(address)
    if match is None:  # auto or local: Ray finds (or starts) the cluster itself
        return
    rest = address.removeprefix("ray://")
    port = match.group("port") or match.group("client_port")
    host = rest[: -len(port) - 1] if port else rest
    try:
        socket.create_connection(
            (host.strip("[]"), int(port or RAY_CLIENT_PORT)), timeout=CONNECT_TIMEOUT_S
        ).close()
    except OSError as exc:
        raise HardwareError(
            f"could not reach the Ray cluster at address={address}: {exc.strerror or exc}",
            hint=f"is its head node up (ray status on it)? {CLUSTER_HINT}",
        ) from None


def _patience(timeout_s: float) -> float:
    """How long the driver waits for a command whose own timeout is ``timeout_s`` before it takes the
    actor for stuck: twice that (a command sent to another slot's actor may queue behind one of its own)
    and ``COMMAND_MARGIN_S`` for fetching files and starting the bench worker."""
    return 2 * timeout_s + COMMAND_MARGIN_S


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


class RayWorker:
    """Worker ``index`` of a RayPool: the Executor protocol over that slot's actor. ``close`` is a no-op
    (the pool owns the actor). ``last_slot`` is the slot that ran the last command (another one when
    this slot's actor was lost for good), ``last_placement`` what became of its files: for each driver
    path, its content key, its copy on the node and whether the node fetched it (False: reused)."""

    def __init__(self, pool: RayPool, index: int) -> None:
        self._pool, self.index = pool, index
        self.last_slot: int | None = None
        self.last_placement: dict[str, Any] = {}

    @property
    def slot(self) -> str:
        return self._pool.slots[self.index]

    def start(self) -> None:
        self._pool._start_actor(self.index)

    def bench(self, request: BenchRequest) -> BenchResult:
        timeout = _patience(request.options.timeout_s)
        data = self._pool._command(self, "bench", [to_data(request)], content.request_paths(request), timeout)
        return from_data(data, BenchResult)

    def paired(self, a: BenchRequest, b: BenchRequest, plan: PairedPlan) -> PairedMeasurement:
        if a.reference != b.reference or dict(a.dims) != dict(b.dims):  # as the local executor refuses it
            raise ValueError(
                "a paired comparison times both sides on the same buffers: A and B must share their "
                f"reference and dims (A: {a.reference} {dict(a.dims)}; B: {b.reference} {dict(b.dims)})"
            )
        own = plan.timeout_s if plan.timeout_s is not None else max(a.options.timeout_s, b.options.timeout_s)
        paths = tuple(dict.fromkeys([*content.request_paths(a), *content.request_paths(b)]))
        args = [to_data(a), to_data(b), to_data(plan)]
        data = self._pool._command(self, "paired", args, paths, _patience(own))
        return from_data(data, PairedMeasurement)

    def close(self) -> None:
        """The pool's worker: nothing to close here."""

    def __enter__(self) -> RayWorker:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class RayPool:
    """One bench worker actor per GPU of a Ray cluster; see the module docstring."""

    def __init__(self, settings: RaySettings | None = None, *, name: str = "ray") -> None:
        self.name = name
        self.settings = settings or RaySettings()
        self._lock = threading.Lock()
        self._actors: list[Any] = []
        self._places: list[dict[str, Any]] = []
        self._slots: tuple[str, ...] = ()
        self._workers: list[RayWorker] = []
        self._dead: set[int] = set()
        self._refs: dict[str, Any] = {}  # content key -> ObjectRef of its tar
        self._built: dict[str, tuple[str, str]] = {}  # driver path of a cluster build -> (key, name)
        self._pending: list[Any] = []  # refs of start calls, kept until the pool ends
        self._connected = False
        self._build_folder: Path | None = None
        self.driver_node: str | None = None
        self.uploads = 0  # bundles this pool put into the object store (tests, reports)

    # -- WorkerPool --------------------------------------------------------------------------------
    @property
    def slots(self) -> tuple[str, ...]:
        return self._slots

    @property
    def places(self) -> tuple[dict[str, Any], ...]:
        """Where each slot's actor runs (node id and address, GPU ids, pid), as last seen."""
        with self._lock:
            return tuple(dict(place) for place in self._places)

    def actor(self, index: int) -> Any:
        """Slot ``index``'s actor handle (tests and diagnostics; commands go through ``worker``)."""
        return self._actors[index]

    def worker(self, index: int) -> RayWorker:
        return self._workers[index]

    def start(self) -> None:
        for index in range(len(self._actors)):
            self._start_actor(index)

    def __enter__(self) -> RayPool:
        # re-entrant (kopt_core.bench.pool): a step handed an open pool uses it and leaves it open
        self._depth = getattr(self, "_depth", 0) + 1
        if self._depth > 1:
            return self
        try:
            self._connect()
            self._create_actors()
        except BaseException:
            self._depth = 0
            self._teardown()
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._depth -= 1
        if self._depth == 0:
            self._teardown()

    # -- connecting --------------------------------------------------------------------------------
    def _connect(self) -> None:
        import ray

        settings = self.settings
        if not ray.is_initialized():
            _check_reachable(settings.address)
            kwargs: dict[str, Any] = {"address": settings.address, "log_to_driver": False}
            if settings.address == "local":
                kwargs.update(include_dashboard=False, num_gpus=settings.num_gpus, num_cpus=settings.num_cpus)
            try:
                ray.init(**kwargs)
            except Exception as exc:
                raise HardwareError(
                    f"could not connect to the Ray cluster at address={settings.address}: {_first_line(exc)}",
                    hint=CLUSTER_HINT,
                ) from None
            self._connected = True
        with contextlib.suppress(Exception):  # Ray Client has no node of its own
            self.driver_node = ray.get_runtime_context().get_node_id()

    def _create_actors(self) -> None:
        import ray

        resources = ray.cluster_resources()
        count = int(resources.get("GPU", 0))
        if count < 1:
            declared = ", ".join(f"{k}={v:g}" for k, v in sorted(resources.items()) if k in ("CPU", "GPU"))
            raise HardwareError(
                f"the Ray cluster at address={self.settings.address} declares no GPU "
                f"({declared or 'nothing'}): the ray executor puts one worker on each GPU",
                hint="start its nodes where GPUs are visible (ray start ... --num-gpus=N), or use "
                "address=local with num_gpus=N to declare some on this machine",
            )
        remote: Any = ray.remote(BenchActor).options(
            num_gpus=1,
            num_cpus=0,  # leaves the CPUs to the build tasks
            max_restarts=MAX_RESTARTS,
            max_task_retries=0,  # the pool sends a lost command again itself (to another actor if need be)
            max_concurrency=1,
        )
        handles = [remote.remote() for _ in range(count)]
        probes = [handle.where.remote() for handle in handles]
        ray.wait(probes, num_returns=len(probes), timeout=READY_TIMEOUT_S)
        ready: list[tuple[Any, dict[str, Any]]] = []
        why = ""
        for handle, probe in zip(handles, probes, strict=True):
            try:
                ready.append((handle, ray.get(probe, timeout=0)))
            except Exception as exc:  # not up in time, or could not start: not a worker of this pool
                why = why or _first_line(exc)
                ray.kill(handle, no_restart=True)
        if not ready:
            raise HardwareError(
                f"none of the {count} worker actors of the Ray cluster came up within {READY_TIMEOUT_S:g} s "
                f"({why})",
                hint="check that the cluster's GPUs are free (ray status) and that kopt is installed on "
                "every node",
            )
        driver = self.driver_node

        def order(entry: tuple[Any, dict[str, Any]]) -> tuple[bool, str, list[str]]:
            place = entry[1]
            return (place["node_id"] != driver, place["node_ip"], place["gpu_ids"])

        ready.sort(key=order)
        labels = [f"ray:{place['node_ip']}/gpu{','.join(place['gpu_ids'])}" for _, place in ready]
        if len(set(labels)) != len(labels):  # two nodes on one address: tell them apart by node id
            labels = [
                f"ray:{place['node_ip']}:{place['node_id'][:8]}/gpu{','.join(place['gpu_ids'])}"
                for _, place in ready
            ]
        self._dead = set()
        self._actors = [handle for handle, _ in ready]
        self._places = [place for _, place in ready]
        self._slots = tuple(labels)
        self._workers = [RayWorker(self, index) for index in range(len(ready))]

    def _teardown(self) -> None:
        import ray

        actors, self._actors, self._workers, self._slots = self._actors, [], [], ()
        if actors:
            closing = [actor.close.remote() for actor in actors]
            with contextlib.suppress(Exception):
                ray.wait(closing, num_returns=len(closing), timeout=CLOSE_TIMEOUT_S)
            for actor in actors:
                with contextlib.suppress(Exception):
                    ray.kill(actor, no_restart=True)
        self._refs.clear()
        self._built.clear()
        self._pending.clear()
        if self._build_folder is not None:
            shutil.rmtree(self._build_folder, ignore_errors=True)
            self._build_folder = None
        if self._connected:
            self._connected = False
            ray.shutdown()

    # -- commands ----------------------------------------------------------------------------------
    def _start_actor(self, index: int) -> None:
        with self._lock:
            if index in self._dead:
                return
            self._pending.append(self._actors[index].start.remote())

    def _handle(self, index: int) -> tuple[int, Any]:
        """The actor to send slot ``index``'s command to: its own while it lives, else another live one."""
        with self._lock:
            if index not in self._dead:
                return index, self._actors[index]
            live = [i for i in range(len(self._actors)) if i not in self._dead]
            if not live:
                raise HardwareError(
                    f"every worker of the ray pool is lost ({len(self._actors)} actors, each restarted up to "
                    f"{MAX_RESTARTS} times)",
                    hint=LOST_HINT,
                )
            chosen = live[index % len(live)]
            return chosen, self._actors[chosen]

    def _after_loss(self, index: int) -> None:
        """Slot ``index``'s actor failed a command: wait for Ray to bring it back, or mark it lost."""
        import ray

        try:
            place = ray.get(self._actors[index].where.remote(), timeout=READY_TIMEOUT_S)
        except Exception:
            with self._lock:
                self._dead.add(index)
            with contextlib.suppress(Exception):
                ray.kill(self._actors[index], no_restart=True)
            return
        with self._lock:
            self._places[index] = place

    def _bundle(self, path: str) -> Bundle | None:
        """Driver file ``path`` as the actors fetch it: in the object store under its content key (put
        there once per key). None for a path that is neither on this host nor built here: the bench then
        meets it missing, as a local one would."""
        import ray

        target = Path(path)
        if os.path.lexists(target):
            try:
                key = content.content_key(target)
            except OSError:
                return None
            with self._lock:
                ref = self._refs.get(key)
            if ref is None:
                ref = ray.put(content.pack(target))
                with self._lock:
                    if key in self._refs:
                        ref = self._refs[key]
                    else:
                        self._refs[key] = ref
                        self.uploads += 1
            return (path, key, target.name, [ref])
        with self._lock:
            known = self._built.get(path)
            if known is None or known[0] not in self._refs:
                return None
            return (path, known[0], known[1], [self._refs[known[0]]])

    def _forget(self, bundles: Sequence[Bundle]) -> None:
        with self._lock:
            for _, key, _, _ in bundles:
                self._refs.pop(key, None)

    def _command(
        self, worker: RayWorker, method: str, args: list[Any], paths: Sequence[str], timeout_s: float
    ) -> Any:
        import ray
        from ray.exceptions import GetTimeoutError, ObjectLostError, RayActorError, RayTaskError

        failures: list[str] = []
        for _ in range(MAX_ATTEMPTS):
            index, handle = self._handle(worker.index)
            bundles = [bundle for path in paths if (bundle := self._bundle(path)) is not None]
            try:
                data, placement = ray.get(getattr(handle, method).remote(*args, bundles), timeout=timeout_s)
            except RayActorError as exc:
                failures.append(f"{self._slots[index]}: {_LOST} ({_first_line(exc)})")
                self._after_loss(index)
                continue
            except GetTimeoutError:
                failures.append(
                    f"{self._slots[index]}: no answer within {timeout_s:g} s; the actor was killed"
                )
                with contextlib.suppress(Exception):
                    ray.kill(handle, no_restart=False)
                self._after_loss(index)
                continue
            except RayTaskError as exc:
                if not isinstance(getattr(exc, "cause", None), ObjectLostError):
                    raise
                failures.append(f"{self._slots[index]}: a file's copy was lost from the object store")
                self._forget(bundles)  # put again from this host's file at the next attempt
                continue
            worker.last_slot, worker.last_placement = index, placement
            return data
        raise HardwareError(
            f"a {method} command on the ray pool's worker {worker.slot} was lost {MAX_ATTEMPTS} times: "
            + "; ".join(failures),
            hint=LOST_HINT,
        )

    # -- builds ------------------------------------------------------------------------------------
    def on_other_nodes(self) -> bool:
        """Whether any worker runs on a node other than this process's."""
        with self._lock:
            return self.driver_node is None or any(p["node_id"] != self.driver_node for p in self._places)

    def build_all(
        self,
        jobs: Sequence[BuildJob],
        local: LocalBuild,
        *,
        toolchain: Toolchain | None = None,
        build_root: Path | None = None,
    ) -> list[BuildOutcome]:
        """Build ``jobs`` where the workers can load them: ``local(jobs)`` (the step's compile pool) when
        ``builds=local``, or ``auto`` with every worker on this node; else on the cluster (see the module
        docstring). The two-argument protocol carries neither the toolchain nor the build root the step
        gives ``local``: cluster builds use ``toolchain`` when given, else the ranking worker's GPU
        architecture, and put the artifacts under ``build_root/<key>/`` when given, else under a folder of
        this pool (removed when it ends). One outcome per job, in order; nothing a candidate does raises."""
        mode = self.settings.builds
        if mode == "local" or (mode == "auto" and not self.on_other_nodes()):
            return local(jobs)
        return self._build_on_cluster(jobs, toolchain, Path(build_root) if build_root else None)

    def _packed_folder(self, kernel: Path) -> tuple[Packed, str]:
        """The kernel's folder as a bundle (or the kernel alone when the folder is too big to ship), and
        the kernel's path inside it ("" for the kernel alone)."""
        import ray

        folder = kernel.parent
        whole = content.folder_fits(folder, FOLDER_MAX_FILES, FOLDER_MAX_BYTES)
        target, inside = (folder, kernel.name) if whole else (kernel, "")
        key = content.content_key(target)
        with self._lock:
            ref = self._refs.get(key)
        if ref is None:
            ref = ray.put(content.pack(target))
            with self._lock:
                ref = self._refs.setdefault(key, ref)
                self.uploads += 1
        return (key, target.name, [ref]), inside

    def _build_on_cluster(
        self, jobs: Sequence[BuildJob], toolchain: Toolchain | None, build_root: Path | None
    ) -> list[BuildOutcome]:
        import ray

        from kopt_core.steps.build_pool import is_resource_failure

        keys = [job.key for job in jobs]
        if any(not key or "/" in key or "\\" in key or key.startswith(".") for key in keys):
            raise ValueError(f"build keys must be plain folder names, got {keys!r}")
        if len(set(keys)) != len(keys):
            raise ValueError(f"build keys must be unique, got {keys!r}")
        if build_root is None:
            if self._build_folder is None:
                self._build_folder = Path(tempfile.mkdtemp(prefix="kopt-ray-builds-"))
            build_root = self._build_folder
        with self._lock:
            arch = next((p["arch"] for p in self._places if p.get("arch")), None)
        env = {"KOPT_PLUGINS": os.environ["KOPT_PLUGINS"]} if "KOPT_PLUGINS" in os.environ else {}
        task: Any = ray.remote(build_on_node).options(
            num_cpus=1,
            num_returns=2,
            max_retries=BUILD_TASK_RETRIES,
            runtime_env={"env_vars": env} if env else None,
        )
        tool_data = to_data(toolchain) if toolchain is not None else None

        def submit(job: BuildJob) -> tuple[Any, Any] | str:
            try:
                packed, inside = self._packed_folder(Path(job.candidate.path))
                meta, blob = task.remote(job.key, to_data(job.candidate), packed, inside, tool_data, arch)
                return meta, blob
            except Exception as exc:  # the kernel's folder could not be read or shipped
                return f"could not ship {job.candidate.path} to the cluster: {_first_line(exc)}"

        def collect(job: BuildJob, sent: tuple[Any, Any] | str) -> tuple[dict[str, Any], Any]:
            if isinstance(sent, str):
                return {"artifact": None, "error": sent, "seconds": 0.0}, None
            try:
                return ray.get(sent[0]), sent[1]
            except Exception as exc:  # the task itself failed (its node lost past Ray's retries)
                return {
                    "artifact": None,
                    "error": f"the build task failed: {_first_line(exc)}",
                    "seconds": 0.0,
                }, None

        firsts = [collect(job, sent) for job, sent in zip(jobs, [submit(job) for job in jobs], strict=True)]
        finals = list(firsts)
        retried: set[int] = set()
        for index, (meta, _) in enumerate(firsts):  # resource failures once more, alone, as build_all does
            if meta["error"] and is_resource_failure(meta["error"]):
                retried.add(index)
                finals[index] = collect(jobs[index], submit(jobs[index]))

        from kopt_core.steps.build_pool import BuildOutcome

        outcomes = []
        for index, (job, (meta, blob)) in enumerate(zip(jobs, finals, strict=True)):
            artifact, error = None, meta["error"]
            if meta["artifact"] is not None:
                try:
                    artifact = self._bring_home(job, meta, blob, build_root)
                except Exception as exc:
                    error = (
                        f"the artifact built on the cluster could not be put on this host: {_first_line(exc)}"
                    )
            seconds = firsts[index][0]["seconds"] + (meta["seconds"] if index in retried else 0.0)
            outcomes.append(
                BuildOutcome(
                    key=job.key,
                    artifact=artifact,
                    compile_pass=artifact is not None,
                    error=None if artifact is not None else error,
                    seconds=seconds,
                    retried_serially=index in retried,
                    cache_hit=bool(artifact is not None and artifact.cache_hit),
                )
            )
        return outcomes

    def _bring_home(self, job: BuildJob, meta: dict[str, Any], blob: Any, build_root: Path) -> Any:
        """Put a cluster build's artifact where the job would have built it on this host; the artifact
        record naming this host's paths. Remembers its content key, so a bench ships nothing new."""
        import ray

        from kopt_core.records import Artifact

        built = from_data(meta["artifact"], Artifact)
        key, name, relative = meta["key"], meta["name"], meta["relative"]
        kernel_folder = Path(job.candidate.path).parent
        if meta["place"] == "source":
            destination = kernel_folder / relative
        elif meta["place"] == "build":
            destination = build_root / job.key / relative
        else:
            destination = build_root / job.key / name
        if not (os.path.lexists(destination) and content.content_key(destination) == key):
            destination.parent.mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(prefix=".kopt-ray-", dir=destination.parent))
            try:
                unpacked = content.unpack_into_cache(key, name, ray.get(blob), root=staging)
                if destination.is_dir() and not destination.is_symlink():
                    shutil.rmtree(destination)
                os.replace(unpacked, destination)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
        copy_folder = meta["copy_folder"]

        def home(path: str) -> str:
            if path == built.path:
                return str(destination)
            if path == copy_folder or path.startswith(copy_folder + "/"):
                return str(kernel_folder / os.path.relpath(path, copy_folder))
            return path

        paths = [built.path, built.source, built.interface.source if built.interface else ""]
        artifact = content.relocate_artifact(built, {path: home(path) for path in paths if path})
        with self._lock:
            self._refs.setdefault(key, blob)
            self._built[str(destination)] = (key, destination.name)
        return artifact


__all__ = [
    "MAX_ATTEMPTS",
    "OPTIONS",
    "RayPool",
    "RaySettings",
    "RayWorker",
    "check_options",
    "open_pool",
    "parse_options",
]
