"""Import name ``kafka_audit.jobs``: the auditor's work, in five parts. ``core`` is the pure
verdict core; ``consume``, ``audit``, ``watcher`` and ``upkeep`` run against Spark, Kafka
and the tables. ``spark`` (the session) and ``sink`` (Spark's Delta writer) are shared by the
Spark parts."""
