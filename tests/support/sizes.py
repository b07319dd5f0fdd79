"""How many examples a property test draws: a quarter of its full count by default (CI's
part: the README's test command kept under its 45 minutes), the full count by hand with
``AUDIT_TEST_PROPERTY_SCALE=1`` (``docs/benchmarks.md`` keeps that run's date and result).

Hypothesis draws its examples afresh every run, so CI's part is a new quarter each time,
never the same cut."""

import os

SCALE = float(os.environ.get("AUDIT_TEST_PROPERTY_SCALE", "0.25"))
if not 0 < SCALE <= 10:
    raise ValueError(f"AUDIT_TEST_PROPERTY_SCALE={SCALE}: a factor above 0, at most 10")


def examples(full: int) -> int:
    """``full`` (the count a property test is written for) scaled, at least 10."""
    return max(10, round(full * SCALE))
