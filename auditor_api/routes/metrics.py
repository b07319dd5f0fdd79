"""``GET /metrics``: Prometheus text exposition (see ``auditor_api/metrics.py``)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response
from prometheus_client import generate_latest

from kafka_audit.auditor_api.deps import ReaderDep, SettingsDep
from kafka_audit.auditor_api.metrics import CONTENT_TYPE, audit_metrics

router = APIRouter(tags=["metrics"])

EXAMPLE = """# HELP kafka_audit_lost_writes_total acknowledged writes lost
# TYPE kafka_audit_lost_writes_total counter
kafka_audit_lost_writes_total{system="kafka",topic="orders"} 2513.0
"""


@router.get("/metrics", response_class=Response, responses={200: {
    "description": "Prometheus text exposition format 0.0.4",
    "content": {"text/plain": {"schema": {"type": "string"}, "example": EXAMPLE}}}})
def metrics(request: Request, reader: ReaderDep, settings: SettingsDep) -> Response:
    """The audit's counters and gauges per topic and its system (acked, confirmed, lost,
    pending, unseen, duplicates, audit lag, unjudged records) and the API's request latency
    by route, for Prometheus to scrape."""
    body = generate_latest(request.app.state.metrics_registry) + audit_metrics(reader, settings)
    return Response(body, media_type=CONTENT_TYPE)
