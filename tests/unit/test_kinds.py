"""Every kind of cluster event and of window is declared once (``schemas/events.py``): the
watcher names no other, and the tables' docs and the API's enum list exactly those."""

import ast
import itertools
from pathlib import Path

from kafka_audit.auditor_api.routes.partitions import LeaderChange
from kafka_audit.auditor_api.routes.windows import WindowRow
from kafka_audit.jobs.watcher.watcher import PartitionView, diff_partition
from kafka_audit.schemas import events
from kafka_audit.schemas.events import EVENTS, LEADER_CHANGES, WINDOWS
from kafka_audit.schemas.tables import TABLES

ROOT = Path(__file__).resolve().parents[2]
#: the modules that write ``cluster_events`` rows
WATCHER = ("jobs/watcher/watcher.py", "jobs/watcher/metadata_log.py",
           "jobs/watcher/broker_views.py", "jobs/watcher/epoch_ends.py",
           "jobs/watcher/rabbit_watcher.py")


def _documented(table: str) -> list[str]:
    """The kinds the docs of ``table``'s ``kind`` column name, in their order."""
    doc = next(c.doc for c in TABLES[table] if c.name == "kind")
    return [part.split(" (")[0] for part in doc.split(" | ")]


def _imported_kinds(tree: ast.Module) -> set[str]:
    """The kinds a module takes from the declaration (its imports of ``schemas.events``)."""
    return {getattr(events, a.name) for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module == "kafka_audit.schemas.events"
            for a in node.names if getattr(events, a.name) in EVENTS}


def _spelled_out(tree: ast.Module) -> list[str]:
    """Kinds a module spells out as text instead of naming the declaration: a declared
    kind as a string, a string as a row's ``"kind"`` or appended to ``kinds``."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and node.value in EVENTS:
            out.append(node.value)
        elif isinstance(node, ast.Dict):
            out += [v.value for k, v in zip(node.keys, node.values, strict=True)
                    if isinstance(k, ast.Constant) and k.value == "kind"
                    and isinstance(v, ast.Constant)]
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "append" and isinstance(node.func.value, ast.Name)
              and node.func.value.id == "kinds"):
            out += [c.value for a in node.args for c in ast.walk(a)
                    if isinstance(c, ast.Constant) and isinstance(c.value, str)]
    return out


def test_the_watcher_writes_the_declared_kinds_and_names_each_from_the_declaration():
    trees = {path: ast.parse((ROOT / path).read_text()) for path in WATCHER}
    assert {path: _spelled_out(t) for path, t in trees.items()} == {p: [] for p in WATCHER}
    assert set().union(*map(_imported_kinds, trees.values())) == set(EVENTS)


def test_every_partition_change_the_watcher_sees_is_a_declared_kind():
    """Every change between small partition views (three replicas, leaders and ISRs
    of all sorts, epochs, min.insync.replicas known or not) gives declared kinds only,
    and every kind ``diff_partition`` documents shows up."""
    isrs = [s for n in range(4) for s in itertools.combinations((1, 2, 3), n)]
    views = [None] + [PartitionView(leader, isr, (1, 2, 3), epoch)
                      for leader in (-1, 1, 2) for isr in isrs for epoch in (None, 1, 2)]
    seen = {k for before in views for after in views[1:] for min_isr in (None, 2)
            for k in diff_partition(before, after, min_isr)}
    assert seen <= set(EVENTS)
    assert {"first_seen", "leader_change", "leader_reelected", "offline", "unclean_election",
            "isr_shrink", "isr_expand", "under_min_isr_enter", "under_min_isr_exit",
            "isr_alone_enter", "isr_alone_exit"} <= seen


def test_the_tables_docs_list_every_declared_kind():
    assert _documented("cluster_events") == list(EVENTS)
    assert _documented("windows") == list(WINDOWS)
    layouts = (ROOT / "deploy/sql/TABLES.md").read_text()
    assert all(f"{kind} ({meaning})" in layouts
               for kind, meaning in [*EVENTS.items(), *WINDOWS.items()])


def test_the_api_enums_are_the_declared_ones():
    assert WindowRow.model_json_schema()["properties"]["kind"]["enum"] == list(WINDOWS)
    assert LeaderChange.model_fields["kind"].description == " | ".join(LEADER_CHANGES)
    assert set(LEADER_CHANGES) <= set(EVENTS)
