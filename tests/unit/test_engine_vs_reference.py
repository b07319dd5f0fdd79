"""The streaming engine (runs, segments, hot state, eviction) against the brute-force
reference (single messages, whole history) on random histories: exactly equal."""

from hypothesis import HealthCheck, given, settings

from kafka_audit.jobs.core.engine import AuditConfig, InMemoryAuditor
from kafka_audit.jobs.core.model import AckRun, ClusterEvent, ReadRun
from kafka_audit.jobs.core.reference import finding_messages, reference_verdicts

from ..support.random_histories import histories, log_end_fn
from ..support.sizes import examples

CFG = AuditConfig(settle_seconds=5, lookback_seconds=3, unseen_after_seconds=20,
                  read_retention_seconds=200, compacted_topics=frozenset({"c"}),
                  unknown_policy_topics=frozenset({"u"}))


def fed_passes(rows, passes):
    """Per pass of a history: ``(now, the rows that arrived since the pass before, the log
    ends the pass sees)``."""
    fed = 0
    ordered = sorted(rows, key=lambda x: x[0])
    log_end = log_end_fn(rows)
    keys = {(r.topic, r.partition) for _w, r in rows}
    for now in passes:
        new = [row for when, row in ordered[fed:] if when <= now]
        fed += len(new)
        yield now, new, {k: e for k in keys if (e := log_end(*k, now)) is not None}


def run_engine(rows, passes, cfg=CFG):
    auditor = InMemoryAuditor(cfg)
    for now, new, ends in fed_passes(rows, passes):
        auditor.run_pass(now, [r for r in new if isinstance(r, AckRun)],
                         [r for r in new if isinstance(r, ReadRun)],
                         [r for r in new if isinstance(r, ClusterEvent)], ends)
    return auditor


@settings(max_examples=examples(3000), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories(topics=("t", "c", "u")))
def test_engine_equals_reference(history):
    rows, passes = history
    auditor = run_engine(rows, passes)
    assert finding_messages(auditor.findings) == reference_verdicts(rows, passes, CFG,
                                                                    log_end_fn(rows))


@settings(max_examples=examples(500), deadline=None)
@given(histories())
def test_every_acked_message_is_judged_at_most_once(history):
    rows, passes = history
    auditor = run_engine(rows, passes)
    primary = [m for m in finding_messages(auditor.findings)
               if m[0] not in ("duplicate", "reordered")]
    keys = [(m[3], m[4], m[6], m[7], m[8]) for m in primary]
    assert len(keys) == len(set(keys))
