package kafka_audit.spark;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.sql.Timestamp;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Iterator;
import java.util.List;
import java.util.zip.CRC32;

import org.apache.spark.api.java.JavaRDD;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.Platform;
import org.apache.spark.unsafe.types.UTF8String;

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

    static final UTF8String HEADER_KEY = UTF8String.fromString(HEADER);
    static final String NO_HEADER = "no " + HEADER + " header";
    static final String MALFORMED = "malformed stamp";

    /**
     * Folds one task's records. Per record it allocates only the stamp's bytes: the topic,
     * producer and run are compared in place with the open run's, and decoded into strings
     * once per run; the payload's CRC32 is computed where the row holds it.
     */
    static final class Folder {
        final int[] idx;
        final CRC32 crc = new CRC32();
        // the record being looked at (views into the source row, valid until the next one)
        UTF8String topic;
        int partition;
        long offset;
        Long timestampMicros;
        String error;
        byte[] stamp;
        int pLen;
        int rLen;
        long seq;
        Boolean checksumOk;
        // the open run (owned copies)
        UTF8String runTopic;
        int runPartition;
        long runOffset;
        long count;
        Long runTimestampMicros;
        String runError;
        byte[] runStamp;
        int runPLen;
        int runRLen;
        long runSeq;
        Boolean runChecksumOk;

        Folder(int[] idx) {
            this.idx = idx;
        }

        void parse(InternalRow row) {
            topic = row.getUTF8String(idx[0]);
            partition = row.getInt(idx[1]);
            offset = row.getLong(idx[2]);
            timestampMicros = row.isNullAt(idx[3]) ? null : row.getLong(idx[3]);
            error = null;
            stamp = null;
            checksumOk = null;
            byte[] s = null;
            boolean found = false;
            if (!row.isNullAt(idx[5])) {
                ArrayData headers = row.getArray(idx[5]);
                for (int i = 0; i < headers.numElements(); i++) {
                    InternalRow h = headers.getStruct(i, 2);
                    if (!h.isNullAt(0) && HEADER_KEY.equals(h.getUTF8String(0))) {
                        found = true;
                        s = h.isNullAt(1) ? null : h.getBinary(1);
                        break;
                    }
                }
            }
            if (!found || s == null) {
                error = NO_HEADER;
                return;
            }
            int p = s.length >= 15 ? s[13] & 0xff : 0;
            int r = s.length >= 15 + p && p > 0 ? s[14 + p] & 0xff : 0;
            ByteBuffer b = ByteBuffer.wrap(s);
            if (s.length < 15 || (s[0] & 0xff) != VERSION || p == 0 || r == 0
                    || s.length != 15 + p + r || b.getLong(1) < 0) {
                error = MALFORMED;
                return;
            }
            stamp = s;
            pLen = p;
            rLen = r;
            seq = b.getLong(1);
            crc.reset();
            updateCrc(row, idx[4]);
            checksumOk = crc.getValue() == (b.getInt(9) & 0xffffffffL);
        }

        /** CRC32 of a binary field, read where an UnsafeRow holds it (no copy). */
        void updateCrc(InternalRow row, int field) {
            if (row.isNullAt(field)) {
                return;
            }
            if (row instanceof UnsafeRow u && u.getBaseObject() instanceof byte[] base) {
                long offsetAndSize = u.getLong(field);
                long at = u.getBaseOffset() + (offsetAndSize >> 32) - Platform.BYTE_ARRAY_OFFSET;
                crc.update(base, (int) at, (int) offsetAndSize);
            } else {
                crc.update(row.getBinary(field));
            }
        }

        boolean extendsRun() {
            if (runTopic == null || partition != runPartition || offset != runOffset + count
                    || (stamp == null) != (runStamp == null) || !runTopic.equals(topic)) {
                return false;
            }
            if (stamp == null) {
                return error.equals(runError);
            }
            return seq == runSeq + count && java.util.Objects.equals(checksumOk, runChecksumOk)
                    && pLen == runPLen && rLen == runRLen
                    && Arrays.equals(stamp, 14, 15 + pLen + rLen, runStamp, 14,
                                     15 + runPLen + runRLen);
        }

        void open() {
            runTopic = topic.clone();
            runPartition = partition;
            runOffset = offset;
            count = 1;
            runTimestampMicros = timestampMicros;
            runError = error;
            runStamp = stamp;
            runPLen = pLen;
            runRLen = rLen;
            runSeq = seq;
            runChecksumOk = checksumOk;
        }

        Row close(Timestamp readTime, long batchId) {
            boolean stamped = runStamp != null;
            return RowFactory.create(runTopic.toString(), runPartition, runOffset, count,
                    runTimestampMicros == null ? null : micros(runTimestampMicros), stamped,
                    runError,
                    stamped ? new String(runStamp, 14, runPLen, StandardCharsets.UTF_8) : null,
                    stamped ? new String(runStamp, 15 + runPLen, runRLen, StandardCharsets.UTF_8)
                            : null,
                    stamped ? runSeq : null, runChecksumOk, readTime, batchId, "stream",
                    "record", null);
        }
    }

    static Iterator<Row> fold(Iterator<InternalRow> it, int[] idx, long batchId,
                              long readTimeMicros) {
        List<Row> out = new ArrayList<>();
        Timestamp readTime = micros(readTimeMicros);
        Folder f = new Folder(idx);
        while (it.hasNext()) {
            f.parse(it.next());
            if (f.extendsRun()) {
                f.count++;
                continue;
            }
            if (f.runTopic != null) {
                out.add(f.close(readTime, batchId));
            }
            f.open();
        }
        if (f.runTopic != null) {
            out.add(f.close(readTime, batchId));
        }
        return out.iterator();
    }

    static Timestamp micros(long us) {
        Timestamp t = new Timestamp(Math.floorDiv(us, 1000L));
        t.setNanos((int) Math.floorMod(us, 1_000_000L) * 1000);
        return t;
    }
}
