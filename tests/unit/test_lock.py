"""The lock file and the package's ranges agree, and this environment is the locked set.

``pyproject.toml`` states ranges (what a company's resolver may pick); ``requirements.lock``
holds the exact set the tests ran on, with hashes, and ``dev.sh setup`` (so CI) installs
from it. A requirement added to pyproject.toml without ``bash dev.sh lock``, a lock pin
outside its range, or an environment that drifted from the lock fails here.
"""

import re
import tomllib
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
#: exact on purpose: the JVM jars of deploy/maven/spark-extras.pom.xml must equal them
EXACT = {"pyspark": "spark.version", "delta-spark": "delta.version"}


def _lock() -> dict[str, tuple[str, int]]:
    """name -> (version, hashes) of requirements.lock."""
    out: dict[str, tuple[str, int]] = {}
    name = None
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        if m := re.match(r"^([A-Za-z0-9_.-]+)==(\S+)", line):
            name = canonicalize_name(m.group(1))
            out[name] = (m.group(2), 0)
        elif name and "--hash=sha256:" in line:
            out[name] = (out[name][0], out[name][1] + 1)
    return out


def _requirements() -> list[Requirement]:
    reqs = list(PROJECT["dependencies"])
    for extra in PROJECT["optional-dependencies"].values():
        reqs += [r for r in extra if not r.startswith("kafka-audit[")]
    return [Requirement(r) for r in reqs]


def test_every_requirement_is_locked_at_a_version_its_range_admits():
    lock = _lock()
    for req in _requirements():
        name = canonicalize_name(req.name)
        assert name in lock, f"{req} is not in requirements.lock: run `bash dev.sh lock`"
        assert req.specifier.contains(lock[name][0], prereleases=True), (str(req), lock[name])


def test_every_pin_carries_its_hashes():
    for name, (_, hashes) in _lock().items():
        assert hashes >= 1, name


def test_this_environment_is_the_locked_set():
    for name, (pinned, _) in _lock().items():
        try:
            have = version(name)
        except PackageNotFoundError as exc:
            raise AssertionError(f"{name}=={pinned} is locked but not installed") from exc
        assert Version(have) == Version(pinned), (name, have, pinned)


def test_runtime_requirements_are_ranges_but_the_jvm_bound_ones():
    pom = (ROOT / "deploy" / "maven" / "spark-extras.pom.xml").read_text()
    runtime = list(PROJECT["dependencies"])
    for extra in ("producer", "api", "spark"):
        runtime += PROJECT["optional-dependencies"][extra]
    for req in map(Requirement, runtime):
        specs = {s.operator for s in req.specifier}
        if req.name in EXACT:
            (spec,) = req.specifier
            assert spec.operator == "==", req
            prop = EXACT[req.name]
            assert f"<{prop}>{spec.version}</{prop}>" in pom, (req, prop)
        else:
            assert specs == {">=", "<"}, req
