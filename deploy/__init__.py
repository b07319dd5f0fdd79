"""Import name ``kafka_audit.deploy``: what a deployer uses, carried as data: the systemd
unit, the Maven files that pin the JVM jars (``maven/``), example alert rules and the BI
example queries (``sql/``). No code: the local test cluster is ``kafka_audit.scenarios``."""
