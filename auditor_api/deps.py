"""Injected dependencies: settings and the Delta table reader (tests replace them)."""

from __future__ import annotations

from typing import Annotated

import pyarrow as pa
import pyarrow.compute as pc
from fastapi import Depends

from kafka_audit.jobs.io import read_table
from kafka_audit.settings import Settings, get_settings


class TableReader:
    """Reads the warehouse's Delta tables with delta-rs: no Spark session per request."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def read(self, table: str, where: pc.Expression | None = None) -> pa.Table:
        return read_table(self.settings.table_path(table), table, where=where)


def get_reader(settings: Annotated[Settings, Depends(get_settings)]) -> TableReader:
    return TableReader(settings)


SettingsDep = Annotated[Settings, Depends(get_settings)]
ReaderDep = Annotated[TableReader, Depends(get_reader)]
