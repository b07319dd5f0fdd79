"""Each local broker in a cgroup of its own, so a fault can tell its traffic from the others'.

On one machine every broker talks to every other over loopback, from 127.0.0.1 and
an ephemeral port: an iptables rule cannot say whose connection it is by address or
port (``../shared/FIELD-NOTES.md``). It can by the process's cgroup: iptables'
``cgroup --path`` match (cgroup v2) sees the cgroup of the socket's owner. So
:class:`~kafka_audit.scenarios.cluster.LocalCluster` starts each broker inside
``kafka-audit/<cluster>/node<N>`` of the cgroup v2 hierarchy, when the machine has
one it may write (root, as the fault tests run), and
:func:`~kafka_audit.scenarios.faults.isolate` cuts one node's paths to the others
while its clients still reach it. Without cgroup v2 the brokers start as before and
only the isolation faults are refused, with one line.

A socket belongs to the cgroup of the process that created it, when it was created:
hence from the start (moving a running broker would leave its open connections out).
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cgroup2_root", "node_cgroup", "prepare", "join_fn", "remove"]


#: where the hierarchy is mounted when the machine has not (root may mount it)
OWN_MOUNT = Path("/run/kafka-audit-cgroup2")


def _mounted() -> Path | None:
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return None
    for line in mounts:
        fields = line.split()
        if len(fields) >= 3 and fields[2] == "cgroup2":
            root = Path(fields[1])
            if os.access(root, os.W_OK):
                return root
    return None


def cgroup2_root() -> Path | None:
    """Where the cgroup v2 hierarchy is mounted and this process may write it; as root on
    a machine that mounts none, mounted at :data:`OWN_MOUNT` (one hierarchy: the same
    tree iptables matches); None if neither works."""
    root = _mounted()
    if root is not None or os.geteuid() != 0:
        return root
    import subprocess

    try:
        OWN_MOUNT.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "cgroup2", "none", str(OWN_MOUNT)], check=True,
                       capture_output=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return _mounted()


def node_cgroup(cluster: str, node: int) -> str:
    """A node's cgroup, relative to the cgroup v2 root (what iptables' ``--path`` takes)."""
    return f"kafka-audit/{cluster}/node{node}"


def prepare(relative: str) -> Path | None:
    """Make the cgroup; its directory, or None without a writable cgroup v2 hierarchy."""
    root = cgroup2_root()
    if root is None:
        return None
    path = root / relative
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return path


def join_fn(path: Path):
    """A ``preexec_fn`` that moves the new process into the cgroup at ``path`` before it
    runs the broker (every socket it makes then belongs there)."""
    procs = str(path / "cgroup.procs")

    def join() -> None:
        with open(procs, "w") as f:
            f.write(str(os.getpid()))

    return join


def remove(relative: str) -> None:
    """Remove a cgroup left empty (its broker stopped); anything else is left as it is."""
    root = cgroup2_root()
    if root is None:
        return
    path = root / relative
    for p in (path, path.parent, path.parent.parent):
        try:
            p.rmdir()
        except OSError:
            return
