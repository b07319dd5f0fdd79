"""What each long-running component last did, where health can read it.

Each component (``watcher``, ``consume``, ``audit``) writes one small JSON file,
``<home>/status/<component>.json``, after every step: the time of its last
successful step, and while it cannot do its work, since when and why. The
file is replaced atomically (written beside, then renamed), so a reader never
sees half of one. Health (``GET /healthz``) reads these files: it holds
whether the components run in one process or in several, as long as they
share ``home``.

A status is only as true as the process that wrote it is alive: a stopped service
leaves its files behind, last saying ``ok``. Each file therefore names its writer
(:class:`Writer`: host, pid namespace, pid and the process's start time, which a
reused pid does not share), and ``kafka-audit run`` records itself in
``<home>/status/service.json`` while it runs. :func:`current_statuses` keeps a status
only if it was written by the running service (when one runs, recorded), or else by a
process that still runs; any other is *not running*, with the reason. A writer on
another host or in another pid namespace (a container beside) cannot be checked from
here: its status counts on its age alone, as before.

:func:`consume_lag` is the consume job's lag, measured: the log end of each partition
(the watcher's last sample) less the offset the consume job committed for it (its last
micro-batch's end), or absent with the reason.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from kafka_audit.redact import scrub

__all__ = ["ComponentStatus", "StatusWriter", "Outage", "read_statuses", "COMPONENTS",
           "Writer", "write_service_record", "remove_service_record", "read_service_record",
           "current_statuses", "Statuses", "not_running_reason", "consume_lag",
           "offsets_by_partition"]

#: the components health expects, in the order it reports them
COMPONENTS = ("watcher", "consume", "audit")
#: the RabbitMQ reader and watcher: components of ``kafka-audit run`` when the ``rabbitmq``
#: section names queues (:func:`components_of`)
RABBIT_COMPONENTS = ("rabbit-reader", "rabbit-watcher")
SERVICE_RECORD = "service.json"


@dataclass(frozen=True)
class Writer:
    """A process, as a status file names it: ``started`` is its start time in clock ticks
    since boot (``/proc/<pid>/stat``; "" where unknown), ``pidns`` its pid namespace."""

    host: str
    pidns: str
    pid: int
    started: str

    @classmethod
    def this_process(cls) -> Writer:
        pid = os.getpid()
        return cls(socket.gethostname(), _pid_namespace(), pid, _start_ticks(pid))

    def checkable_from(self, here: Writer) -> bool:
        """Whether ``here`` can tell if this process runs: same host, same pid namespace."""
        return bool(self.started and self.pidns) and (self.host, self.pidns) == (here.host,
                                                                                 here.pidns)

    def alive(self) -> bool:
        """This very process still runs (its pid is not a later process's). Only meaningful
        where :meth:`checkable_from` holds."""
        return bool(self.started) and _start_ticks(self.pid) == self.started


def _pid_namespace() -> str:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


def _start_ticks(pid: int) -> str:
    """Field 22 of ``/proc/<pid>/stat`` (after the command name, which may hold spaces);
    "" for no such process (or a zombie: it has exited) or no ``/proc``."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError):
        return ""
    fields = text.rsplit(")", 1)[-1].split()
    if len(fields) < 20 or fields[0] in ("Z", "X"):
        return ""
    return fields[19]


@dataclass
class ComponentStatus:
    component: str
    #: the end of the last step that did its work
    last_ok: datetime | None = None
    #: since when the component cannot do its work (None: it can)
    failing_since: datetime | None = None
    #: the last error while failing
    error: str | None = None
    #: what the component adds: the offsets committed, the log ends, the pass, ...
    detail: dict = field(default_factory=dict)
    host: str = ""
    pid: int = 0
    #: the writer's pid namespace and start time (:class:`Writer`); "" in older files
    pidns: str = ""
    started: str = ""

    @property
    def writer(self) -> Writer:
        return Writer(self.host, self.pidns, self.pid, self.started)

    def to_json(self) -> str:
        d = asdict(self)
        for k in ("last_ok", "failing_since"):
            d[k] = d[k].isoformat() if d[k] is not None else None
        return json.dumps(d, default=str)

    @classmethod
    def from_json(cls, text: str) -> ComponentStatus:
        """Raises ``ValueError`` on anything but a status file (of this or an older version)."""
        d = json.loads(text)
        if not isinstance(d, dict) or not isinstance(d.get("component"), str):
            raise ValueError("not a status file")
        for k in ("last_ok", "failing_since"):
            d[k] = datetime.fromisoformat(d[k]) if d.get(k) else None
            if d[k] is not None and d[k].tzinfo is None:
                raise ValueError(f"{k} has no time zone")
        if not isinstance(d.get("detail", {}), dict) or not isinstance(d.get("pid", 0), int):
            raise ValueError("not a status file")
        try:
            return cls(**d)
        except TypeError as exc:  # a field of another version
            raise ValueError(str(exc)) from None


def components_of(settings) -> tuple[str, ...]:
    """The components whose status health reads under ``settings``."""
    return COMPONENTS + (RABBIT_COMPONENTS if settings.rabbitmq.queues else ())


def _folder(home: Path) -> Path:
    return home / "status"


def _replace(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


class StatusWriter:
    """One component's status file; ``ok()`` after each good step, ``failing()`` after each
    failed one. Both only touch a local file: cheap enough for every step."""

    def __init__(self, home: Path, component: str) -> None:
        self.path = _folder(home) / f"{component}.json"
        me = Writer.this_process()
        self.status = ComponentStatus(component, host=me.host, pid=me.pid, pidns=me.pidns,
                                      started=me.started)

    def ok(self, **detail) -> None:
        self.status.last_ok = datetime.now(UTC)
        self.status.failing_since = None
        self.status.error = None
        self.status.detail = detail
        self._write()

    def failing(self, error: str) -> None:
        if self.status.failing_since is None:
            self.status.failing_since = datetime.now(UTC)
        self.status.error = scrub(error)  # health shows it: never a secret
        self._write()

    def _write(self) -> None:
        _replace(self.path, self.status.to_json())


def read_statuses(home: Path, unreadable: list[str] | None = None
                  ) -> dict[str, ComponentStatus]:
    """Every component's last status, by name (a component that never ran is absent; one
    whose file cannot be read too, its name added to ``unreadable`` if given)."""
    out = {}
    folder = _folder(home)
    for name in COMPONENTS + RABBIT_COMPONENTS:
        p = folder / f"{name}.json"
        try:
            s = ComponentStatus.from_json(p.read_text())
        except FileNotFoundError:
            continue
        except (OSError, ValueError):  # half a disk, another version, not JSON: as absent
            if unreadable is not None:
                unreadable.append(name)
            continue
        out[name] = s
    return out


def write_service_record(home: Path) -> Writer:
    """``kafka-audit run`` says it runs: health trusts only the statuses it writes."""
    me = Writer.this_process()
    _replace(_folder(home) / SERVICE_RECORD, json.dumps(
        {**asdict(me), "since": datetime.now(UTC).isoformat()}))
    return me


def remove_service_record(home: Path) -> None:
    """At a clean stop, the record goes (if it is still this process's)."""
    path = _folder(home) / SERVICE_RECORD
    if read_service_record(home) == Writer.this_process():
        path.unlink(missing_ok=True)


def read_service_record(home: Path) -> Writer | None:
    try:
        d = json.loads((_folder(home) / SERVICE_RECORD).read_text())
        return Writer(str(d["host"]), str(d["pidns"]), int(d["pid"]), str(d["started"]))
    except (OSError, ValueError, TypeError, KeyError):
        return None


def not_running_reason(status: ComponentStatus, service: Writer | None, here: Writer,
                       alive: Callable[[Writer], bool] = Writer.alive) -> str | None:
    """Why ``status`` does not describe a running process (None: it may).

    * a running service is recorded (and checkable from ``here``): only a status that
      service wrote counts; any other was left by an earlier run (pure statuses of a
      dead process: the service's own files before it wrote anew);
    * else a status whose writer is checkable from ``here`` counts while that process
      runs;
    * else (another host or pid namespace) it cannot be checked: it counts."""
    writer = status.writer
    if service is not None and service.checkable_from(here) and alive(service):
        if writer != service:
            return (f"written by pid {status.pid} on {status.host or '?'}, not by the "
                    f"running service (pid {service.pid}): left by an earlier run")
        return None
    if writer.checkable_from(here) and not alive(writer):
        return f"written by pid {status.pid}, which is no longer running"
    return None


@dataclass
class Statuses:
    """The status files as health sees them: ``read`` every one that could be read,
    ``not_running`` why some of them describe no running process, ``unreadable`` the
    components whose file is not a status."""

    read: dict[str, ComponentStatus]
    not_running: dict[str, str]
    unreadable: list[str]

    @property
    def current(self) -> dict[str, ComponentStatus]:
        """The statuses written by running processes."""
        return {n: s for n, s in self.read.items() if n not in self.not_running}


def current_statuses(home: Path, here: Writer | None = None,
                     alive: Callable[[Writer], bool] = Writer.alive) -> Statuses:
    """Every status, each judged by :func:`not_running_reason` as seen from ``here`` (this
    process by default)."""
    unreadable: list[str] = []
    statuses = read_statuses(home, unreadable)
    here = here or Writer.this_process()
    service = read_service_record(home)
    reasons = {name: why for name, s in statuses.items()
               if (why := not_running_reason(s, service, here, alive)) is not None}
    return Statuses(statuses, reasons, unreadable)


def offsets_by_partition(offsets: object) -> dict[tuple[str, int], int]:
    """``{topic: {partition: offset}}`` (Spark's offsets JSON, the watcher's log ends) as
    ``{(topic, partition): offset}``; what is not such a map is left out."""
    out: dict[tuple[str, int], int] = {}
    if not isinstance(offsets, dict):
        return out
    for topic, parts in offsets.items():
        if not isinstance(parts, dict):
            continue
        for part, offset in parts.items():
            try:
                p, o = int(part), int(offset)
            except (TypeError, ValueError):
                continue
            if p >= 0 and o >= 0:
                out[(str(topic), p)] = o
    return out


def consume_lag(consume: ComponentStatus | None, watcher: ComponentStatus | None) -> dict:
    """The consume job's lag, measured: for each partition it has committed a position for,
    the log end the watcher last sampled less that position (never below 0: a log end
    sampled before the commit is older than it), summed.

    ``{"offsets": n, "partitions": k, "unmeasured": m, "log_ends_at": t, "committed_at": t}``
    (``unmeasured``: committed partitions without a log end sample, left out of ``n``), or
    ``{"offsets": None, "reason": why}`` when it cannot be measured. Give only current
    statuses (:func:`current_statuses`): a dead job's last position is no position."""
    if consume is None:
        return {"offsets": None, "reason": "no current status of the consume job"}
    committed = offsets_by_partition((consume.detail or {}).get("committed"))
    if not committed:
        return {"offsets": None, "reason": "the consume job has committed no micro-batch yet"}
    if watcher is None:
        return {"offsets": None, "reason": "no current status of the watcher, which samples "
                                           "the log ends"}
    ends = offsets_by_partition((watcher.detail or {}).get("log_ends"))
    measured = [(ends[k], off) for k, off in committed.items() if k in ends]
    if not measured:
        return {"offsets": None, "reason": "the watcher has sampled no log end of the "
                                           "partitions the consume job reads"}
    return {"offsets": sum(max(0, end - off) for end, off in measured),
            "partitions": len(measured), "unmeasured": len(committed) - len(measured),
            "log_ends_at": (watcher.detail or {}).get("log_ends_at"),
            "committed_at": (consume.detail or {}).get("progress_at")}


class Outage:
    """How a long-running component rides out an outage: one log line when its steps start
    failing and one when they succeed again (never one per retry), a capped doubling
    wait between retries, and its status file kept true meanwhile.

    ``failed(exc)`` returns how long to wait before the next try; ``succeeded(**detail)``
    returns how long the outage lasted (0.0 if there was none)."""

    def __init__(self, component: str, status: StatusWriter, log, retry_seconds: float,
                 max_backoff_seconds: float, clock=None) -> None:
        import time

        self.component = component
        self.status = status
        self.log = log
        self.retry = retry_seconds
        self.cap = max_backoff_seconds
        self._clock = clock or time.monotonic
        self._since: float | None = None
        self._failures = 0
        self.outages = 0  # how many began: counted, for tests and the service

    @property
    def down(self) -> bool:
        return self._since is not None

    def failed(self, exc: BaseException) -> float:
        error = scrub(f"{type(exc).__name__}: {exc}").splitlines()[0][:500]
        if self._since is None:
            self._since = self._clock()
            self.outages += 1
            self.log.warning("%s: cannot do its work, retrying with backoff up to %.0fs: %s",
                             self.component, self.cap, error)
        self._failures += 1
        self.status.failing(error)
        return min(self.retry * 2 ** (self._failures - 1), self.cap)

    def succeeded(self, **detail) -> float:
        lasted = 0.0
        if self._since is not None:
            lasted = self._clock() - self._since
            self.log.warning("%s: working again after %.1fs (%d failed tries)",
                             self.component, lasted, self._failures)
        self._since, self._failures = None, 0
        self.status.ok(**detail)
        return lasted
