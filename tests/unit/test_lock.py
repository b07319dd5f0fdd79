"""The lock file and the package's ranges agree, and this environment is the locked set.

``pyproject.toml`` states ranges (what a company's resolver may pick); ``requirements.lock``
holds the exact set the tests ran on, with hashes, and ``dev.sh setup`` (so CI) installs
from it. A requirement added to pyproject.toml without ``bash dev.sh lock``, a lock pin
outside its range, or an environment that drifted from the lock fails here.
``requirements-runtime.lock`` is the container image's: the ``[all]`` extra alone, each pin
the one of ``requirements.lock`` (the image runs the tested set, without the test tools).
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


def _lock(file: str = "requirements.lock") -> dict[str, tuple[str, int]]:
    """name -> (version, hashes) of a lock file."""
    out: dict[str, tuple[str, int]] = {}
    name = None
    for line in (ROOT / file).read_text().splitlines():
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
    for file in ("requirements.lock", "requirements-runtime.lock"):
        for name, (_, hashes) in _lock(file).items():
            assert hashes >= 1, (file, name)


def test_the_image_lock_is_the_tested_set_of_the_whole_auditor_alone():
    whole, image = _lock(), _lock("requirements-runtime.lock")
    assert {n: v for n, (v, _) in image.items()} == \
        {n: whole[n][0] for n in image if n in whole}, "run `bash dev.sh lock`"
    runtime = list(PROJECT["dependencies"])
    for extra in ("producer", "api", "spark"):
        runtime += PROJECT["optional-dependencies"][extra]
    assert {canonicalize_name(Requirement(r).name) for r in runtime} <= set(image)
    # no test or docs tool in the image (some test requirements, packaging, are also
    # what the runtime needs)
    for tool in ("pytest", "hypothesis", "ruff", "schemathesis", "import-linter", "uv",
                 "mkdocs"):
        assert tool not in image and tool in whole, tool


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
