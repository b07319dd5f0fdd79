"""What each long-running component last did, where health can read it.

Each component (``watcher``, ``consume``, ``audit``) writes one small JSON file,
``<home>/status/<component>.json``, after every step: the time of its last
successful step, and while it cannot do its work, since when and why. The
file is replaced atomically (written beside, then renamed), so a reader never
sees half of one. Health (``GET /healthz``) reads these files: it holds
whether the components run in one process or in several, as long as they
share ``home``.
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

__all__ = ["ComponentStatus", "StatusWriter", "Outage", "read_statuses", "COMPONENTS"]

#: the components health expects, in the order it reports them
COMPONENTS = ("watcher", "consume", "audit")


@dataclass
class ComponentStatus:
    component: str
    #: the end of the last step that did its work
    last_ok: datetime | None = None
    #: since when the component cannot do its work (None: it can)
    failing_since: datetime | None = None
    #: the last error while failing
    error: str | None = None
    #: what the component adds: consume lag, the committed pass, ...
    detail: dict = field(default_factory=dict)
    host: str = ""
    pid: int = 0

    def to_json(self) -> str:
        d = asdict(self)
        for k in ("last_ok", "failing_since"):
            d[k] = d[k].isoformat() if d[k] is not None else None
        return json.dumps(d, default=str)

    @classmethod
    def from_json(cls, text: str) -> ComponentStatus:
        d = json.loads(text)
        for k in ("last_ok", "failing_since"):
            d[k] = datetime.fromisoformat(d[k]) if d.get(k) else None
        return cls(**d)


def _folder(home: Path) -> Path:
    return home / "status"


class StatusWriter:
    """One component's status file; ``ok()`` after each good step, ``failing()`` after each
    failed one. Both only touch a local file: cheap enough for every step."""

    def __init__(self, home: Path, component: str) -> None:
        self.path = _folder(home) / f"{component}.json"
        self.status = ComponentStatus(component, host=socket.gethostname(), pid=os.getpid())

    def ok(self, **detail) -> None:
        self.status.last_ok = datetime.now(UTC)
        self.status.failing_since = None
        self.status.error = None
        self.status.detail = detail
        self._write()

    def failing(self, error: str) -> None:
        if self.status.failing_since is None:
            self.status.failing_since = datetime.now(UTC)
        self.status.error = error
        self._write()

    def _write(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(self.status.to_json())
        os.replace(tmp, self.path)


def read_statuses(home: Path) -> dict[str, ComponentStatus]:
    """Every component's last status, by name (a component that never ran is absent)."""
    out = {}
    folder = _folder(home)
    if folder.is_dir():
        for p in sorted(folder.glob("*.json")):
            try:
                s = ComponentStatus.from_json(p.read_text())
            except (ValueError, TypeError, KeyError):
                continue  # a file of another version: as if absent
            out[s.component] = s
    return out


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
        error = f"{type(exc).__name__}: {exc}".splitlines()[0][:500]
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
