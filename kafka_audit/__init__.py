"""Import name ``kafka_audit``: the namespace root. Its own files are the ground floor
(settings, profile, errors, Kafka clients, the table layer ``store``, the jars, status
files, the secrets rule); the application (the CLI, the service) is ``kafka_audit.app``.

Kafka durability auditor: proves, message by message, whether acked writes survived.
"""

__version__ = "0.1.0"
