"""The pure verdict core: plain rows in, verdicts and windows out. ``model`` (the rows),
``rules`` (each verdict's rule), ``engine`` (the exact per-partition engine), ``reference``
(the brute-force reference the engine is held equal to), ``windows`` (when writes were at
risk). Nothing here touches Spark, Kafka or a table (an import contract holds it)."""
