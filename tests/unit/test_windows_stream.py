"""Windows as events stream in, against the pure functions on the whole timeline
(Hypothesis, random timelines).

* The pure functions are consistent with a stream: fed a timeline in time order, one
  watcher poll (one instant) at a time, a window closed on a prefix is a window of the
  whole timeline, and a window open on a prefix is, on the whole timeline, the window
  that starts there (closed later, or still open). So what the service shows while a
  window lasts is never taken back, only closed.
* The windows job (what the audit loop's upkeep runs) over a real Delta
  ``cluster_events`` table that gains the polls batch by batch: after every batch the
  ``windows`` table equals the pure functions over what has arrived, and in the end over
  the whole timeline.
"""

import tempfile
from datetime import timedelta
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafka_audit.jobs.core.model import ClusterEvent
from kafka_audit.jobs.core.windows import partition_windows

from ..support.histories import at

BROKERS = (1, 2, 3)


@st.composite
def timelines(draw):
    """Polls of one partition: (seconds, [(leader, isr)]) with increasing instants, one to
    three observations per instant (two views at one instant, as at ties), RF 3."""
    polls = []
    t = 0
    for _ in range(draw(st.integers(1, 14))):
        t += draw(st.integers(1, 20))
        views = []
        for _ in range(draw(st.integers(1, 2))):
            leader = draw(st.sampled_from((*BROKERS, -1)))
            others = draw(st.lists(st.sampled_from(BROKERS), max_size=3, unique=True))
            isr = tuple(sorted({leader, *others} - {-1})) if leader > 0 else ()
            views.append((leader, isr))
        polls.append((t, views))
    return polls, draw(st.sampled_from((None, 1, 2, 3)))


def events_of(polls) -> list[ClusterEvent]:
    return [ClusterEvent(at(t), "t", 0, "isr_change", leader, None, isr, None, BROKERS)
            for t, views in polls for leader, isr in views]


def windows(polls, min_isr):
    return partition_windows("t", 0, events_of(polls), min_isr, [], [])


def key(w):
    return (w.kind, w.start, w.end, w.opened_by, w.closed_by)


@given(timelines())
@settings(max_examples=300, deadline=None)
def test_a_window_seen_on_a_prefix_is_never_taken_back(timeline):
    polls, min_isr = timeline
    whole = windows(polls, min_isr)
    by_start = {(w.kind, w.start): w for w in whole}
    for k in range(1, len(polls) + 1):
        for w in windows(polls[:k], min_isr):
            final = by_start.get((w.kind, w.start))
            assert final is not None, f"{w.kind} from {w.start} vanished"
            if w.end is not None:
                assert key(final) == key(w)  # closed: final
            else:
                assert final.end is None or final.end > at(polls[k - 1][0])


@given(timelines(), st.data())
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_the_windows_job_follows_a_growing_events_table(timeline, data):
    from kafka_audit.jobs.upkeep.windows_job import update_windows
    from kafka_audit.settings import Settings
    from kafka_audit.store import append_rows, read_table

    polls, min_isr = timeline
    cuts = sorted(set(data.draw(st.lists(st.integers(1, len(polls)), max_size=3)))
                  | {len(polls)})
    with tempfile.TemporaryDirectory() as home:
        s = Settings(home=Path(home))
        if min_isr is not None:
            append_rows(s.table_path("cluster_events"), "cluster_events", [
                {"event_time": at(0), "topic": "t", "partition": -1, "kind": "topic_config",
                 "detail": f'{{"min.insync.replicas": "{min_isr}"}}', "source": "test"}])
        done = 0
        for cut in cuts:
            append_rows(s.table_path("cluster_events"), "cluster_events", [
                {"event_time": e.event_time, "topic": "t", "partition": 0, "kind": e.kind,
                 "leader": e.leader, "isr": list(e.isr), "replicas": list(BROKERS),
                 "source": "test"} for e in events_of(polls[done:cut])])
            done = cut
            update_windows(s, now=at(polls[-1][0]) + timedelta(seconds=1))
            want = windows(polls[:cut], min_isr)
            got = read_table(s.table_path("windows"), "windows").to_pylist()
            assert sorted((r["kind"], r["start"], r["end"], r["opened_by"], r["closed_by"])
                          for r in got) == sorted(key(w) for w in want)
