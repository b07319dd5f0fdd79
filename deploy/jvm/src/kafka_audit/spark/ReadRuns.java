package kafka_audit.spark;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.sql.Timestamp;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.zip.CRC32;

import org.apache.spark.api.java.JavaRDD;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.types.StructType;

/**
 * The consume job's fast path: Kafka source rows to read runs in one pass per task.
 *
 * <p>Same result as {@code parse_kafka_records} + {@code read_runs} in
 * {@code jobs/transforms.py} (the readable definition; a test holds the two equal), without
 * their sort: the Kafka source hands each task one partition's offsets in order, so a run is
 * folded while the records stream by. A run is consecutive offsets holding consecutive seqs of
 * one producer run with one checksum verdict, or consecutive foreign records sharing one
 * reason; anything else starts a new one. Runs may also end at a task's edge (harmless: the
 * audit joins runs as intervals).
 *
 * <p>Stamp layout: {@code schemas/stamp.py}.
 */
public final class ReadRuns {
    private ReadRuns() {}

    static final String HEADER = "kaudit";
    static final int VERSION = 1;

    /** Fold {@code kafka} (the Kafka source's columns) into rows of the {@code consumed} schema. */
    public static Dataset<Row> fold(Dataset<Row> kafka, StructType consumed, long batchId,
                                    long readTimeMicros) {
        StructType in = kafka.schema();
        int[] idx = {in.fieldIndex("topic"), in.fieldIndex("partition"), in.fieldIndex("offset"),
                     in.fieldIndex("timestamp"), in.fieldIndex("value"), in.fieldIndex("headers")};
        JavaRDD<InternalRow> rows = kafka.queryExecution().toRdd().toJavaRDD();
        JavaRDD<Row> runs = rows.mapPartitions(it -> fold(it, idx, batchId, readTimeMicros));
        return SparkSession.active().createDataFrame(runs, consumed);
    }

    /** One parsed record: its stamp fields, or why it has none. */
    static final class Rec {
        String topic;
        int partition;
        long offset;
        Long timestampMicros;
        boolean stamped;
        String error;
        String producer;
        String run;
        long seq;
        Boolean checksumOk;
    }

    static Rec parse(InternalRow row, int[] idx) {
        Rec r = new Rec();
        r.topic = row.getUTF8String(idx[0]).toString();
        r.partition = row.getInt(idx[1]);
        r.offset = row.getLong(idx[2]);
        r.timestampMicros = row.isNullAt(idx[3]) ? null : row.getLong(idx[3]);
        byte[] s = null;
        boolean found = false;
        if (!row.isNullAt(idx[5])) {
            ArrayData headers = row.getArray(idx[5]);
            for (int i = 0; i < headers.numElements(); i++) {
                InternalRow h = headers.getStruct(i, 2);
                if (!h.isNullAt(0) && HEADER.equals(h.getUTF8String(0).toString())) {
                    found = true;
                    s = h.isNullAt(1) ? null : h.getBinary(1);
                    break;
                }
            }
        }
        if (!found || s == null) {
            r.error = "no " + HEADER + " header";
            return r;
        }
        int pLen = s.length >= 15 ? s[13] & 0xff : 0;
        int rLen = s.length >= 15 + pLen && pLen > 0 ? s[14 + pLen] & 0xff : 0;
        ByteBuffer b = ByteBuffer.wrap(s);
        if (s.length < 15 || (s[0] & 0xff) != VERSION || pLen == 0 || rLen == 0
                || s.length != 15 + pLen + rLen || b.getLong(1) < 0) {
            r.error = "malformed stamp";
            return r;
        }
        r.stamped = true;
        r.seq = b.getLong(1);
        r.producer = new String(s, 14, pLen, StandardCharsets.UTF_8);
        r.run = new String(s, 15 + pLen, rLen, StandardCharsets.UTF_8);
        CRC32 crc = new CRC32();
        byte[] value = row.isNullAt(idx[4]) ? new byte[0] : row.getBinary(idx[4]);
        crc.update(value);
        r.checksumOk = crc.getValue() == (b.getInt(9) & 0xffffffffL);
        return r;
    }

    static boolean extends_(Rec run, long count, Rec r) {
        return run.topic.equals(r.topic) && run.partition == r.partition
                && r.offset == run.offset + count && run.stamped == r.stamped
                && java.util.Objects.equals(run.error, r.error)
                && java.util.Objects.equals(run.producer, r.producer)
                && java.util.Objects.equals(run.run, r.run)
                && java.util.Objects.equals(run.checksumOk, r.checksumOk)
                && (!r.stamped || r.seq == run.seq + count);
    }

    static Iterator<Row> fold(Iterator<InternalRow> it, int[] idx, long batchId,
                              long readTimeMicros) {
        List<Row> out = new ArrayList<>();
        Timestamp readTime = micros(readTimeMicros);
        Rec run = null;
        long count = 0;
        while (it.hasNext()) {
            Rec r = parse(it.next(), idx);
            if (run != null && extends_(run, count, r)) {
                count++;
                continue;
            }
            if (run != null) {
                out.add(row(run, count, readTime, batchId));
            }
            run = r;
            count = 1;
        }
        if (run != null) {
            out.add(row(run, count, readTime, batchId));
        }
        return out.iterator();
    }

    static Timestamp micros(long us) {
        Timestamp t = new Timestamp(Math.floorDiv(us, 1000L));
        t.setNanos((int) Math.floorMod(us, 1_000_000L) * 1000);
        return t;
    }

    static Row row(Rec r, long count, Timestamp readTime, long batchId) {
        return RowFactory.create(r.topic, r.partition, r.offset, count,
                r.timestampMicros == null ? null : micros(r.timestampMicros), r.stamped, r.error,
                r.producer, r.run, r.stamped ? r.seq : null, r.checksumOk, readTime, batchId,
                "stream", "record", null);
    }
}
