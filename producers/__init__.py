"""Import name ``kafka_audit.producers``: the instrumented producer, its ack ledger, load."""
