"""The test session finds the checkout: its test cluster lives in the checkout's var/."""

from ..conftest import CLUSTER_HOME, ROOT


def test_the_test_cluster_lives_in_the_checkouts_var():
    assert (ROOT / "pyproject.toml").is_file() and (ROOT / "tests" / "conftest.py").is_file()
    assert CLUSTER_HOME.parent == ROOT / "var"
