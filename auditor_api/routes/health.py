"""``GET /healthz`` and ``GET /readyz``: is the auditor looking? Per component, its last
good step.

Liveness of the API itself is ``/healthz``'s 200, whatever it finds: a table that cannot
be read or a status file that is not one is a problem it names, never a 500 (an
orchestrator would restart the API over and over). The body says whether the auditor
behind it sees the cluster: ``ok`` only while every component (watcher, consume job,
audit loop) did its work within its ``health.*_stale_seconds``, else ``degraded``. It
reads the status files the components write (``kafka_audit/status.py``), so it holds
whether they run in one service or as separate processes sharing ``home``; a status
counts only if the running service wrote it (or, without a service, a process that
still runs): a stopped service's files, last saying ``ok``, make a component
``not running``.

``/readyz`` is a 503 unless every component is ``ok``; it adds how far behind each is:
the consume lag measured (the log ends the watcher sampled less the offsets the consume
job committed, :func:`~kafka_audit.status.consume_lag`, or ``null`` and why), the age of
the consume job's last progress, of the last committed pass, of the watcher's last poll.

Both say ``ledger_dropped``: the acknowledged writes whose delivery reports the
producers' ack ledgers could record nowhere (committed ``unrecorded`` findings). It is
evidence lost for good, not a state that passes: it never makes the answer a 503, and
``/metrics`` counts it too (``kafka_audit_ledger_dropped_total``).

Who sees what: with ``api.tokens`` configured, a request without one of them (both paths
are open to it, for probes) gets the verdict only: ``/healthz`` its ``status``,
``/readyz`` its ``status`` and each component's state. Hosts, pids, errors, counts,
brokers and lag need a token (an open API, with no tokens, shows them to everyone, as it
shows everything else).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from fastapi import APIRouter, Request, Response

from kafka_audit.auditor_api.auth import accepted_token
from kafka_audit.auditor_api.deps import SettingsDep, get_reader
from kafka_audit.auditor_api.routes.findings import committed_finding_sums
from kafka_audit.redact import scrub
from kafka_audit.schemas.tables import TABLES
from kafka_audit.schemas.verdicts import Kind
from kafka_audit.status import components_of, consume_lag, current_statuses

router = APIRouter(tags=["health"])
log = logging.getLogger("kafka_audit.auditor_api")

#: maps a status may hold that are too long for a health answer (every partition's
#: offsets): health reports what it computes from them
_LONG_DETAIL = ("log_ends", "committed")

HEALTH_EXAMPLE = {
    "status": "degraded",
    "problems": ["consume: not running: written by pid 4100, not by the running service "
                 "(pid 4242): left by an earlier run"],
    "components": {
        "watcher": {"state": "ok", "last_ok": "2026-11-22T07:52:00Z", "seconds_since_ok": 0.4,
                    "failing_since": None, "error": None, "reason": None,
                    "detail": {"partitions": 6, "log_ends_at": "2026-11-22T07:51:59Z",
                               "brokers": {"known": [1, 2, 3], "registered": [1, 3],
                                           "down": [{"broker": 2,
                                                     "since": "2026-11-22T07:51:40Z",
                                                     "fenced": True, "unreachable": True}]}},
                    "pid": 4242, "host": "auditor-1"},
        "consume": {"state": "not running", "last_ok": "2026-11-22T07:50:01Z",
                    "seconds_since_ok": 119.0, "failing_since": None, "error": None,
                    "reason": "written by pid 4100, not by the running service (pid 4242): "
                              "left by an earlier run",
                    "detail": {"batch": 41}, "pid": 4100, "host": "auditor-1"}},
    "brokers_down": [{"broker": 2, "since": "2026-11-22T07:51:40Z", "fenced": True,
                      "unreachable": True}],
    "committed_pass": 7, "ledger_dropped": 0, "tables": {"acks": True, "findings": True}}
BEHIND_EXAMPLE = {
    "consume_lag_offsets": 1250,
    "consume_lag": {"offsets": 1250, "partitions": 6, "unmeasured": 0,
                    "log_ends_at": "2026-11-22T07:52:00Z",
                    "committed_at": "2026-11-22T07:51:58Z"},
    "consume_seconds_since_progress": 1.2, "audit_seconds_since_pass": 3.1,
    "audit_committed_pass": 7, "watcher_seconds_since_poll": 0.4}


@router.get("/healthz", responses={200: {"content": {"application/json": {"examples": {
    "with a token (or an open API)": {"value": HEALTH_EXAMPLE},
    "without a token": {"value": {"status": "degraded"}}}}}}})
def healthz(request: Request, settings: SettingsDep) -> dict:
    """``ok`` while every component of the running service worked recently, else
    ``degraded``. Always a 200 while the API itself answers (liveness). The components,
    the reasons, the brokers down and the tables: with a token (when tokens are
    configured)."""
    body = _guarded(request, settings)
    return body if _detailed(request, settings) else {"status": body["status"]}


@router.get("/readyz", responses={
    200: {"content": {"application/json": {"examples": {
        "with a token (or an open API)": {"value": {**HEALTH_EXAMPLE, "status": "ok",
                                                     "problems": [],
                                                     "behind": BEHIND_EXAMPLE}},
        "without a token": {"value": {"status": "ok", "components": {
            "watcher": "ok", "consume": "ok", "audit": "ok"}}}}}}},
    503: {"description": "a component is down, blind, behind or not the running "
                         "service's: the body says which"}})
def readyz(request: Request, settings: SettingsDep, response: Response) -> dict:
    """Each component: alive (its status written by the running service), and how far
    behind (the consume lag measured in offsets, the age of its last progress, the age
    of the last committed audit pass, the watcher's last poll). A 503 unless every
    component is ``ok``."""
    body = _guarded(request, settings, behind=True)
    if body["status"] != "ok":
        response.status_code = 503
    if _detailed(request, settings):
        return body
    return {"status": body["status"],
            "components": {n: c.get("state") for n, c in body.get("components", {}).items()}}


def _detailed(request: Request, settings) -> bool:
    """Whether this request may see more than the verdict: an open API, or a token."""
    tokens = settings.api.tokens
    return not tokens or accepted_token(request.headers.get("authorization"), tokens) \
        is not None


def _guarded(request: Request, settings, behind: bool = False) -> dict:
    """:func:`_health`, and if even that fails, a ``degraded`` answer that says so."""
    try:
        return _health(request, settings, behind)
    except Exception as exc:  # noqa: BLE001 - health must answer whatever it cannot read
        log.warning("health cannot be computed: %s", type(exc).__name__)
        return {"status": "degraded", "problems": [
            f"health: cannot be computed ({type(exc).__name__})"], "components": {}}


def _health(request: Request, settings, behind: bool) -> dict:
    now = datetime.now(UTC)
    stale_after = {"watcher": settings.health.watcher_stale_seconds,
                   "consume": settings.health.consume_stale_seconds,
                   "audit": settings.health.audit_stale_seconds,
                   "rabbit-watcher": settings.health.watcher_stale_seconds,
                   "rabbit-reader": settings.health.consume_stale_seconds}
    statuses = current_statuses(settings.home_dir)
    current, not_running = statuses.current, statuses.not_running
    components, problems = {}, []
    for name in components_of(settings):
        if name in statuses.unreadable:
            components[name] = {"state": "unreadable"}
            problems.append(f"{name}: its status file cannot be read")
            continue
        shown = statuses.read.get(name)  # a stopped process's too: shown with why
        if shown is None:
            components[name] = {"state": "never ran"}
            problems.append(f"{name}: never ran")
            continue
        s = current.get(name)
        age = None if shown.last_ok is None else round((now - shown.last_ok).total_seconds(), 1)
        reason = not_running.get(name)
        state = "ok"
        if s is None:
            state = "not running"
            problems.append(f"{name}: not running: {reason}")
        elif s.failing_since is not None:
            state = "failing"
            problems.append(f"{name}: failing since {s.failing_since.isoformat()}: {s.error}")
        elif age is None or age > stale_after[name]:
            state = "stale"
            problems.append(f"{name}: no good step since "
                            f"{s.last_ok.isoformat() if s.last_ok else 'it started'}")
        components[name] = {
            "state": state, "last_ok": shown.last_ok, "seconds_since_ok": age,
            "failing_since": shown.failing_since, "error": shown.error, "reason": reason,
            "detail": {k: v for k, v in (shown.detail or {}).items() if k not in _LONG_DETAIL},
            "pid": shown.pid, "host": shown.host}
    watcher = current.get("watcher")
    body = {"status": "ok", "problems": problems, "components": components,
            "brokers_down": (watcher.detail or {}).get("brokers", {}).get("down")
            if watcher is not None else None}
    body.update(_tables(request, settings, problems))
    body["status"] = "degraded" if problems else "ok"
    if behind:
        def since_ok(name: str) -> float | None:
            return components[name].get("seconds_since_ok") if name in current else None

        lag = consume_lag(current.get("consume"), watcher)
        body["behind"] = {
            "consume_lag_offsets": lag["offsets"],
            "consume_lag": lag,
            "consume_seconds_since_progress": since_ok("consume"),
            "audit_seconds_since_pass": since_ok("audit"),
            "audit_committed_pass": body["committed_pass"],
            "watcher_seconds_since_poll": since_ok("watcher"),
        }
    return body


def _tables(request: Request, settings, problems: list[str]) -> dict:
    """The committed pass and which tables exist; a table that cannot be read is a
    problem named here, not an error."""
    committed, dropped, exists = None, None, {}
    try:
        reader = get_reader(request, settings)
    except Exception as exc:  # noqa: BLE001 - e.g. the API's spool folder cannot be made
        problems.append(f"tables: cannot be read ({_one_line(exc)})")
        return {"committed_pass": None, "ledger_dropped": None, "tables": {}}
    try:
        committed = reader.committed_pass()
        dropped = sum(n for (_t, _p, kind), (n, _last) in
                      committed_finding_sums(reader, committed).items()
                      if kind == Kind.unrecorded)
    except Exception as exc:  # noqa: BLE001 - a corrupt audit_hot: named, never a 500
        problems.append(f"audit_hot: the committed pass cannot be read ({_one_line(exc)})")
    for t in TABLES:
        try:
            exists[t] = reader.exists(t)
        except Exception as exc:  # noqa: BLE001 - as above
            exists[t] = False
            problems.append(f"{t}: cannot be read ({type(exc).__name__})")
    return {"committed_pass": committed, "ledger_dropped": dropped, "tables": exists}


def _one_line(exc: BaseException) -> str:
    text = str(exc).splitlines()[0][:200] if str(exc) else ""
    return scrub(f"{type(exc).__name__}: {text}")
