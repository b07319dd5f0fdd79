"""How ``kafka-audit`` writes its log lines: :class:`JsonLines` for ``--log-json``.

Here, below the CLI, so that the API process (``kafka_audit/app/api_process.py``), which the
service starts, can tell the CLI's formatter from a test runner's without importing the
CLI (which imports the service).
"""

from __future__ import annotations

import json
import logging

__all__ = ["JsonLines"]


class JsonLines(logging.Formatter):
    """One JSON object a line: time, level, logger, message (``--log-json``)."""

    def format(self, record: logging.LogRecord) -> str:
        out = {"time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S%z"),
               "level": record.levelname, "logger": record.name,
               "message": record.getMessage()}
        if record.exc_info:  # exc_text: the traceback with secrets hidden (ScrubFilter)
            out["traceback"] = record.exc_text or self.formatException(record.exc_info)
        return json.dumps(out)
