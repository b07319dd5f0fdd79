"""A fixture for the tests that read settings: no ``KAFKA_AUDIT_*`` variable from the
calling shell, and a fresh ``get_settings()`` either side. A test module uses it with
``from ..support.clean_env import clean_env  # noqa: F401`` (autouse there)."""

from __future__ import annotations

import os

import pytest

from kafka_audit.settings import get_settings


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    """No KAFKA_AUDIT_* variable from the calling shell; a fresh get_settings() either side."""
    for name in list(os.environ):
        if name.upper().startswith("KAFKA_AUDIT_"):
            monkeypatch.delenv(name)
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()
