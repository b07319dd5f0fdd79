"""Import name ``kafka_audit.auditor_api``: the FastAPI service over the Delta tables."""
