"""Import name ``kafka_audit.schemas``: every table, the stamp, the verdicts, declared once."""
