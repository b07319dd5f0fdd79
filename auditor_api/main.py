"""The FastAPI app: wires the routers, nothing else. Run: ``kafka-audit serve``."""

from __future__ import annotations

from fastapi import FastAPI

from kafka_audit import __version__
from kafka_audit.auditor_api.routes import findings, health, quality


def create_app() -> FastAPI:
    app = FastAPI(title="Kafka durability auditor", version=__version__,
                  description="Acknowledged-but-lost writes and their evidence, from Delta tables.")
    app.include_router(health.router)
    app.include_router(findings.router)
    app.include_router(quality.router)
    return app


app = create_app()
