"""One exception hierarchy with stable codes; anomalies are values, never exceptions."""

from __future__ import annotations


class AuditorError(Exception):
    """Raised when the auditor itself cannot do what it was asked; carries a stable code."""

    code = "auditor_error"

    def __init__(self, message: str) -> None:
        super().__init__(f"[{self.code}] {message}")
        self.message = message


class ConfigError(AuditorError):
    """Raised when a setting is missing, unsafe or malformed."""

    code = "config"


class JarsMissing(AuditorError):
    """Raised when the pinned JVM jars are not in the cache and cannot be fetched."""

    code = "jars_missing"


class ClusterError(AuditorError):
    """Raised when the local Kafka cluster cannot be formatted, started or reached."""

    code = "cluster"


class LedgerWriteError(AuditorError):
    """Raised when the ack ledger cannot be written to its Delta table (acks stay spooled)."""

    code = "ledger_write"


class TableError(AuditorError):
    """Raised when a Delta table exists but is not the one this version declares."""

    code = "table"


class NotSettled(AuditorError):
    """Raised when ``audit --until-settled`` still has writes pending at its deadline."""

    code = "not_settled"
