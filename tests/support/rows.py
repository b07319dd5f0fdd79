"""Rows of the ack ledger (``acks``) as the tables take them, for tests over real Delta."""

from datetime import UTC, datetime

T = datetime(2026, 1, 1, tzinfo=UTC)


def ledger_row(seq: int, topic: str = "t") -> dict:
    """One acknowledged write of producer ``p``'s run ``r`` at offset ``seq`` of partition 0."""
    return {"run_id": "r", "producer_id": "p", "seq": seq, "count": 1, "topic": topic,
            "partition": 0, "offset": seq, "send_time": T, "ack_time": T,
            "last_ack_time": T, "acks": "all", "idempotence": False, "retries": 2,
            "max_in_flight": 5}
