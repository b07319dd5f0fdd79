"""The service's REST API as the service tests ask it."""

from __future__ import annotations

import httpx

__all__ = ["summary"]


def summary(settings, topic: str) -> dict | None:
    """``GET /v1/summary?topic=`` of the API ``settings`` name; None while it does not
    answer, or answers other than 200 (a topic it does not know yet)."""
    try:
        r = httpx.get(f"http://{settings.api.host}:{settings.api.port}/v1/summary",
                      params={"topic": topic}, timeout=10)
    except httpx.HTTPError:
        return None
    return r.json() if r.status_code == 200 else None
