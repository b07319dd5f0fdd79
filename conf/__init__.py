"""Import name ``kafka_audit.conf``: configuration files read as package data."""
