-- Spark SQL (with Delta: spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension and
-- the DeltaCatalog): the tables as temporary views. Replace {warehouse} with <home>/warehouse.
SET spark.sql.session.timeZone = UTC;
CREATE OR REPLACE TEMP VIEW acks AS SELECT * FROM delta.`{warehouse}/acks`;
CREATE OR REPLACE TEMP VIEW consumed AS SELECT * FROM delta.`{warehouse}/consumed`;
CREATE OR REPLACE TEMP VIEW cluster_events AS SELECT * FROM delta.`{warehouse}/cluster_events`;
CREATE OR REPLACE TEMP VIEW findings AS SELECT * FROM delta.`{warehouse}/findings`;
CREATE OR REPLACE TEMP VIEW partition_state AS SELECT * FROM delta.`{warehouse}/partition_state`;
CREATE OR REPLACE TEMP VIEW audit_hot AS SELECT * FROM delta.`{warehouse}/audit_hot`;
