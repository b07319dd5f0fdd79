package kafka_audit.jobs.watcher;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.File;
import java.io.IOException;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.TreeMap;
import org.apache.kafka.common.metadata.MetadataJsonConverters;
import org.apache.kafka.common.metadata.MetadataRecordType;
import org.apache.kafka.common.protocol.ByteBufferAccessor;
import org.apache.kafka.common.record.ControlRecordType;
import org.apache.kafka.common.record.ControlRecordUtils;
import org.apache.kafka.common.record.FileLogInputStream.FileChannelRecordBatch;
import org.apache.kafka.common.record.FileRecords;
import org.apache.kafka.common.record.Record;
import org.apache.kafka.metadata.MetadataRecordSerde;
import org.apache.kafka.server.common.ApiMessageAndVersion;

/**
 * Tails the KRaft metadata log (`__cluster_metadata-0`) of one or more nodes and prints
 * every record once, in offset order, as one JSON line decoded by Kafka's own metadata
 * serde: {"offset", "time" (the controller's append time, ms), "type"
 * (PARTITION_CHANGE_RECORD, ...), "data"}. Raft leader changes (the active controller)
 * come as type LEADER_CHANGE. Committed records sit at the same offset on every node, so
 * each offset is taken from whichever node has it first: a node that is down holds the
 * others back from nothing. When the logs no longer start at offset 0, the newest
 * snapshot (`*.checkpoint`) is printed first, each record with "snapshot": true. A line
 * {"type": "_AT", "next", "newest"} after each look says how far it has read.
 *
 * <p>Usage: MetadataTail POLL_MS DIR [DIR ...]. Runs until killed.
 */
public final class MetadataTail {
  private MetadataTail() {}

  private static final ObjectMapper JSON = new ObjectMapper();

  /** Where one node's log has been read to. */
  private static final class Cursor {
    final File dir;
    long segment = -1; // base offset of the segment read last
    int position; // byte position in it after the last whole batch

    Cursor(File dir) {
      this.dir = dir;
    }
  }

  public static void main(String[] args) throws Exception {
    long pollMs = Long.parseLong(args[0]);
    List<Cursor> cursors = new ArrayList<>();
    for (String d : Arrays.copyOfRange(args, 1, args.length)) {
      cursors.add(new Cursor(new File(d)));
    }
    PrintStream out = new PrintStream(System.out, false, StandardCharsets.UTF_8);
    long next = snapshot(cursors, out);
    long newest = -1;
    while (!out.checkError()) {
      TreeMap<Long, ObjectNode> found = new TreeMap<>();
      for (Cursor c : cursors) {
        read(c, next, found);
      }
      while (found.containsKey(next)) {
        ObjectNode line = found.remove(next);
        newest = Math.max(newest, line.get("time").asLong());
        out.println(line);
        next++;
        while (!found.isEmpty() && found.firstKey() < next) {
          found.pollFirstEntry();
        }
        if (!found.isEmpty() && !found.containsKey(next)) {
          next = found.firstKey(); // offsets of batches the serde skips (none expected)
        }
      }
      ObjectNode at = JSON.createObjectNode().put("type", "_AT").put("next", next)
          .put("newest", newest);
      out.println(at);
      out.flush();
      Thread.sleep(pollMs);
    }
  }

  private static long[] segments(File dir, String suffix) {
    File[] files = dir.listFiles((d, n) -> n.endsWith(suffix));
    if (files == null) {
      return new long[0];
    }
    return Arrays.stream(files).map(File::getName)
        .mapToLong(n -> Long.parseLong(n.substring(0, 20))).sorted().toArray();
  }

  /** The newest snapshot, printed when no node's log starts at 0; the offset to go on from. */
  private static long snapshot(List<Cursor> cursors, PrintStream out) throws IOException {
    long start = Long.MAX_VALUE;
    for (Cursor c : cursors) {
      long[] s = segments(c.dir, ".log");
      start = Math.min(start, s.length == 0 ? 0 : s[0]);
    }
    if (start == 0) {
      return 0;
    }
    File best = null;
    long end = -1;
    for (Cursor c : cursors) {
      File[] files = c.dir.listFiles((d, n) -> n.endsWith(".checkpoint"));
      for (File f : files == null ? new File[0] : files) {
        long e = Long.parseLong(f.getName().substring(0, 20));
        if (e > end) {
          best = f;
          end = e;
        }
      }
    }
    if (best == null) {
      throw new IOException("the metadata logs start at offset " + start
          + " and no snapshot (*.checkpoint) is there to start from");
    }
    FileRecords records = FileRecords.open(best, false);
    try {
      for (FileChannelRecordBatch batch : records.batches()) {
        if (batch.isControlBatch()) {
          continue;
        }
        for (Record r : batch) {
          ObjectNode line = decode(r);
          out.println(line.put("snapshot", true));
        }
      }
    } finally {
      records.closeHandlers(); // never close(): it trims, a write to the broker's file
    }
    return end;
  }

  /** Records at or after `next` from the cursor's node, into `found`. */
  private static void read(Cursor c, long next, TreeMap<Long, ObjectNode> found)
      throws IOException {
    long[] bases = segments(c.dir, ".log");
    for (int i = 0; i < bases.length; i++) {
      long base = bases[i];
      if (base < c.segment || (i + 1 < bases.length && bases[i + 1] <= next)) {
        continue;
      }
      if (base != c.segment) {
        c.segment = base;
        c.position = 0;
      }
      File file = new File(c.dir, String.format("%020d.log", base));
      FileRecords records;
      try {
        records = FileRecords.open(file, false); // read-only: the broker's file is never written
      } catch (java.nio.file.NoSuchFileException gone) {
        c.segment = -1; // deleted after a snapshot between the listing and the open
        continue;
      }
      try {
        if (records.sizeInBytes() < c.position) {
          c.position = 0; // truncated (a divergent tail dropped): read it again
        }
        for (FileChannelRecordBatch batch : records.batchesFrom(c.position)) {
          c.position = batch.position() + batch.sizeInBytes();
          if (batch.lastOffset() < next) {
            continue;
          }
          for (Record r : batch) {
            if (r.offset() < next) {
              continue;
            }
            if (batch.isControlBatch()) {
              if (ControlRecordType.parse(r.key()) == ControlRecordType.LEADER_CHANGE) {
                int leader = ControlRecordUtils.deserializeLeaderChangeMessage(r).leaderId();
                ObjectNode line = JSON.createObjectNode().put("offset", r.offset())
                    .put("time", r.timestamp()).put("type", "LEADER_CHANGE");
                line.putObject("data").put("leaderId", leader);
                found.putIfAbsent(r.offset(), line);
              } else {
                found.putIfAbsent(r.offset(), JSON.createObjectNode().put("offset", r.offset())
                    .put("time", r.timestamp()).put("type", "_CONTROL"));
              }
              continue;
            }
            found.putIfAbsent(r.offset(), decode(r).put("offset", r.offset()));
          }
        }
      } finally {
        records.closeHandlers(); // never close(): it trims, a write to the broker's file
      }
    }
  }

  private static ObjectNode decode(Record r) {
    ApiMessageAndVersion m = MetadataRecordSerde.INSTANCE.read(
        new ByteBufferAccessor(r.value()), r.valueSize());
    ObjectNode line = JSON.createObjectNode().put("time", r.timestamp())
        .put("type", MetadataRecordType.fromId(m.message().apiKey()).name());
    line.set("data", MetadataJsonConverters.writeJson(m.message(), m.version()));
    return line;
  }
}
