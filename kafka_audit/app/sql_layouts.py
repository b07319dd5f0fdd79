"""The tables' layouts for BI tools, generated from their one declaration (``schemas/tables.py``).

``python -m kafka_audit.app.sql_layouts > deploy/sql/TABLES.md`` writes them;
``tests/unit/test_api_sql.py`` proves the file equals what this prints.
"""

from __future__ import annotations

from kafka_audit.schemas.tables import TABLES

__all__ = ["layouts"]

#: the SQL type each declared type has in Delta (Spark SQL names; DuckDB reads the same)
SQL_TYPES = {"string": "STRING", "long": "BIGINT", "int": "INT", "bool": "BOOLEAN",
             "double": "DOUBLE", "timestamp": "TIMESTAMP (UTC)", "int_list": "ARRAY<INT>",
             "date": "DATE"}


def layouts() -> str:
    out = ["# The Delta tables' layouts",
           "",
           "Generated from `schemas/tables.py` by `python -m kafka_audit.app.sql_layouts`"
           " (a test keeps it equal). Tables live under `<home>/warehouse/<table>`; the",
           "example queries beside this file (`*.sql`) run as written in DuckDB and Spark SQL",
           "after `setup_duckdb.sql` or `setup_spark.sql`. Findings of an audit pass count only",
           "once it committed: `pass_id <= (SELECT MAX(pass_id) FROM audit_hot WHERE kind =",
           "'progress')`.",
           ""]
    for table, columns in TABLES.items():
        out += [f"## `{table}`", "", "| column | type | null | meaning |",
                "| --- | --- | --- | --- |"]
        for c in columns:
            doc = c.doc.replace("|", "\\|") if c.doc else ""
            out.append(f"| `{c.name}` | {SQL_TYPES[c.type]} | {'yes' if c.nullable else 'no'} "
                       f"| {doc} |")
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    print(layouts(), end="")
