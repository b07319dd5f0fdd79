-- DuckDB: the tables as views over the Delta tables, and the one function the examples use
-- that DuckDB names otherwise. Replace {warehouse} with <home>/warehouse. delta_scan comes
-- from DuckDB's delta extension, downloaded at first use (offline, register each
-- DeltaTable(path).to_pyarrow_dataset() under the table's name instead, as the tests do).
SET TimeZone = 'UTC';
CREATE OR REPLACE MACRO unix_micros(ts) AS epoch_us(ts);
CREATE OR REPLACE VIEW acks AS SELECT * FROM delta_scan('{warehouse}/acks');
CREATE OR REPLACE VIEW consumed AS SELECT * FROM delta_scan('{warehouse}/consumed');
CREATE OR REPLACE VIEW cluster_events AS SELECT * FROM delta_scan('{warehouse}/cluster_events');
CREATE OR REPLACE VIEW findings AS SELECT * FROM delta_scan('{warehouse}/findings');
CREATE OR REPLACE VIEW partition_state AS SELECT * FROM delta_scan('{warehouse}/partition_state');
CREATE OR REPLACE VIEW audit_hot AS SELECT * FROM delta_scan('{warehouse}/audit_hot');
