"""The RabbitMQ watcher's diff (jobs/watcher/rabbit_watcher.py): what changed between two
views of a queue and of the nodes, as cluster_events rows."""

from datetime import UTC, datetime

from kafka_audit.jobs.watcher.rabbit_watcher import (
    NodeView,
    QueueView,
    diff_rabbit,
    merge_views,
    queue_view,
)
from kafka_audit.schemas.events import EVENTS
from kafka_audit.schemas.systems import rabbit_key

Q = rabbit_key("queue", "/", "ha.orders")
AT = datetime(2026, 11, 30, tzinfo=UTC)
N = {f"rabbit-{n}@h": n for n in (1, 2, 3)}
UP = {name: NodeView(True, 1000) for name in N}


def kinds(rows):
    return [(r["kind"], r["leader"], r["previous_leader"]) for r in rows]


def q(leader, synced, replicas=("rabbit-1@h", "rabbit-2@h", "rabbit-3@h")):
    return QueueView(leader and f"rabbit-{leader}@h", tuple(replicas),
                     tuple(f"rabbit-{n}@h" for n in synced))


def test_the_management_apis_answers_become_views():
    classic = queue_view({"type": "classic", "node": "rabbit-1@h",
                          "slave_nodes": ["rabbit-3@h", "rabbit-2@h"],
                          "synchronised_slave_nodes": ["rabbit-3@h"]})
    assert classic == QueueView("rabbit-1@h", ("rabbit-1@h", "rabbit-2@h", "rabbit-3@h"),
                                ("rabbit-1@h", "rabbit-3@h"))
    quorum = queue_view({"type": "quorum", "leader": "rabbit-2@h", "node": None,
                         "members": ["rabbit-1@h", "rabbit-2@h"], "online": ["rabbit-2@h"]})
    assert quorum == QueueView("rabbit-2@h", ("rabbit-1@h", "rabbit-2@h"), ("rabbit-2@h",))
    assert queue_view({"type": "classic", "node": "rabbit-1@h"}).synced == ("rabbit-1@h",)


def test_a_promotion_of_an_unsynchronised_mirror_is_an_unclean_election():
    rows = diff_rabbit(Q, N, q(1, (1,)), q(2, (2,)), UP, UP, AT)
    assert kinds(rows) == [("leader_change", 2, 1), ("unclean_election", 2, 1)]
    assert rows[1]["previous_isr"] == [1] and rows[1]["source"] == "rabbit:management"
    clean = diff_rabbit(Q, N, q(1, (1, 2)), q(2, (2,)), UP, UP, AT)
    assert kinds(clean) == [("leader_change", 2, 1)]


def test_first_sight_a_queue_gone_no_leader_and_sync_changes():
    assert kinds(diff_rabbit(Q, N, None, q(1, (1,)), {}, UP, AT, seen=False)) == [
        ("first_seen", 1, None)]
    assert kinds(diff_rabbit(Q, N, q(1, (1,)), None, UP, UP, AT)) == [
        ("rabbit_queue_gone", None, 1)]
    assert kinds(diff_rabbit(Q, N, q(1, (1,)), q(None, ()), UP, UP, AT)) == [
        ("offline", None, 1)]
    assert kinds(diff_rabbit(Q, N, q(1, (1, 2)), q(1, (1,)), UP, UP, AT)) == [
        ("isr_shrink", 1, None)]
    assert kinds(diff_rabbit(Q, N, q(1, (1,)), q(1, (1, 3)), UP, UP, AT)) == [
        ("isr_expand", 1, None)]
    assert diff_rabbit(Q, N, q(1, (1,)), q(1, (1,)), UP, UP, AT) == []


