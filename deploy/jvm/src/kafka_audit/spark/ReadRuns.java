package kafka_audit.spark;

import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.sql.Timestamp;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.zip.CRC32;

import org.apache.spark.api.java.JavaRDD;
import org.apache.spark.rdd.RDD;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.UnsafeArrayData;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.execution.LogicalRDD;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.Platform;
import org.apache.spark.unsafe.array.ByteArrayMethods;
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
        JavaRDD<InternalRow> rows = sourceRows(kafka).toJavaRDD();
        JavaRDD<Row> runs = rows.mapPartitions(it -> fold(it, idx, batchId, readTimeMicros));
        return SparkSession.active().createDataFrame(runs, consumed);
    }

    /**
     * The rows of {@code kafka}. A {@code foreachBatch} micro-batch is a {@link LogicalRDD}
     * over the source's rows; planning it would copy every row once more (its scan node
     * projects each row to a new UnsafeRow: about a tenth of a task's CPU here, measured
     * with Java Flight Recorder), so its RDD is read directly.
     */
    static RDD<InternalRow> sourceRows(Dataset<Row> kafka) {
        LogicalPlan plan = kafka.queryExecution().optimizedPlan();
        if (plan instanceof LogicalRDD batch) {
            return batch.rdd();
        }
        return kafka.queryExecution().toRdd();
    }

    static final UTF8String HEADER_KEY = UTF8String.fromString(HEADER);
    static final byte[] HEADER_BYTES = HEADER.getBytes(StandardCharsets.UTF_8);
    static final String NO_HEADER = "no " + HEADER + " header";
    static final String MALFORMED = "malformed stamp";
    static final boolean BIG_ENDIAN = ByteOrder.nativeOrder() == ByteOrder.BIG_ENDIAN;

    /**
     * Folds one task's records without allocating per record where the rows are UnsafeRows
     * (the Kafka source's): the stamp is parsed and compared with the open run's where the
     * row holds it, the payload is checksummed there, and the topic, producer and run are
     * decoded into strings once per run.
     */
    static final class Folder {
        final int[] idx;
        final CRC32 crc = new CRC32();
        // the record being looked at (views into the source row, valid until the next one)
        UTF8String topic;
        int partition;
        long offset;
        boolean hasTimestamp;
        long timestampMicros;
        String error;
        Object sBase;  // the stamp's bytes: base object and address offset, as Platform reads
        long sOff;
        int pLen;
        int rLen;
        long seq;
        Boolean checksumOk;
        // the open run (owned copies)
        UTF8String runTopic;
        int runPartition;
        long runOffset;
        long count;
        boolean runHasTimestamp;
        long runTimestampMicros;
        String runError;
        byte[] runStamp;
        int runPLen;
        int runRLen;
        long runSeq;
        Boolean runChecksumOk;

        Folder(int[] idx) {
            this.idx = idx;
        }

        int u8(long at) {
            return Platform.getByte(sBase, sOff + at) & 0xff;
        }

        /** Big-endian, as the stamp is laid out (Platform reads native order). */
        long u64(long at) {
            long v = Platform.getLong(sBase, sOff + at);
            return BIG_ENDIAN ? v : Long.reverseBytes(v);
        }

        long u32(long at) {
            int v = Platform.getInt(sBase, sOff + at);
            return (BIG_ENDIAN ? v : Integer.reverseBytes(v)) & 0xffffffffL;
        }

        /** Point sBase/sOff at binary field {@code field} of {@code row}; its length. */
        int view(InternalRow row, int field) {
            if (row instanceof UnsafeRow u) {
                long offsetAndSize = u.getLong(field);
                sBase = u.getBaseObject();
                sOff = u.getBaseOffset() + (offsetAndSize >> 32);
                return (int) offsetAndSize;
            }
            byte[] b = row.getBinary(field);
            sBase = b;
            sOff = Platform.BYTE_ARRAY_OFFSET;
            return b.length;
        }

        // reused views into the source row's headers (UnsafeRows: no objects per record)
        final UnsafeArrayData headerArray = new UnsafeArrayData();
        final UnsafeRow header = new UnsafeRow(2);

        /** The {@code kaudit} header's value: sBase/sOff point at it; its length, or -1. */
        int findStamp(InternalRow row, int field) {
            if (!(row instanceof UnsafeRow u)) {
                ArrayData headers = row.getArray(field);
                for (int i = 0; i < headers.numElements(); i++) {
                    InternalRow h = headers.getStruct(i, 2);
                    if (!h.isNullAt(0) && HEADER_KEY.equals(h.getUTF8String(0))) {
                        return h.isNullAt(1) ? -1 : view(h, 1);
                    }
                }
                return -1;
            }
            long at = u.getLong(field);
            headerArray.pointTo(u.getBaseObject(), u.getBaseOffset() + (at >> 32), (int) at);
            for (int i = 0; i < headerArray.numElements(); i++) {
                if (headerArray.isNullAt(i)) {
                    continue;
                }
                long h = headerArray.getLong(i);  // a struct element: its offset and size
                header.pointTo(headerArray.getBaseObject(),
                               headerArray.getBaseOffset() + (h >> 32), (int) h);
                if (!header.isNullAt(0) && isHeaderKey(header)) {
                    return header.isNullAt(1) ? -1 : view(header, 1);
                }
            }
            return -1;
        }

        /** Whether string field 0 of {@code h} is {@code kaudit}, compared where it lies. */
        static boolean isHeaderKey(UnsafeRow h) {
            long at = h.getLong(0);
            return (int) at == HEADER_BYTES.length && ByteArrayMethods.arrayEquals(
                    h.getBaseObject(), h.getBaseOffset() + (at >> 32), HEADER_BYTES,
                    Platform.BYTE_ARRAY_OFFSET, HEADER_BYTES.length);
        }

        /** Whether the row's topic is {@code topic}, compared where the row holds it. */
        boolean sameTopic(InternalRow row, int field) {
            if (!(row instanceof UnsafeRow u)) {
                return topic.equals(row.getUTF8String(field));
            }
            long at = u.getLong(field);
            return (int) at == topic.numBytes() && ByteArrayMethods.arrayEquals(
                    u.getBaseObject(), u.getBaseOffset() + (at >> 32), topic.getBaseObject(),
                    topic.getBaseOffset(), topic.numBytes());
        }

        void parse(InternalRow row) {
            if (topic == null || !sameTopic(row, idx[0])) {
                topic = row.getUTF8String(idx[0]).clone();
            }
            partition = row.getInt(idx[1]);
            offset = row.getLong(idx[2]);
            hasTimestamp = !row.isNullAt(idx[3]);
            timestampMicros = hasTimestamp ? row.getLong(idx[3]) : 0L;
            error = null;
            sBase = null;
            checksumOk = null;
            int n = row.isNullAt(idx[5]) ? -1 : findStamp(row, idx[5]);
            if (n < 0) {
                sBase = null;
                error = NO_HEADER;
                return;
            }
            int p = n >= 15 ? u8(13) : 0;
            int r = n >= 15 + p && p > 0 ? u8(14 + p) : 0;
            if (n < 15 || u8(0) != VERSION || p == 0 || r == 0 || n != 15 + p + r
                    || u64(1) < 0) {
                sBase = null;
                error = MALFORMED;
                return;
            }
            pLen = p;
            rLen = r;
            seq = u64(1);
            crc.reset();
            updateCrc(row, idx[4]);
            checksumOk = crc.getValue() == u32(9);
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
                    || (sBase == null) != (runStamp == null)
                    || (runTopic != topic && !runTopic.equals(topic))) {
                return false;
            }
            if (sBase == null) {
                return error.equals(runError);
            }
            return seq == runSeq + count && java.util.Objects.equals(checksumOk, runChecksumOk)
                    && pLen == runPLen && rLen == runRLen
                    && ByteArrayMethods.arrayEquals(sBase, sOff + 14, runStamp,
                                                    Platform.BYTE_ARRAY_OFFSET + 14,
                                                    1 + pLen + rLen);
        }

        void open() {
            runTopic = topic;  // an owned copy already
            runPartition = partition;
            runOffset = offset;
            count = 1;
            runHasTimestamp = hasTimestamp;
            runTimestampMicros = timestampMicros;
            runError = error;
            runStamp = null;
            if (sBase != null) {
                runStamp = new byte[15 + pLen + rLen];
                Platform.copyMemory(sBase, sOff, runStamp, Platform.BYTE_ARRAY_OFFSET,
                                   runStamp.length);
            }
            runPLen = pLen;
            runRLen = rLen;
            runSeq = seq;
            runChecksumOk = checksumOk;
        }

        Row close(Timestamp readTime, long batchId) {
            boolean stamped = runStamp != null;
            return RowFactory.create(runTopic.toString(), runPartition, runOffset, count,
                    runHasTimestamp ? micros(runTimestampMicros) : null, stamped, runError,
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
