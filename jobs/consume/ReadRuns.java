package kafka_audit.spark;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.CharBuffer;
import java.nio.charset.CharsetDecoder;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.sql.Timestamp;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Iterator;
import java.util.List;
import java.util.NoSuchElementException;
import java.util.Optional;
import java.util.function.Consumer;
import java.util.zip.CRC32;

import javax.crypto.Mac;
import javax.crypto.ShortBufferException;
import javax.crypto.spec.SecretKeySpec;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.compress.Compression;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.Headers;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.record.MemoryRecords;
import org.apache.kafka.common.record.MemoryRecordsBuilder;
import org.apache.kafka.common.record.Record;
import org.apache.kafka.common.record.RecordBatch;
import org.apache.kafka.common.record.TimestampType;
import org.apache.kafka.common.utils.Utils;
import org.apache.spark.Partition;
import org.apache.spark.TaskContext;
import org.apache.spark.api.java.JavaRDD;
import org.apache.spark.rdd.RDD;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.XXH64;
import org.apache.spark.sql.catalyst.expressions.UnsafeArrayData;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.execution.QueryExecution;
import org.apache.spark.sql.execution.SparkPlan;
import org.apache.spark.sql.execution.metric.SQLMetric;
import org.apache.spark.sql.execution.LogicalRDD;
import org.apache.spark.sql.execution.datasources.v2.DataSourceRDD;
import org.apache.spark.sql.execution.datasources.v2.DataSourceRDDPartition;
import org.apache.spark.sql.kafka010.KafkaBatchInputPartition;
import org.apache.spark.sql.kafka010.KafkaOffsetRange;
import org.apache.spark.sql.kafka010.consumer.KafkaDataConsumer;
import org.apache.spark.sql.streaming.StreamingQuery;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.Platform;
import org.apache.spark.unsafe.array.ByteArrayMethods;
import org.apache.spark.unsafe.types.UTF8String;
import org.apache.spark.util.TaskCompletionListener;

import scala.Tuple2;
import scala.jdk.javaapi.CollectionConverters;
import scala.reflect.ClassTag;
import scala.reflect.ClassTag$;

/**
 * The consume job's fast path: Kafka records to read runs in one pass per task.
 *
 * <p>The consume job's micro-batches are folded by {@link #foldSource}: each task reads the
 * offset ranges Spark's Kafka source planned with the source's own pooled consumers, and folds
 * the Kafka client's records where they lie, so the source's conversion of every record to a
 * row (its headers to an array of rows, then a copy) is never made: the fold then takes less
 * CPU a record than a bare Spark read of the same records into {@code noop}
 * (docs/benchmarks.md). {@link #fold} folds any frame of the source's columns from its rows.
 *
 * <p>Same result as {@code parse_kafka_records} + {@code read_runs} in
 * {@code jobs/consume/transforms.py} (the readable definition; a test holds the two equal), without
 * their sort: the Kafka source hands each task one partition's offsets in order, so a run is
 * folded while the records stream by. A run is consecutive offsets holding consecutive seqs of
 * one producer run with one checksum verdict, or consecutive foreign records sharing one
 * reason; anything else starts a new one. Runs may also end at a task's edge (harmless: the
 * audit joins runs as intervals).
 *
 * <p>Stamp layouts and the stamp rule: {@code schemas/stamp.py}. No {@code kaudit} header is
 * no stamp; two or more, a null or empty value, a version other than 1 and 2, fewer bytes than
 * its version's fixed part (15 for version 1, 19 for version 2), an empty id, lengths that do
 * not add up to the value's, an id that is not strict UTF-8 or a seq of 2^63 or more is a
 * malformed one. With a stamp key, a well-formed stamp without exactly one {@code kaudit-mac}
 * header holding its MAC (HMAC-SHA256 of the stamp, the first 16 bytes) is a forged one. The
 * checksum is CRC32 of the value for version 1, XXH64 with seed 42 for version 2 (Spark's own
 * {@link XXH64}, which SQL's {@code xxhash64} is).
 */
public final class ReadRuns {
    private ReadRuns() {}

    static final String HEADER = "kaudit";
    static final int VERSION_CRC32 = 1;
    static final int VERSION_XXH64 = 2;
    static final int FIXED_CRC32 = 15;  // version, seq, CRC32, the two id lengths
    static final int FIXED_XXH64 = 19;  // version, seq, XXH64, the two id lengths
    static final long XXH64_SEED = 42L;
    static final int MAX_ID = 255;

