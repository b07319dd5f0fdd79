"""Ledger keys of RabbitMQ queues and streams beside Kafka topics (schemas/systems.py)."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafka_audit.schemas.systems import (
    KAFKA,
    RABBITMQ,
    RabbitTarget,
    parse_rabbit_key,
    rabbit_key,
    system_of,
)

# what Kafka allows in a topic's name (Topic.LEGAL_CHARS), up to its 249 characters
kafka_topics = st.text("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-",
                       min_size=1, max_size=249)


@given(st.sampled_from(["queue", "stream"]), st.text(), st.text(min_size=1))
def test_a_key_names_its_queue_in_one_spelling_and_reads_back(kind, vhost, name):
    key = rabbit_key(kind, vhost, name)
    assert parse_rabbit_key(key) == RabbitTarget(kind, vhost, name)
    assert system_of(key) == RABBITMQ and key.count(":") == 3


@given(kafka_topics)
def test_no_kafka_topic_reads_as_a_rabbitmq_key(topic):
    assert system_of(topic) == KAFKA
    with pytest.raises(ValueError):
        parse_rabbit_key(topic)


def test_a_vhost_or_name_with_separators_cannot_split_the_key():
    key = rabbit_key("queue", "/", "orders:eu/1")
    assert key == "rabbitmq:queue:%2F:orders%3Aeu%2F1"
    assert parse_rabbit_key(key) == RabbitTarget("queue", "/", "orders:eu/1")


@pytest.mark.parametrize("key", [
    "rabbitmq:queue:%2F", "rabbitmq:exchange:%2F:x", "rabbitmq:queue:%2F:",
    "rabbitmq:queue:/:x", "rabbitmq:queue:%2f:x", "rabbitmq:queue:%2F:%FF",
    "rabbitmq:queue:%2F:a:b"])
def test_a_string_that_is_not_a_key_in_its_one_spelling_is_refused(key):
    with pytest.raises(ValueError):
        parse_rabbit_key(key)


def test_a_key_needs_a_kind_and_a_name():
    with pytest.raises(ValueError, match="queue or a stream"):
        rabbit_key("exchange", "/", "x")
    with pytest.raises(ValueError, match="name"):
        rabbit_key("queue", "/", "")
