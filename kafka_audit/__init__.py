"""Import name ``kafka_audit``: the namespace root (CLI, settings, errors, clients, tables).

Kafka durability auditor: proves, message by message, whether acked writes survived.
"""

__version__ = "0.1.0"
