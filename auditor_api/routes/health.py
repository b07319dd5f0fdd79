"""``GET /healthz``: is the auditor looking? Per component, its last good step.

Liveness of the API itself is the 200; the body says whether the auditor behind
it sees the cluster: ``ok`` only while every component (watcher, consume job,
audit loop) did its work within its ``health.*_stale_seconds``, else
``degraded``, naming each component that is not and since when. It reads the
status files the components write (``kafka_audit/status.py``), so it holds
whether they run in one service or as separate processes sharing ``home``.
"""

from __future__ import annotations

from datetime import UTC, datetime

from fastapi import APIRouter, Response

from kafka_audit.auditor_api.deps import ReaderDep, SettingsDep
from kafka_audit.schemas.tables import TABLES
from kafka_audit.status import COMPONENTS, read_statuses

router = APIRouter(tags=["health"])


HEALTH_EXAMPLE = {
    "status": "degraded", "problems": ["consume: no good step since 2026-11-22T07:50:01Z"],
    "components": {"watcher": {"state": "ok", "last_ok": "2026-11-22T07:52:00Z",
                               "seconds_since_ok": 0.4, "failing_since": None, "error": None,
                               "detail": {}, "pid": 4242, "host": "auditor-1"}},
    "committed_pass": 7, "tables": {"acks": True, "findings": True}}


@router.get("/healthz", responses={200: {"content": {"application/json": {
    "example": HEALTH_EXAMPLE}}}})
def healthz(reader: ReaderDep, settings: SettingsDep) -> dict:
    """``ok`` while every component worked recently, else ``degraded`` with the reasons.
    Always a 200 while the API itself answers (liveness)."""
    return _health(reader, settings)


@router.get("/readyz", responses={
    200: {"content": {"application/json": {"example": {**HEALTH_EXAMPLE, "status": "ok",
                                                         "problems": [], "behind": {
        "consume_lag_offsets": 0, "consume_seconds_since_progress": 1.2,
        "audit_seconds_since_pass": 3.1, "audit_committed_pass": 7,
        "watcher_seconds_since_poll": 0.4}}}}},
    503: {"description": "a component is down, blind or behind: the body says which"}})
def readyz(reader: ReaderDep, settings: SettingsDep, response: Response) -> dict:
    """Each component: alive, and how far behind (the consume job's lag in offsets and the
    age of its last progress, the age of the last committed audit pass, the watcher's last
    poll). A 503 unless every component is ``ok``."""
    body = _health(reader, settings)
    c = body["components"]
    body["behind"] = {
        "consume_lag_offsets": (c["consume"].get("detail") or {}).get("lag_offsets"),
        "consume_seconds_since_progress": c["consume"].get("seconds_since_ok"),
        "audit_seconds_since_pass": c["audit"].get("seconds_since_ok"),
        "audit_committed_pass": body["committed_pass"],
        "watcher_seconds_since_poll": c["watcher"].get("seconds_since_ok"),
    }
    if body["status"] != "ok":
        response.status_code = 503
    return body


def _health(reader, settings) -> dict:
    now = datetime.now(UTC)
    stale_after = {"watcher": settings.health.watcher_stale_seconds,
                   "consume": settings.health.consume_stale_seconds,
                   "audit": settings.health.audit_stale_seconds}
    statuses = read_statuses(settings.home_dir)
    components, problems = {}, []
    for name in COMPONENTS:
        s = statuses.get(name)
        if s is None:
            components[name] = {"state": "never ran"}
            problems.append(f"{name}: never ran")
            continue
        age = None if s.last_ok is None else round((now - s.last_ok).total_seconds(), 1)
        state = "ok"
        if s.failing_since is not None:
            state = "failing"
            problems.append(f"{name}: failing since {s.failing_since.isoformat()}: {s.error}")
        elif age is None or age > stale_after[name]:
            state = "stale"
            problems.append(f"{name}: no good step since "
                            f"{s.last_ok.isoformat() if s.last_ok else 'it started'}")
        components[name] = {"state": state, "last_ok": s.last_ok, "seconds_since_ok": age,
                            "failing_since": s.failing_since, "error": s.error,
                            "detail": s.detail, "pid": s.pid, "host": s.host}
    return {"status": "degraded" if problems else "ok", "problems": problems,
            "components": components,
            "committed_pass": reader.committed_pass(),
            "tables": {t: reader.exists(t) for t in TABLES}}
