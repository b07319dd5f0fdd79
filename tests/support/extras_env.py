"""A virtual environment holding one extra of the project and nothing more.

The environment's third-party packages are links to the distributions this test
environment already has (nothing is downloaded), but only those that the extra's
requirements reach, transitively, read from the built wheel's own metadata. pip then
installs the wheel with that extra from no index at all: it succeeds only if the linked
distributions satisfy every requirement, so the environment is exactly what
``pip install 'kafka-audit[extra]'`` would give.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import zipfile
from email.parser import Parser
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]


def build_wheel(dist: Path) -> Path:
    """The project's wheel, built from the checkout into ``dist``. One build at a time on a
    checkout: pip builds in the source tree (``build/``, the egg-info), and the test lanes
    of ``bash dev.sh test`` each build one (tests/spark and tests/cluster)."""
    lock = ROOT / "var" / "wheel-build.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "-q",
                        "-w", str(dist)], check=True, timeout=600)
    return next(dist.glob("kafka_audit-*.whl"))


def _wheel_requirements(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as z:
        name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        meta = Parser().parsestr(z.read(name).decode())
    return meta.get_all("Requires-Dist") or []


def _wanted(requirement: Requirement, extras: set[str]) -> bool:
    if requirement.marker is None:
        return True
    return any(requirement.marker.evaluate({"extra": e}) for e in extras | {""})


def closure(requirements: list[str], extras: set[str]) -> dict[str, set[str]]:
    """The installed distributions (canonical name -> extras asked of it) that
    ``requirements`` reach with ``extras`` asked of their owner."""
    found: dict[str, set[str]] = {}
    todo = [(Requirement(r), extras) for r in requirements]
    while todo:
        req, asked = todo.pop()
        if not _wanted(req, asked):
            continue
        name = canonicalize_name(req.name)
        if name == "kafka-audit":  # [all] names the project's own extras: follow them
            todo += [(Requirement(r), set(req.extras)) for r in requirements]
            continue
        before = found.get(name)
        if before is not None and req.extras <= before:
            continue
        found[name] = (before or set()) | set(req.extras)
        try:
            dist = distribution(req.name)
        except PackageNotFoundError as exc:
            raise AssertionError(f"{req.name} is not installed in the test environment") from exc
        todo += [(Requirement(r), found[name]) for r in dist.requires or []]
    return found


def make_env(where: Path, wheel: Path, extra: str) -> tuple[Path, set[str]]:
    """A venv at ``where`` with ``wheel[extra]`` installed; its python and its packages."""
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True, timeout=120)
    py = where / "bin" / "python"
    site = Path(subprocess.run([str(py), "-c", "import site; print(site.getsitepackages()[0])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    wanted = closure(_wheel_requirements(wheel), {extra})
    for name in wanted:
        dist = distribution(name)
        for top in sorted({Path(f).parts[0] for f in dist.files or []} - {".."}):
            link = site / top
            if link.is_symlink() or link.exists():
                assert link.resolve() == Path(dist.locate_file(top)).resolve(), (name, top)
                continue
            link.symlink_to(dist.locate_file(top))
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-index",
                    f"{wheel}[{extra}]"], check=True, timeout=300)
    return py, set(wanted)


def importable(py: Path, modules: tuple[str, ...]) -> list[str]:
    """Those of ``modules`` that the environment of ``py`` can import."""
    return [m for m in modules if subprocess.run([str(py), "-c", f"import {m}"],
                                                 capture_output=True, timeout=120).returncode == 0]


def clean_env(**more: str) -> dict[str, str]:
    """This process's environment without any ``KAFKA_AUDIT_`` setting, plus ``more``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAFKA_AUDIT_")}
    return {**env, **more}