    /** Fold {@code kafka} (the Kafka source's columns) into rows of the {@code consumed} schema. */
    public static Dataset<Row> fold(Dataset<Row> kafka, StructType consumed, long batchId,
                                    long readTimeMicros) {
        return fold(kafka, consumed, batchId, readTimeMicros, null);
    }

    /** The same, verifying stamps' MACs under {@code key} (the stamp key; null: none). */
    public static Dataset<Row> fold(Dataset<Row> kafka, StructType consumed, long batchId,
                                    long readTimeMicros, byte[] key) {
        StructType in = kafka.schema();
        int[] idx = {in.fieldIndex("topic"), in.fieldIndex("partition"), in.fieldIndex("offset"),
                     in.fieldIndex("timestamp"), in.fieldIndex("value"), in.fieldIndex("headers")};
        JavaRDD<Row> runs = sourceRows(kafka).toJavaRDD()
            .mapPartitions(it -> fold(it, idx, batchId, readTimeMicros, key));
        return SparkSession.active().createDataFrame(runs, consumed);
    }

    /**
     * Warm-up only: fold made-up rows of the Kafka source's columns ({@code kafka}; each task's
     * rows grouped by partition, in offset order) as {@link #foldSource} folds what the Kafka
     * client reads: each partition's rows become one record batch, read back with the
     * client's own record and header decoding, then folded from its {@link ConsumerRecord}s.
     * The JIT so compiles the code a new topic's first micro-batch runs before there is a
     * topic to read (what the fold of rows warms is not it: the JIT compiles for the types
     * it has seen).
     */
    public static Dataset<Row> warmUp(Dataset<Row> kafka, StructType consumed, long batchId,
                                      long readTimeMicros, byte[] key) {
        JavaRDD<Row> runs = kafka.toJavaRDD()
            .mapPartitions(it -> foldRecords(clientRecords(it), batchId, readTimeMicros, key));
        return SparkSession.active().createDataFrame(runs, consumed);
    }

    /** {@link #warmUp}'s rows as the Kafka client hands them out, a partition at a time. */
    static Iterator<ConsumerRecord<byte[], byte[]>> clientRecords(Iterator<Row> rows) {
        List<ConsumerRecord<byte[], byte[]>> out = new ArrayList<>();
        MemoryRecordsBuilder batch = null;
        String topic = null;
        int partition = -1;
        int[] at = null;  // key, value, topic, partition, offset, timestamp, headers
        while (rows.hasNext()) {
            Row row = rows.next();
            if (at == null) {
                at = Arrays.stream(new String[] {"key", "value", "topic", "partition", "offset",
                                                 "timestamp", "headers"})
                    .mapToInt(row::fieldIndex).toArray();
            }
            String t = row.getString(at[2]);
            int p = row.getInt(at[3]);
            long offset = row.getLong(at[4]);
            if (batch != null && (p != partition || !t.equals(topic))) {
                readBack(batch.build(), topic, partition, out);
                batch = null;
            }
            if (batch == null) {
                topic = t;
                partition = p;
                batch = MemoryRecords.builder(ByteBuffer.allocate(1 << 16), Compression.NONE,
                                              TimestampType.CREATE_TIME, offset);
            }
            List<Row> hs = row.getList(at[6]);
            Header[] headers = new Header[hs == null ? 0 : hs.size()];
            for (int i = 0; i < headers.length; i++) {
                headers[i] = new RecordHeader(hs.get(i).getString(0), (byte[]) hs.get(i).get(1));
            }
            batch.appendWithOffset(offset, row.getTimestamp(at[5]).getTime(),
                                   (byte[]) row.get(at[0]), (byte[]) row.get(at[1]), headers);
        }
        if (batch != null) {
            readBack(batch.build(), topic, partition, out);
        }
        return out.iterator();
    }