def test_nodes_down_up_restarted_and_cut_off_are_each_queues_events():
    down = {**UP, "rabbit-2@h": NodeView(False)}
    assert kinds(diff_rabbit(Q, N, q(1, (1,)), q(1, (1,)), UP, down, AT)) == [
        ("rabbit_node_down", 2, None)]
    assert kinds(diff_rabbit(Q, N, q(1, (1,)), q(1, (1,)), down, UP, AT)) == [
        ("rabbit_node_up", 2, None)]
    # back between two polls: its uptime went back
    again = {**UP, "rabbit-3@h": NodeView(True, 10)}
    rows = diff_rabbit(Q, N, q(1, (1,)), q(1, (1,)), UP, again, AT)
    assert kinds(rows) == [("rabbit_node_up", 3, None)] and '"restarted": true' in \
        rows[0]["detail"]
    cut = {**UP, "rabbit-3@h": NodeView(True, 2000, ("rabbit-1@h",))}
    assert kinds(diff_rabbit(Q, N, q(1, (1,)), q(1, (1,)), UP, cut, AT)) == [
        ("rabbit_partition", 3, None)]
    healed = {**UP, "rabbit-3@h": NodeView(True, 2500)}
    assert kinds(diff_rabbit(Q, N, q(1, (1,)), q(1, (1,)), cut, healed, AT)) == [
        ("rabbit_partition_end", 3, None)]


def test_every_kind_written_is_declared():
    views = [None, q(1, (1,)), q(2, (2,)), q(2, (1, 2)), q(None, ())]
    nodes = [UP, {**UP, "rabbit-2@h": NodeView(False)},
             {**UP, "rabbit-1@h": NodeView(True, 5, ("rabbit-2@h",))}]
    written = {r["kind"] for b in views for a in views for nb in nodes for na in nodes
               for r in diff_rabbit(Q, N, b, a, nb, na, AT)}
    assert written <= set(EVENTS) and len(written) >= 10


def view(running: set[int], partitions: dict[int, list[int]] | None = None) -> list[dict]:
    """One node's ``/api/nodes`` rows: which nodes it sees running."""
    return [{"name": f"rabbit-{n}@h", "running": n in running, "uptime": 1000,
             "partitions": [f"rabbit-{p}@h" for p in (partitions or {}).get(n, ())]}
            for n in (1, 2, 3)]


def test_a_cut_is_seen_live_when_two_views_disagree_crosswise():
    """Node 3 cut off: it sees itself alone, nodes 1 and 2 see it gone. RabbitMQ 3.10
    names no partition until the cut heals; the crosswise views are the cut."""
    merged = merge_views([view({1, 2}), view({1, 2}), view({3})])
    assert {k: v.partitions for k, v in merged.items()} == {
        "rabbit-1@h": ("rabbit-3@h",), "rabbit-2@h": ("rabbit-3@h",),
        "rabbit-3@h": ("rabbit-1@h", "rabbit-2@h")}
    assert all(v.running for v in merged.values())  # each side sees itself running


def test_a_stopped_or_booting_node_is_no_cut_and_reported_partitions_are_kept():
    # node 3 stopped: no view of its own
    assert not any(v.partitions for v in merge_views([view({1, 2}), view({1, 2})]).values())
    # node 3 booting: its view sees the others running, theirs not it yet
    assert not any(v.partitions for v in merge_views([view({1, 2}), view({1, 2, 3})]).values())
    healed = merge_views([view({1, 2, 3}, {1: [3]})])
    assert healed["rabbit-1@h"].partitions == ("rabbit-3@h",)
    assert healed["rabbit-3@h"].partitions == ()


def test_a_poll_without_the_queues_answer_leaves_its_node_events_to_the_next(
        tmp_path, monkeypatch):
    """Node 2 goes down in a poll that got no answer for the queue: the node event is
    written at the next poll that has one, not lost (the views scripted; the table real)."""
    from kafka_audit.jobs.watcher.rabbit_watcher import RabbitWatcher

    w = RabbitWatcher(str(tmp_path / "cluster_events"), {1: "http://127.0.0.1:9"}, [Q],
                      "guest", "guest", numbers=N)
    down = {**UP, "rabbit-2@h": NodeView(False)}
    views = iter([UP, down, down])
    answers = iter([(True, q(1, (1,))), (False, None), (True, q(1, (1,)))])
    monkeypatch.setattr(w, "_nodes", lambda: next(views))
    monkeypatch.setattr(w, "_queue", lambda _key: next(answers))
    assert kinds(w.poll_once()) == [("first_seen", 1, None)]
    assert w.poll_once() == []
    assert kinds(w.poll_once()) == [("rabbit_node_down", 2, None)]
