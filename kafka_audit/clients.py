"""Every confluent-kafka client of the project is built here.

:func:`cluster_config` is how the auditor reaches the audited cluster: its
connection profile (``kafka_audit/profile.py``) as librdkafka properties, the
local cluster's bootstrap when the profile names none. The builders take that
(or, for the local cluster's own launcher and fault tools, a bare bootstrap).
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

__all__ = ["LIBRDKAFKA_LOGGER", "client_logger", "cluster_config", "admin_client",
           "consumer_config", "producer_config"]

LIBRDKAFKA_LOGGER = "kafka_audit.librdkafka"

Target = str | dict[str, Any]  # a bootstrap, or client properties (cluster_config's)


def client_logger() -> logging.Logger:
    """librdkafka logs (connection refused while a broker is down, ...) go to Python logging."""
    return logging.getLogger(LIBRDKAFKA_LOGGER)


def cluster_config(settings) -> dict[str, Any]:
    """The audited cluster's profile as librdkafka properties (secrets resolved: never log
    them; :func:`kafka_audit.profile.describe` redacts)."""
    from kafka_audit.profile import librdkafka_config

    return librdkafka_config(settings.profile, settings.cluster.bootstrap)


def _base(target: Target) -> dict[str, Any]:
    conf = {"bootstrap.servers": target} if isinstance(target, str) else dict(target)
    return {**conf, "logger": client_logger()}


def admin_client(target: Target, **overrides: Any):
    """An ``AdminClient``; keep it referenced while its futures resolve."""
    from confluent_kafka.admin import AdminClient

    return AdminClient({**_base(target), **overrides})


def consumer_config(target: Target, group_prefix: str, **overrides: Any) -> dict[str, Any]:
    """A plain consumer that reads what the broker stored (``read_uncommitted``: aborted
    records and all), in a group of its own, committing nothing."""
    return {**_base(target), "group.id": f"{group_prefix}-{uuid.uuid4()}",
            "enable.auto.commit": False, "isolation.level": "read_uncommitted", **overrides}


def producer_config(target: Target, **overrides: Any) -> dict[str, Any]:
    return {**_base(target), **overrides}