    static void readBack(MemoryRecords records, String topic, int partition,
                         List<ConsumerRecord<byte[], byte[]>> out) {
        for (RecordBatch batch : records.batches()) {
            batch.ensureValid();  // the client checks each batch's CRC (check.crcs)
            for (Record r : batch) {
                byte[] k = r.hasKey() ? Utils.toArray(r.key()) : null;
                byte[] v = r.hasValue() ? Utils.toArray(r.value()) : null;
                out.add(new ConsumerRecord<>(topic, partition, r.offset(), r.timestamp(),
                                             batch.timestampType(), k == null ? -1 : k.length,
                                             v == null ? -1 : v.length, k, v,
                                             new RecordHeaders(r.headers()), Optional.empty()));
            }
        }
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

    /**
     * The same rows as {@link #fold}, read from the offset ranges Spark's Kafka source planned
     * for {@code kafka} (its micro-batch, unchanged: the consume job's) rather than from the
     * rows it would make of them. Each task reads its ranges as the source's own reader does
     * (the source's pooled consumer, {@code get} with the source's poll timeout and
     * {@code failOnDataLoss}, a range not resolved to offsets bound the same way) and folds the
     * client's records where they lie: the source's conversion of each record to a row (its
     * headers to an array of rows, the row copied once more) is not made. When the plan is not
     * such a read, {@link #fold} over its rows.
     */
    public static Dataset<Row> foldSource(Dataset<Row> kafka, StructType consumed, long batchId,
                                          long readTimeMicros, byte[] key) {
        List<List<KafkaBatchInputPartition>> tasks = kafkaInputs(kafka);
        if (tasks == null) {
            return fold(kafka, consumed, batchId, readTimeMicros, key);
        }
        SparkSession spark = kafka.sparkSession();
        List<Tuple2<List<KafkaBatchInputPartition>, scala.collection.immutable.Seq<String>>>
            placed = new ArrayList<>();
        for (List<KafkaBatchInputPartition> task : tasks) {
            List<String> where = new ArrayList<>();
            for (KafkaBatchInputPartition input : task) {
                where.addAll(Arrays.asList(input.preferredLocations()));
            }
            placed.add(new Tuple2<>(task, CollectionConverters.asScala(where).toList()));
        }
        @SuppressWarnings("unchecked")
        ClassTag<List<KafkaBatchInputPartition>> tag =
            (ClassTag<List<KafkaBatchInputPartition>>) (ClassTag<?>) ClassTag$.MODULE$.apply(List.class);
        SQLMetric read = scanRows(spark);
        JavaRDD<Row> runs = spark.sparkContext()
            .makeRDD(CollectionConverters.asScala(placed).toList(), tag).toJavaRDD()
            .mapPartitions(it -> foldRecords(new RangeRecords(it, TaskContext.get(), read),
                                             batchId, readTimeMicros, key));
        return spark.createDataFrame(runs, consumed);
    }

    /**
     * The row counter of the Kafka source's scan in the micro-batch this thread runs (a
     * {@code foreachBatch} call): its query's progress reports it as {@code numInputRows}.
     * {@link #foldSource} does not run the scan, so it adds the records it reads there.
     * Null outside a streaming query's batch, or when the plan holds no one such scan.
     */
    static SQLMetric scanRows(SparkSession spark) {
        String id = spark.sparkContext().getLocalProperty("sql.streaming.queryId");
        if (id == null) {
            return null;
        }
        try {
            // a micro-batch runs in a clone of the session that started its query, whose
            // manager knows no query: the default session's (the one that started it) does
            StreamingQuery query = spark.streams().get(id);
            if (query == null && SparkSession.getDefaultSession().isDefined()) {
                query = SparkSession.getDefaultSession().get().streams().get(id);
            }
            if (query == null) {
                return null;
            }
            // StreamingQueryWrapper.streamingQuery(), then StreamExecution.lastExecution():
            // public in Spark 4.1, named by reflection as their package moved in 4.1
            Object run = query.getClass().getMethod("streamingQuery").invoke(query);
            Object last = run.getClass().getMethod("lastExecution").invoke(run);
            if (!(last instanceof QueryExecution execution)) {
                return null;
            }
            List<SQLMetric> found = new ArrayList<>();
            List<SparkPlan> todo = new ArrayList<>(List.of(execution.executedPlan()));
            while (!todo.isEmpty()) {
                SparkPlan node = todo.remove(todo.size() - 1);
                if (node.getClass().getSimpleName().equals("MicroBatchScanExec")
                        && node.metrics().contains("numOutputRows")) {
                    found.add(node.metrics().apply("numOutputRows"));
                }
                todo.addAll(CollectionConverters.asJava(node.children()));
            }
            return found.size() == 1 ? found.get(0) : null;
        } catch (ReflectiveOperationException | RuntimeException e) {
            return null;  // the progress then counts no rows: the reading itself is the same
        }
    }

    /**
     * The Kafka source's input partitions of each task of {@code kafka}'s plan (a micro-batch
     * of its V2 stream); null when it is not such a plan as Spark 4.1 makes one (a batch read
     * is its V1 relation), or reads no headers.
     */
    static List<List<KafkaBatchInputPartition>> kafkaInputs(Dataset<Row> kafka) {
        RDD<?> rdd = sourceRows(kafka);
        while (!(rdd instanceof DataSourceRDD)) {
            if (rdd.dependencies().size() != 1) {
                return null;
            }
            rdd = rdd.dependencies().head().rdd();
        }
        List<List<KafkaBatchInputPartition>> tasks = new ArrayList<>();
        for (Partition partition : rdd.partitions()) {
            if (!(partition instanceof DataSourceRDDPartition part)) {
                return null;
            }
            List<KafkaBatchInputPartition> task = new ArrayList<>();
            scala.collection.Iterator<InputPartition> inputs = part.inputPartitions().iterator();
            while (inputs.hasNext()) {
                if (!(inputs.next() instanceof KafkaBatchInputPartition input)
                        || !input.includeHeaders()) {
                    return null;
                }
                task.add(input);
            }
            tasks.add(task);
        }
        return tasks;
    }

    /**
     * The records of one task's offset ranges, in order, read as the Kafka source's reader
     * ({@code KafkaBatchPartitionReader}) reads each: a consumer from the source's pool for its
     * partition, a range's unresolved ends (earliest, latest) bound to what the partition holds,
     * then {@code get} from each next offset until the range's end or a null (the rest lost,
     * under {@code failOnDataLoss=false}). Each consumer goes back to the pool when its range
     * ends or the task does, whichever is first.
     */
    static final class RangeRecords implements Iterator<ConsumerRecord<byte[], byte[]>> {
        final Iterator<KafkaBatchInputPartition> inputs;
        KafkaBatchInputPartition input;
        KafkaDataConsumer consumer;
        long next;
        long until;
        ConsumerRecord<byte[], byte[]> record;  // fetched, not handed out yet

        long records;  // handed out

        RangeRecords(Iterator<List<KafkaBatchInputPartition>> tasks, TaskContext task,
                     SQLMetric read) {
            List<KafkaBatchInputPartition> all = new ArrayList<>();
            tasks.forEachRemaining(all::addAll);
            inputs = all.iterator();
            if (task != null) {
                task.addTaskCompletionListener((TaskCompletionListener) context -> {
                    release();
                    if (read != null) {
                        read.add(records);
                    }
                });
            }
        }

        void release() {
            if (consumer != null) {
                consumer.release();
                consumer = null;
            }
        }

        void open(KafkaBatchInputPartition in) {
            input = in;
            KafkaOffsetRange range = in.offsetRange();
            consumer = KafkaDataConsumer.acquire(range.topicPartition(), in.executorKafkaParams());
            next = range.fromOffset();
            until = range.untilOffset();
            if (next < 0 || until < 0) {
                KafkaDataConsumer.AvailableOffsetRange available = consumer.getAvailableOffsetRange();
                next = next < 0 ? available.earliest() : next;
                until = until < 0 ? available.latest() : until;
            }
        }

        @Override
        public boolean hasNext() {
            while (record == null) {
                if (consumer != null && next < until) {
                    record = consumer.get(next, until, input.pollTimeoutMs(),
                                          input.failOnDataLoss());
                    if (record != null) {
                        next = record.offset() + 1;
                        return true;
                    }
                }
                release();
                if (!inputs.hasNext()) {
                    return false;
                }
                open(inputs.next());
            }
            return true;
        }

        @Override
        public ConsumerRecord<byte[], byte[]> next() {
            if (!hasNext()) {
                throw new NoSuchElementException();
            }
            ConsumerRecord<byte[], byte[]> r = record;
            record = null;
            records++;
            return r;
        }
    }

    /**
     * The offsets a micro-batch of Spark's Kafka source spans: each input partition's end
     * offset minus its start, summed. A bound of the records it holds (a compacted or
     * transactional log holds fewer), so of the rows {@link #fold} returns (a run holds at
     * least one record), known from the plan's offset ranges without reading a record. -1
     * when {@code kafka} is not such a micro-batch as Spark 4.1 plans it: the caller counts
     * the rows instead.
     */
    public static long offsetSpan(Dataset<Row> kafka) {
        List<List<KafkaBatchInputPartition>> tasks = kafkaInputs(kafka);
        if (tasks == null) {
            return -1;
        }
        long span = 0;
        for (List<KafkaBatchInputPartition> task : tasks) {
            for (KafkaBatchInputPartition input : task) {
                KafkaOffsetRange range = input.offsetRange();
                if (range.fromOffset() < 0 || range.untilOffset() < range.fromOffset()) {
                    return -1;  // a range not resolved to offsets (earliest, latest)
                }
                span += range.untilOffset() - range.fromOffset();
            }
        }
        return span;
    }

    static final UTF8String HEADER_KEY = UTF8String.fromString(HEADER);
    static final byte[] HEADER_BYTES = HEADER.getBytes(StandardCharsets.UTF_8);
    static final String NO_HEADER = "no " + HEADER + " header";
    static final String MALFORMED = "malformed stamp";
    static final String FORGED = "forged stamp";
    static final String MAC_HEADER = "kaudit-mac";
    static final UTF8String MAC_KEY = UTF8String.fromString(MAC_HEADER);
    static final byte[] MAC_HEADER_BYTES = MAC_HEADER.getBytes(StandardCharsets.UTF_8);
    static final int MAC_LENGTH = 16;  // HMAC-SHA256's first 16 bytes
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
        boolean idsOfRun;  // a stamp whose ids are the open run's (so valid already)
        Object sBase;  // the stamp's bytes: base object and address offset, as Platform reads
        long sOff;
        int fixed;  // the stamp's fixed part: the producer id's length byte is at fixed - 2
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
        int runFixed;
        int runPLen;
        int runRLen;
        long runSeq;
        Boolean runChecksumOk;

        // with a stamp key: its HMAC, and the record's kaudit-mac headers (count, last view)
        final Mac mac;
        final byte[] macOut = new byte[32];
        final byte[] stampCopy = new byte[FIXED_XXH64 + 2 * MAX_ID];
        int nMacs;
        Object mBase;  // null: a kaudit-mac header with a null value
        long mOff;
        int mLen;

        Folder(int[] idx, byte[] key) {
            this.idx = idx;
            if (key == null) {
                mac = null;
                return;
            }
            try {
                mac = Mac.getInstance("HmacSHA256");
                mac.init(new SecretKeySpec(key, "HmacSHA256"));
            } catch (java.security.GeneralSecurityException e) {
                throw new IllegalStateException("HmacSHA256: " + e, e);
            }
        }

        /** A kaudit-mac header: counted, its value's view kept (mBase null: a null value). */
        void seeMac(InternalRow h) {
            nMacs++;
            if (h.isNullAt(1)) {
                seeMac((byte[]) null);
            } else if (h instanceof UnsafeRow u) {
                long offsetAndSize = u.getLong(1);
                mBase = u.getBaseObject();
                mOff = u.getBaseOffset() + (offsetAndSize >> 32);
                mLen = (int) offsetAndSize;
            } else {
                seeMac(h.getBinary(1));
            }
        }

        /** A kaudit-mac header's value as an array (null: a null value); not counted. */
        void seeMac(byte[] value) {
            mBase = value;
            mOff = Platform.BYTE_ARRAY_OFFSET;
            mLen = value == null ? 0 : value.length;
        }

        /** Whether the record's one kaudit-mac header holds the MAC of its {@code n}-byte stamp
         *  (sBase/sOff). */
        boolean macOk(int n) {
            if (nMacs != 1 || mBase == null || mLen != MAC_LENGTH) {
                return false;
            }
            Platform.copyMemory(sBase, sOff, stampCopy, Platform.BYTE_ARRAY_OFFSET, n);
            mac.update(stampCopy, 0, n);
            try {
                mac.doFinal(macOut, 0);
            } catch (ShortBufferException e) {
                throw new IllegalStateException(e);
            }
            int diff = 0;
            for (int i = 0; i < MAC_LENGTH; i++) {
                diff |= macOut[i] ^ Platform.getByte(mBase, mOff + i);
            }
            return diff == 0;
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

        static final int NONE = -1;  // findStamp: no kaudit header
        static final int BAD = -2;  // findStamp: two or more, or one with a null value

        /**
         * The one {@code kaudit} header's value: sBase/sOff point at it; its length, or
         * {@link #NONE} or {@link #BAD}. Every header is looked at: a second one is malformed.
         */
        int findStamp(InternalRow row, int field) {
            int found = NONE;
            if (!(row instanceof UnsafeRow u)) {
                ArrayData headers = row.getArray(field);
                for (int i = 0; i < headers.numElements(); i++) {
                    if (headers.isNullAt(i)) {
                        continue;
                    }
                    InternalRow h = headers.getStruct(i, 2);
                    if (!h.isNullAt(0) && HEADER_KEY.equals(h.getUTF8String(0))) {
                        if (found != NONE || h.isNullAt(1)) {
                            return BAD;
                        }
                        found = view(h, 1);
                    } else if (mac != null && !h.isNullAt(0)
                               && MAC_KEY.equals(h.getUTF8String(0))) {
                        seeMac(h);
                    }
                }
                return found;
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
                if (!header.isNullAt(0) && isKey(header, HEADER_BYTES)) {
                    if (found != NONE || header.isNullAt(1)) {
                        return BAD;
                    }
                    found = view(header, 1);  // sBase/sOff stay on it: views are not reused
                } else if (mac != null && !header.isNullAt(0) && isKey(header, MAC_HEADER_BYTES)) {
                    seeMac(header);  // its view is into the row: still valid when checked
                }
            }
            return found;
        }

        // strict UTF-8 (as Python's and Spark's): malformed input is reported, not replaced
        final CharsetDecoder utf8 = StandardCharsets.UTF_8.newDecoder()
                .onMalformedInput(CodingErrorAction.REPORT)
                .onUnmappableCharacter(CodingErrorAction.REPORT);
        final byte[] idBytes = new byte[MAX_ID];
        final ByteBuffer idIn = ByteBuffer.wrap(idBytes);
        final CharBuffer idOut = CharBuffer.allocate(MAX_ID);  // n bytes decode to <= n chars

        /** Whether the {@code len} stamp bytes at {@code at} are UTF-8 (copied, not allocated). */
        boolean isUtf8(long at, int len) {
            Platform.copyMemory(sBase, sOff + at, idBytes, Platform.BYTE_ARRAY_OFFSET, len);
            idIn.clear().limit(len);
            idOut.clear();
            utf8.reset();
            return utf8.decode(idIn, idOut, true).isUnderflow() && utf8.flush(idOut).isUnderflow();
        }

        /** Whether the stamp's ids (both lengths and bytes) are the open run's (of any
         *  version: the SQL definition groups by the ids, not by the layout). */
        boolean sameIdsAsRun(int fix, int p, int r) {
            return runStamp != null && p == runPLen && r == runRLen
                    && ByteArrayMethods.arrayEquals(sBase, sOff + fix - 2, runStamp,
                                                    Platform.BYTE_ARRAY_OFFSET + runFixed - 2,
                                                    1 + p + r);
        }

        /** Whether string field 0 of {@code h} is {@code key}, compared where it lies. */
        static boolean isKey(UnsafeRow h, byte[] key) {
            long at = h.getLong(0);
            return (int) at == key.length && ByteArrayMethods.arrayEquals(
                    h.getBaseObject(), h.getBaseOffset() + (at >> 32), key,
                    Platform.BYTE_ARRAY_OFFSET, key.length);
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
            nMacs = 0;
            int n = row.isNullAt(idx[5]) ? Folder.NONE : findStamp(row, idx[5]);
            valueOf(row, idx[4]);
            stamp(n);
        }

        // the topic's name as the last record held it, and its UTF8String
        String topicName;

        /** The same for a record read from Kafka directly ({@link #foldRecords}): what the
         *  Kafka source makes of it (its timestamp in microseconds, its headers' keys as
         *  the client decodes them) is read where the record holds it. */
        void parse(ConsumerRecord<byte[], byte[]> record) {
            String t = record.topic();
            if (t != topicName) {  // the client's records of a partition share one string
                if (topic == null || !t.equals(topicName)) {
                    topic = UTF8String.fromString(t);
                }
                topicName = t;
            }
            partition = record.partition();
            offset = record.offset();
            hasTimestamp = true;
            timestampMicros = record.timestamp() * 1000L;
            nMacs = 0;
            int n = findStamp(record.headers());
            valueOf(record.value());
            stamp(n);
        }

        /** The one {@code kaudit} header's value among a record's headers, as
         *  {@link #findStamp(InternalRow, int)}. */
        int findStamp(Headers headers) {
            int found = NONE;
            for (Header h : headers) {
                String k = h.key();
                if (HEADER.equals(k)) {
                    byte[] v = h.value();
                    if (found != NONE || v == null) {
                        return BAD;
                    }
                    sBase = v;
                    sOff = Platform.BYTE_ARRAY_OFFSET;
                    found = v.length;
                } else if (mac != null && MAC_HEADER.equals(k)) {
                    nMacs++;
                    seeMac(h.value());
                }
            }
            return found;
        }

        // the record's value: a view (vBase, vOff, vLen) or null (vNull)
        boolean vNull;
        Object vBase;
        long vOff;
        int vLen;

        /** Point the value's view at binary field {@code field} of {@code row}. */
        void valueOf(InternalRow row, int field) {
            if (row.isNullAt(field)) {
                valueOf((byte[]) null);
            } else if (row instanceof UnsafeRow u) {
                long offsetAndSize = u.getLong(field);
                vNull = false;
                vBase = u.getBaseObject();
                vOff = u.getBaseOffset() + (offsetAndSize >> 32);
                vLen = (int) offsetAndSize;
            } else {
                valueOf(row.getBinary(field));
            }
        }

        /** Point the value's view at an array (null: a null value). */
        void valueOf(byte[] value) {
            vNull = value == null;
            vBase = value;
            vOff = Platform.BYTE_ARRAY_OFFSET;
            vLen = vNull ? 0 : value.length;
        }

        /** The stamp rule over the record's stamp ({@code n}: its length, or {@link #NONE}
         *  or {@link #BAD}; sBase/sOff on it) and value view. */
        void stamp(int n) {
            error = null;
            checksumOk = null;
            idsOfRun = false;
            if (n == Folder.NONE) {
                sBase = null;
                error = NO_HEADER;
                return;
            }
            // BAD (two kaudit headers, or a null value) and empty values are malformed
            int v = n > 0 ? u8(0) : 0;
            int fix = v == VERSION_XXH64 ? FIXED_XXH64 : FIXED_CRC32;
            int p = n >= fix ? u8(fix - 2) : 0;
            int r = n >= fix + p && p > 0 ? u8(fix - 1 + p) : 0;
            if (n < fix || (v != VERSION_CRC32 && v != VERSION_XXH64) || p == 0 || r == 0
                    || n != fix + p + r || u64(1) < 0) {
                sBase = null;
                error = MALFORMED;
                return;
            }
            // ids equal to the open run's were checked when it opened: only new ones are decoded
            idsOfRun = sameIdsAsRun(fix, p, r);
            if (!idsOfRun && !(isUtf8(fix - 1, p) && isUtf8(fix + p, r))) {
                sBase = null;
                error = MALFORMED;
                return;
            }
            if (mac != null && !macOk(n)) {  // no producer's: it confirms no write
                sBase = null;
                error = FORGED;
                return;
            }
            fixed = fix;
            pLen = p;
            rLen = r;
            seq = u64(1);
            if (v == VERSION_XXH64) {
                checksumOk = xxh64Value() == u64(9);
            } else {
                checksumOk = crcValue() == u32(9);
            }
        }

        /** XXH64 (seed 42) of the value; a null value counts as empty bytes. */
        long xxh64Value() {
            return vNull ? XXH64.hashUnsafeBytes(EMPTY, Platform.BYTE_ARRAY_OFFSET, 0, XXH64_SEED)
                         : XXH64.hashUnsafeBytes(vBase, vOff, vLen, XXH64_SEED);
        }

        /** CRC32 of the value (of none for a null one), read where it lies when that is an
         *  array (no copy). */
        long crcValue() {
            crc.reset();
            if (vNull) {
                return crc.getValue();
            }
            if (vBase instanceof byte[] base) {
                crc.update(base, (int) (vOff - Platform.BYTE_ARRAY_OFFSET), vLen);
            } else {
                byte[] copy = new byte[vLen];
                Platform.copyMemory(vBase, vOff, copy, Platform.BYTE_ARRAY_OFFSET, vLen);
                crc.update(copy);
            }
            return crc.getValue();
        }

        static final byte[] EMPTY = new byte[0];

        boolean extendsRun() {
            if (runTopic == null || partition != runPartition || offset != runOffset + count
                    || (sBase == null) != (runStamp == null)
                    || (runTopic != topic && !runTopic.equals(topic))) {
                return false;
            }
            if (sBase == null) {
                return error.equals(runError);
            }
            return idsOfRun && seq == runSeq + count
                    && java.util.Objects.equals(checksumOk, runChecksumOk);
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
                runStamp = new byte[fixed + pLen + rLen];
                Platform.copyMemory(sBase, sOff, runStamp, Platform.BYTE_ARRAY_OFFSET,
                                   runStamp.length);
            }
            runFixed = fixed;
            runPLen = pLen;
            runRLen = rLen;
            runSeq = seq;
            runChecksumOk = checksumOk;
        }

        Row close(Timestamp readTime, long batchId) {
            boolean stamped = runStamp != null;
            return RowFactory.create(runTopic.toString(), runPartition, runOffset, count,
                    runHasTimestamp ? micros(runTimestampMicros) : null, stamped, runError,
                    stamped ? new String(runStamp, runFixed - 1, runPLen, StandardCharsets.UTF_8)
                            : null,
                    stamped ? new String(runStamp, runFixed + runPLen, runRLen,
                                         StandardCharsets.UTF_8) : null,
                    stamped ? runSeq : null, runChecksumOk, readTime, batchId, "stream",
                    "record", null, "kafka");
        }
    }

