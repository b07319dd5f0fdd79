"""``GET /v1/quality``: great-expectations results over the bronze tables."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel

from kafka_audit.auditor_api.deps import ReaderDep
from kafka_audit.schemas.tables import row_model

router = APIRouter(prefix="/v1", tags=["quality"])


QualityResult = row_model("dq_results", "QualityResult")


class QualityReport(BaseModel):
    validations: int
    failures: list[QualityResult]  # type: ignore[valid-type]


@router.get("/quality", response_model=QualityReport, responses={200: {"content": {
    "application/json": {"example": {"validations": 12, "failures": [{
        "validated_at": "2026-11-22T07:51:40Z", "table_name": "acks", "table_version": 41,
        "expectation": "offset not null when acked", "success": False, "element_count": 3,
        "unexpected_count": 1, "details": "{\"partial_unexpected_list\": [null]}"}]}}}}})
def quality(reader: ReaderDep, failed_only: bool = True) -> QualityReport:
    rows = reader.read("dq_results").to_pylist()
    shown = [r for r in rows if not (failed_only and r["success"])]
    return QualityReport(validations=len(rows), failures=[QualityResult(**r) for r in shown])
