"""``GET /v1/quality``: great-expectations results over the bronze tables."""

from __future__ import annotations

from datetime import datetime

from fastapi import APIRouter
from pydantic import BaseModel

from kafka_audit.auditor_api.deps import ReaderDep

router = APIRouter(prefix="/v1", tags=["quality"])


class QualityResult(BaseModel):
    validated_at: datetime
    table_name: str
    table_version: int
    expectation: str
    success: bool
    element_count: int | None
    unexpected_count: int | None
    details: str | None


class QualityReport(BaseModel):
    validations: int
    failures: list[QualityResult]


@router.get("/quality", response_model=QualityReport)
def quality(reader: ReaderDep, failed_only: bool = True) -> QualityReport:
    rows = reader.read("dq_results").to_pylist()
    shown = [r for r in rows if not (failed_only and r["success"])]
    return QualityReport(validations=len(rows), failures=[QualityResult(**r) for r in shown])