    /**
     * One task's runs, each handed out as soon as it closes (the next record does not extend
     * it, or the task's records end): a task holds one open run and one closed one, however
     * many records and runs it reads (a backlog of one-record runs, where producers
     * interleave on a partition, is millions of rows in a task).
     */
    public static Iterator<Row> fold(Iterator<InternalRow> it, int[] idx, long batchId,
                                     long readTimeMicros, byte[] key) {
        Folder f = new Folder(idx, key);
        return runs(it, f::parse, f, batchId, readTimeMicros);
    }

    /** The same over records read from Kafka directly (the consume job's reading of a
     *  micro-batch's offset ranges: {@link #foldSource}). */
    public static Iterator<Row> foldRecords(Iterator<ConsumerRecord<byte[], byte[]>> it,
                                            long batchId, long readTimeMicros, byte[] key) {
        Folder f = new Folder(null, key);
        return runs(it, f::parse, f, batchId, readTimeMicros);
    }

    static <T> Iterator<Row> runs(Iterator<T> it, Consumer<T> parse, Folder f, long batchId,
                                  long readTimeMicros) {
        Timestamp readTime = micros(readTimeMicros);
        return new Iterator<Row>() {
            Row closed;  // a run closed and not handed out yet
            boolean ended;

            void advance() {
                while (closed == null && !ended) {
                    if (!it.hasNext()) {
                        ended = true;
                        if (f.runTopic != null) {
                            closed = f.close(readTime, batchId);
                        }
                        return;
                    }
                    parse.accept(it.next());
                    if (f.extendsRun()) {
                        f.count++;
                        continue;
                    }
                    if (f.runTopic != null) {
                        closed = f.close(readTime, batchId);
                    }
                    f.open();  // the record just parsed: its views are still valid
                }
            }

            @Override
            public boolean hasNext() {
                advance();
                return closed != null;
            }

            @Override
            public Row next() {
                advance();
                if (closed == null) {
                    throw new NoSuchElementException();
                }
                Row r = closed;
                closed = null;
                return r;
            }
        };
    }

    static Timestamp micros(long us) {
        Timestamp t = new Timestamp(Math.floorDiv(us, 1000L));
        t.setNanos((int) Math.floorMod(us, 1_000_000L) * 1000);
        return t;
    }
}
