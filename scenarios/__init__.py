"""Import name ``kafka_audit.scenarios``: fault scenarios run against a real cluster and
judged against ground truth (the demo, the real-cluster tests and the benchmarks use it),
and the local KRaft cluster they run on (``cluster``, ``security``, ``cgroups``)."""
