"""What every confluent-kafka client of this project shares."""

from __future__ import annotations

import logging

__all__ = ["LIBRDKAFKA_LOGGER", "client_logger"]

LIBRDKAFKA_LOGGER = "kafka_audit.librdkafka"


def client_logger() -> logging.Logger:
    """librdkafka logs (connection refused while a broker is down, ...) go to Python logging."""
    return logging.getLogger(LIBRDKAFKA_LOGGER)
