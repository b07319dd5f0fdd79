"""Import name ``kafka_audit.jobs``: the Spark jobs, the watcher, the pure rules they share."""
