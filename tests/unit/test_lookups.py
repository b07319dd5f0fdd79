"""The cleanup-policy lookup never holds a pass on a refresh (pure caching logic; the admin
client is a stand-in whose answers the test controls)."""

from __future__ import annotations

import logging
from concurrent.futures import Future
from types import SimpleNamespace

import pytest

from kafka_audit.jobs.audit import lookups
from kafka_audit.jobs.audit.lookups import ClusterLookups


class Admin:
    """Records each ask; its futures are resolved by the test."""

    def __init__(self) -> None:
        self.asks: list[tuple[list[str], Future]] = []

    def describe_configs(self, resources, request_timeout):
        out = {}
        for r in resources:
            fut: Future = Future()
            self.asks.append((r.name, fut))
            out[r] = fut
        return out

    def answer(self, policy: str) -> None:
        self.asks[-1][1].set_result({"cleanup.policy": SimpleNamespace(value=policy)})


@pytest.fixture
def clock(monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(lookups.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(lookups, "POLICY_WAIT_SECONDS", 0.05)
    return now


def test_a_refresh_is_answered_from_the_last_answer_while_it_is_asked(clock, caplog):
    admin = Admin()
    lk = ClusterLookups(settings=None)
    lk._client = admin

    # never answered: the pass waits for the first answer (here: none comes, unknown)
    assert lk.policies({"t"}) == (frozenset(), frozenset({"t"}))
    assert len(admin.asks) == 1
    admin.answer("compact")
    assert lk.policies({"t"}) == (frozenset({"t"}), frozenset())
    assert len(admin.asks) == 1  # fresh: not asked again

    # 30 s on: asked again, and the pass gets the last answer without waiting for it
    clock[0] += lookups.POLICY_FRESH_SECONDS
    assert lk.policies({"t"}) == (frozenset({"t"}), frozenset())
    assert len(admin.asks) == 2
    assert lk.policies({"t"}) == (frozenset({"t"}), frozenset())
    assert len(admin.asks) == 2  # one ask in flight at a time

    # the broker it went to died: the ask fails, the old answer serves, no ask for 5 s
    admin.asks[-1][1].set_exception(RuntimeError("request timed out"))
    with caplog.at_level(logging.WARNING):
        assert lk.policies({"t"}) == (frozenset({"t"}), frozenset())
    assert "cleanup.policy of t unknown: request timed out" in caplog.text
    clock[0] += lookups.POLICY_RETRY_SECONDS - 1
    lk.policies({"t"})
    assert len(admin.asks) == 2
    clock[0] += 1
    lk.policies({"t"})
    assert len(admin.asks) == 3
    admin.answer("delete")  # the policy changed: a later pass sees it
    assert lk.policies({"t"}) == (frozenset(), frozenset())


def test_an_answer_too_old_makes_the_topic_unknown(clock):
    admin = Admin()
    lk = ClusterLookups(settings=None)
    lk._client = admin
    lk.policies({"t"})
    admin.answer("compact")
    assert lk.policies({"t"}) == (frozenset({"t"}), frozenset())
    clock[0] += lookups.POLICY_STALE_SECONDS + 1  # every ask since has gone unanswered
    assert lk.policies({"t"}) == (frozenset(), frozenset({"t"}))
