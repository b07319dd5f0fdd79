"""The ack ledger's expectations (great-expectations) over Kafka's and RabbitMQ's rows."""

from datetime import UTC, datetime, timedelta

import pandas as pd
import pytest

from kafka_audit.jobs.audit.quality import validate_acks_frame

T = datetime(2026, 11, 30, tzinfo=UTC)


def ack(topic: str, seq: int, offset: int | None, system: str | None = "kafka",
        error: int | None = None) -> dict:
    return {"run_id": "r", "producer_id": "p", "seq": seq, "count": 1, "topic": topic,
            "partition": 0, "offset": offset, "send_time": T, "ack_time": T,
            "last_ack_time": T + timedelta(milliseconds=1), "error_code": error,
            "error_name": None, "acks": "all", "idempotence": False, "retries": 2,
            "max_in_flight": 5, "leader_epoch": None, "broker": None, "system": system}


def failed(results: list[dict]) -> list[str]:
    return [r["expectation"].split("(")[0] for r in results if not r["success"]]


RABBIT = "rabbitmq:queue:%2F:orders"


def test_a_confirm_without_an_offset_passes_beside_kafkas_rows():
    rows = [ack("orders", 0, 10), ack("orders", 1, 11, system=None), ack(RABBIT, 0, None,
                                                                         "rabbitmq")]
    results = validate_acks_frame(pd.DataFrame(rows))
    assert results and failed(results) == []


@pytest.mark.parametrize("row, expectations", [
    (ack("orders", 2, None), {"expect_column_values_to_not_be_null"}),
    (ack("orders", 2, 12, "rabbitmq"), {"expect_column_pair_values_to_be_equal"}),
    (ack(RABBIT, 2, None, "kafka"), {"expect_column_pair_values_to_be_equal"}),
    (ack("orders", 2, 12, "activemq"), {"expect_column_values_to_be_in_set",
                                        "expect_column_pair_values_to_be_equal"}),
])
def test_a_row_against_its_system_fails_its_expectations(row, expectations):
    results = validate_acks_frame(pd.DataFrame([ack("orders", 0, 10), row]))
    assert set(failed(results)) == expectations


def test_prepared_from_several_threads_the_validations_are_built_once():
    """``prepare`` (the service's thread at start) and a check that runs meanwhile share one
    build: the second waits for the first rather than building its own."""
    import threading

    from kafka_audit.jobs.audit import quality

    quality._build_validations.cache_clear()
    threads = [threading.Thread(target=quality.prepare) for _ in range(3)]
    for t in threads:
        t.start()
    results = validate_acks_frame(pd.DataFrame([ack("orders", 0, 10)]))
    for t in threads:
        t.join(60)
    assert results and failed(results) == []
    assert quality._build_validations.cache_info().misses == 1
