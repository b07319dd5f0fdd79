"""great-expectations over each new batch of the ``acks`` table.

A batch is every row the ledger appended since the last validated Delta
version (the table is append-only, so the new rows are exactly the files added
since then). Validation uses GE's pandas data source: the Spark one costs
seconds per metric (FIELD-NOTES). Each expectation's result becomes a row of
``dq_results``; failures are shown by ``GET /v1/quality``.

Expectations (all rows, each a run of reports): producer id, run id, sequence
not null; count at least 1; first ack not before send, last ack not before
first. (Successful runs): offset present; one run per first stamp within the batch.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import threading
from datetime import UTC, datetime

import pandas as pd

from kafka_audit.schemas.systems import KAFKA, SYSTEMS, system_of
from kafka_audit.settings import Settings
from kafka_audit.store import (
    append_rows,
    files_added_since,
    read_files,
    read_table,
    table_exists,
)

__all__ = ["validate_new_acks", "validate_acks_frame", "prepare"]

log = logging.getLogger(__name__)

_BUILDING = threading.Lock()  # one build of the validations, however many threads ask


def prepare() -> None:
    """Import great-expectations and build the two validations now, once a process: about
    6 s of CPU here (6.22 and 5.78 s: ``time.process_time()`` around the import and
    ``_validations()`` in a fresh ``.venv/bin/python``). ``kafka-audit run`` calls it in a
    thread of its own as the audit starts, while the Spark JVM starts: at the first check
    it landed in the middle of the reading, holding the interpreter while the consume
    job's micro-batch callback waited (``bench/sustained.py``). Never raises: a check
    that cannot be built says so when it runs."""
    try:
        _validations()
    except Exception as exc:  # noqa: BLE001 - the quality check reports it in its turn
        log.debug("quality: validations not prepared: %s", exc)


def _validations():
    with _BUILDING:
        return _build_validations()


@functools.cache
def _build_validations():
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("TQDM_DISABLE", "1")  # no progress bars in job output
    import great_expectations as gx
    import great_expectations.expectations as gxe

    ctx = gx.get_context(mode="ephemeral")
    ctx.variables.progress_bars = gx.data_context.types.base.ProgressBarsConfig(
        globally=False, metric_calculations=False)
    source = ctx.data_sources.add_pandas("ledger")
    all_rows = source.add_dataframe_asset("acks_all").add_batch_definition_whole_dataframe("b")
    ok_rows = source.add_dataframe_asset("acks_ok").add_batch_definition_whole_dataframe("b")
    every = ctx.suites.add(gx.ExpectationSuite(name="acks_every_row"))
    for col in ("producer_id", "run_id", "seq"):
        every.add_expectation(gxe.ExpectColumnValuesToNotBeNull(column=col))
    every.add_expectation(gxe.ExpectColumnValuesToBeBetween(column="count", min_value=1))
    every.add_expectation(gxe.ExpectColumnValuesToBeInSet(column="system",
                                                          value_set=list(SYSTEMS)))
    # the column says what the key's prefix says (null: a row from before the column)
    every.add_expectation(gxe.ExpectColumnPairValuesToBeEqual(
        column_A="system", column_B="key_system", ignore_row_if="either_value_is_missing"))
    every.add_expectation(gxe.ExpectColumnPairValuesAToBeGreaterThanB(
        column_A="ack_time", column_B="send_time", or_equal=True))
    every.add_expectation(gxe.ExpectColumnPairValuesAToBeGreaterThanB(
        column_A="last_ack_time", column_B="ack_time", or_equal=True))
    success = ctx.suites.add(gx.ExpectationSuite(name="acks_successful"))
    success.add_expectation(gxe.ExpectColumnValuesToNotBeNull(column="offset"))
    success.add_expectation(gxe.ExpectCompoundColumnsToBeUnique(
        column_list=["producer_id", "run_id", "seq"]))
    return (
        ctx.validation_definitions.add(gx.ValidationDefinition(name="every", data=all_rows,
                                                               suite=every)),
        ctx.validation_definitions.add(gx.ValidationDefinition(name="ok", data=ok_rows,
                                                               suite=success)),
    )


def validate_acks_frame(df: pd.DataFrame) -> list[dict]:
    """Run both suites over one batch of ack rows; return one result dict per expectation."""
    every, ok = _validations()
    df = df.assign(key_system=df["topic"].map(system_of, na_action="ignore"))
    # a RabbitMQ confirm carries no offset (schemas/systems.py): Kafka's rows alone
    success_rows = df[df["error_code"].isna() & (df["key_system"] == KAFKA)]
    out = []
    for vd, frame in ((every, df), (ok, success_rows)):
        if frame.empty:
            continue
        res = vd.run(batch_parameters={"dataframe": frame})
        for r in res.results:
            cfg = r.expectation_config
            kwargs = {k: v for k, v in cfg.kwargs.items() if k != "batch_id"}
            out.append({
                "expectation": f"{cfg.type}({json.dumps(kwargs, sort_keys=True, default=str)})",
                "success": bool(r.success),
                "element_count": r.result.get("element_count"),
                "unexpected_count": r.result.get("unexpected_count"),
                "details": json.dumps({"partial_unexpected": r.result.get(
                    "partial_unexpected_list", [])[:5]}, default=str),
            })
    return out


def validate_new_acks(settings: Settings) -> int:
    """Validate the acks appended since the last pass; return the number of failed expectations."""
    acks_path, dq_path = settings.table_path("acks"), settings.table_path("dq_results")
    if not table_exists(acks_path):
        return 0
    done = read_table(dq_path, "dq_results", columns=["table_name", "table_version"])
    versions = [v for t, v in zip(done.column("table_name").to_pylist(),
                                  done.column("table_version").to_pylist(), strict=True)
                if t == "acks"]
    last = max(versions, default=-1)
    current, files, _ = files_added_since(acks_path, last)
    if current <= last or not files:
        return 0
    # one scan of the new files, typed by the declared schema (a column an older file lacks
    # reads as null): a third of the time of one read and one pandas frame per file
    df = read_files(files, "acks").to_pandas()
    results = validate_acks_frame(df)
    now = datetime.now(UTC)
    append_rows(dq_path, "dq_results", [
        {"validated_at": now, "table_name": "acks", "table_version": current, **r}
        for r in results])
    return sum(1 for r in results if not r["success"])
