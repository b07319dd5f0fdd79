from __future__ import annotations

from fastapi import APIRouter

from kafka_audit.auditor_api.deps import SettingsDep
from kafka_audit.jobs.io import table_exists

router = APIRouter(tags=["health"])


@router.get("/healthz")
def healthz(settings: SettingsDep) -> dict:
    """Liveness plus which tables exist yet."""
    tables = ["acks", "consumed", "cluster_events", "findings", "partition_state", "audit_hot",
              "dq_results"]
    return {"status": "ok",
            "tables": {t: table_exists(settings.table_path(t)) for t in tables}}
