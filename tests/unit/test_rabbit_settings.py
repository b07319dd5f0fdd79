"""The ``rabbitmq`` settings section (the RabbitMQ cluster ``kafka-audit run`` audits):
what it refuses, and the connection parameters it gives the reader and the publishers."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from kafka_audit.settings import RabbitmqSettings, Settings

ORDERS = "rabbitmq:queue:%2F:orders"
NODES = [{"amqp": "rmq-2:5673", "management": "http://rmq-2:15672/"},
         {"amqp": "[::1]:5672", "management": "https://rmq-1:15671"}]


def test_each_node_is_numbered_by_its_place_and_connects_to_the_queues_vhost():
    rc = RabbitmqSettings(queues=["rabbitmq:queue:billing:a", "rabbitmq:stream:billing:b"],
                          nodes=NODES, username="kaudit", password="s3cret")
    params = rc.parameters()
    assert sorted(params) == [1, 2]
    assert (params[1].host, params[1].port, params[1].virtual_host) == ("rmq-2", 5673,
                                                                        "billing")
    assert (params[2].host, params[2].port) == ("::1", 5672)
    assert params[1].credentials.username == "kaudit"
    assert rc.nodes[0].management == "http://rmq-2:15672"  # the trailing / dropped
    assert "s3cret" not in repr(rc)
    # the password, once used, is hidden from every log line and status file
    from kafka_audit.redact import scrub

    assert "s3cret" not in scrub("login refused for kaudit/s3cret")


@pytest.mark.parametrize("section, says", [
    ({"queues": ["orders"], "nodes": NODES}, "not a RabbitMQ ledger key"),
    ({"queues": [ORDERS, "rabbitmq:queue:other:x"], "nodes": NODES}, "one vhost"),
    ({"queues": [ORDERS, ORDERS], "nodes": NODES}, "named twice"),
    ({"queues": [ORDERS]}, "without rabbitmq.nodes"),
    ({"queues": [ORDERS], "nodes": [{"amqp": "rmq-1", "management": "http://rmq-1"}]},
     "not host:port"),
    ({"queues": [ORDERS], "nodes": [{"amqp": "rmq-1:5672", "management": "rmq-1:15672"}]},
     "management API base URL"),
    ({"queues": [ORDERS], "nodes": [{"amqp": "rmq-1:5672"}]}, "management"),
    ({"queues": [ORDERS], "nodes": [{"amqp": "rmq-1:5672",
                                      "management": "http://u:pw@rmq-1:15672"}]},
     "without user or password"),
    ({"queues": [ORDERS], "nodes": [{"amqp": "rmq-1:5672",
                                      "management": "http://rmq-1:15672/api?x=1"}]},
     "no path, query"),
    ({"queues": [ORDERS], "nodes": NODES, "heartbeat_seconds": 0}, "greater than 0"),
    ({"queues": [ORDERS], "nodes": NODES, "heartbeat_seconds": 60}, "at least 150"),
    ({"queues": [ORDERS], "nodes": NODES, "barrier_holdoff_seconds": 30}, "at least 90"),
])
def test_a_section_that_cannot_be_audited_is_refused_saying_why(section, says):
    with pytest.raises(ValidationError, match=says):
        Settings(rabbitmq=section)


def test_no_queues_no_rabbitmq_components():
    from kafka_audit.app.service import rabbit_components

    assert rabbit_components(Settings()) == []


def test_a_password_in_a_refused_url_is_not_shown():
    from kafka_audit.settings import describe_validation_error

    with pytest.raises(ValidationError) as err:
        Settings(rabbitmq={"queues": [ORDERS], "nodes": [
            {"amqp": "rmq-1:5672", "management": "http://kaudit:hunter2@rmq-1:15672"}]})
    said = describe_validation_error(err.value)
    assert "hunter2" not in said and "rabbitmq.nodes.0.management" in said
