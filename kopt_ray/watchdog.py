"""What kills a lost actor's bench worker: a pid file naming it, and a watchdog process that reads it.

A bench actor (``kopt_ray.actor.BenchActor``) writes its bench worker's pid and start time to a pid file
before each command. The worker runs in a process group of its own, so when the actor dies (killed with
SIGKILL, its node's raylet gone) nothing else ends it, and a worker in the middle of a long or hung
command would go on holding the GPU. Two things end it:

- the watchdog: a small process the actor starts (``python -m kopt_ray.watchdog PIDFILE``, stdlib only, in
  a session of its own) that reads its standard input until the actor's end of the pipe closes, which
  happens however the actor dies, then kills the group the pid file names;
- the actor restarted by Ray, which does the same with the pid file before anything else.

(``ray.kill`` ends the processes an actor started along with it, the worker and the watchdog both; then
only a stale pid file is left, which the next actor on the node removes with ``sweep``.)

A pid file's process is killed only while its start time and command line still match, so a pid the
system gave to another process since is left alone.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

WORKER_MODULE = b"kopt_core.bench.worker"


def start_time(pid: int) -> str | None:
    """The kernel's start time of process ``pid`` (field 22 of /proc/PID/stat), or None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()
    return fields[19] if len(fields) > 19 else None


def is_bench_worker(pid: int) -> bool:
    try:
        return WORKER_MODULE in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def note(pidfile: Path, pid: int | None) -> None:
    """Record bench worker ``pid`` in ``pidfile`` (None, or a process already gone: remove the file)."""
    started = start_time(pid) if pid is not None else None
    if pid is None or started is None:
        pidfile.unlink(missing_ok=True)
        return
    staging = pidfile.with_name(f".{pidfile.name}.{os.getpid()}")
    staging.write_text(f"{pid} {started}\n")
    os.replace(staging, pidfile)  # a reader sees the old line or the new one, never half of one


def kill_recorded(pidfile: Path) -> int | None:
    """Kill the process group of the bench worker ``pidfile`` names, if that process still runs, and
    remove the file; the pid killed, or None."""
    try:
        pid_text, started = pidfile.read_text().split()
        pid = int(pid_text)
    except (OSError, ValueError):
        return None
    pidfile.unlink(missing_ok=True)
    if start_time(pid) != started or not is_bench_worker(pid):
        return None
    try:
        os.killpg(pid, signal.SIGKILL)  # the worker leads its group: the group's id is its pid
    except OSError:
        return None
    return pid


def sweep(folder: Path) -> None:
    """Remove the pid files in ``folder`` whose process is gone (Ray ends an actor it kills together with
    the processes it started, its watchdog too, and that actor's file stays behind)."""
    for pidfile in folder.glob("*.pid"):
        try:
            pid_text, started = pidfile.read_text().split()
            gone = start_time(int(pid_text)) != started
        except (OSError, ValueError):
            gone = True
        if gone:
            pidfile.unlink(missing_ok=True)


def main(argv: list[str]) -> int:
    """Wait for the end of standard input (the actor gone), then kill what the pid file names."""
    if len(argv) != 1:
        print("usage: python -m kopt_ray.watchdog PIDFILE", file=sys.stderr)
        return 2
    while sys.stdin.buffer.read(65536):
        pass
    kill_recorded(Path(argv[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
