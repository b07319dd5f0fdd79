"""Import name ``kafka_audit.deploy``: pinned jars, the local KRaft cluster launcher."""
