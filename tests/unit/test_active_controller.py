"""``LocalCluster.active_controller``: the quorum leader from the nodes' election files."""

import json

from kafka_audit.scenarios.cluster import LocalCluster
from kafka_audit.settings import Settings


def node(cluster: LocalCluster, n: int, state: dict | str | None) -> None:
    d = cluster.meta_dir(n) / "__cluster_metadata-0"
    d.mkdir(parents=True)
    if state is not None:
        text = state if isinstance(state, str) else json.dumps(state)
        (d / "quorum-state").write_text(text)


def test_the_newest_epochs_leader_among_running_nodes(tmp_path):
    c = LocalCluster(Settings(home=tmp_path))
    node(c, 1, {"leaderId": 1, "leaderEpoch": 4})
    node(c, 2, {"leaderId": 3, "leaderEpoch": 6})  # heard of the newer election
    node(c, 3, {"leaderId": 2, "leaderEpoch": 9})  # stopped: not asked
    assert c.active_controller([1, 2]) == 3
    assert c.active_controller([1, 2, 3]) == 2


def test_unreadable_or_leaderless_states_are_passed_over(tmp_path):
    c = LocalCluster(Settings(home=tmp_path))
    node(c, 1, '{"leaderId": 2, "leaderEp')  # half written
    node(c, 2, {"leaderId": -1, "leaderEpoch": 12, "votedId": 2})  # an election under way
    node(c, 3, {"leaderId": 2, "leaderEpoch": 11})
    assert c.active_controller([1, 2, 3]) == 2


def test_none_when_no_node_knows_a_leader(tmp_path):
    c = LocalCluster(Settings(home=tmp_path))
    node(c, 1, None)
    node(c, 2, {"leaderId": -1, "leaderEpoch": 3})
    assert c.active_controller([1, 2]) is None
    assert c.active_controller([]) is None
