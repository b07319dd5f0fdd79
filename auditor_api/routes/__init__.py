"""Import name ``kafka_audit.auditor_api.routes``: one router per resource."""
