package kafka_audit.jobs.watcher;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.File;
import java.io.IOException;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.TreeSet;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.metadata.MetadataJsonConverters;
import org.apache.kafka.common.metadata.MetadataRecordType;
import org.apache.kafka.common.protocol.ByteBufferAccessor;
import org.apache.kafka.common.record.internal.ControlRecordType;
import org.apache.kafka.common.record.internal.ControlRecordUtils;
import org.apache.kafka.common.record.internal.FileLogInputStream.FileChannelRecordBatch;
import org.apache.kafka.common.record.internal.FileRecords;
import org.apache.kafka.common.record.internal.Record;
import org.apache.kafka.metadata.MetadataRecordSerde;
import org.apache.kafka.server.common.ApiMessageAndVersion;

/**
 * Tails the KRaft metadata log (`__cluster_metadata-0`) of one or more nodes and prints
 * every committed record once, in offset order, as one JSON line decoded by Kafka's own
 * metadata serde: {"offset", "time" (the controller's append time, ms), "type"
 * (PARTITION_CHANGE_RECORD, ...), "data"}. Raft leader changes (the active controller)
 * come as type LEADER_CHANGE. An offset is printed once a majority of the given nodes hold
 * a record there written in the same Raft epoch (the batch's leader epoch): a controller
 * killed while appending leaves records in its own file that the quorum never committed,
 * and the next controller writes others at those offsets, in a later epoch; the killed
 * node truncates its tail when it returns. A node that is down holds the others back from
 * nothing while the rest are a majority; given one folder, each record is printed as it
 * is read. A node's tail rewritten (truncated and appended again) is read again. When the
 * logs no longer start at offset 0, the newest snapshot (`*.checkpoint`) is printed first,
 * each record with "snapshot": true. A line {"type": "_AT", "next", "newest"} after each
 * look says how far it has read.
 *
 * <p>Usage: MetadataTail POLL_MS DIR [DIR ...]. Runs until killed.
 */
public final class MetadataTail {
  private MetadataTail() {}

  private static final ObjectMapper JSON = new ObjectMapper();
  /** Records held per node past the next offset at most: the rest stays in its file. */
  private static final int HOLD_MAX = 20_000;

  /** A record read from one node: the Raft epoch of its batch and its line. */
  private record Held(int epoch, ObjectNode line) {}

  /** Where one node's log has been read to, and what it holds at or past `next`. */
  private static final class Cursor {
    final File dir;
    long segment = -1; // base offset of the segment read last
    int position; // byte position in it after the last whole batch
    int lastPosition = -1; // where the last whole batch read starts in that segment
    long lastBase = -1; // that batch's base offset and epoch: a rewritten tail differs
    int lastEpoch = -1;
    final TreeMap<Long, Held> held = new TreeMap<>();

    Cursor(File dir) {
      this.dir = dir;
    }

    void reset() {
      segment = -1;
      position = 0;
      lastPosition = -1;
      held.clear();
    }
  }

  public static void main(String[] args) throws Exception {
    long pollMs = Long.parseLong(args[0]);
    List<Cursor> cursors = new ArrayList<>();
    for (String d : Arrays.copyOfRange(args, 1, args.length)) {
      cursors.add(new Cursor(new File(d)));
    }
    int quorum = cursors.size() / 2 + 1;
    PrintStream out = new PrintStream(System.out, false, StandardCharsets.UTF_8);
    long next = snapshot(cursors, out);
    long newest = -1;
    while (!out.checkError()) {
      for (Cursor c : cursors) {
        try {
          read(c, next);
        } catch (KafkaException rewritten) {
          c.reset(); // its file changed under the read (a tail rewritten): read it again
        }
      }
      while (true) {
        Held line = agreed(cursors, next, quorum);
        if (line == null) {
          long ahead = firstAgreed(cursors, next, quorum);
          if (ahead < 0) {
            break;
          }
          next = ahead; // offsets no node holds any more (none expected)
          continue;
        }
        newest = Math.max(newest, line.line().get("time").asLong());
        out.println(line.line());
        next++;
        for (Cursor c : cursors) {
          c.held.headMap(next).clear();
        }
      }
      ObjectNode at = JSON.createObjectNode().put("type", "_AT").put("next", next)
          .put("newest", newest);
      out.println(at);
      out.flush();
      Thread.sleep(pollMs);
    }
  }

  /** The record at `offset` that `quorum` nodes hold in one epoch, or null. */
  private static Held agreed(List<Cursor> cursors, long offset, int quorum) {
    Map<Integer, Integer> votes = new HashMap<>();
    for (Cursor c : cursors) {
      Held h = c.held.get(offset);
      if (h != null && votes.merge(h.epoch(), 1, Integer::sum) >= quorum) {
        return h;
      }
    }
    return null;
  }

  /** Where no node holds `next`: the first offset past it a quorum agrees on, else -1. */
  private static long firstAgreed(List<Cursor> cursors, long next, int quorum) {
    TreeSet<Long> offsets = new TreeSet<>();
    for (Cursor c : cursors) {
      if (c.held.containsKey(next)) {
        return -1;
      }
      offsets.addAll(c.held.keySet());
    }
    for (long o : offsets) {
      if (agreed(cursors, o, quorum) != null) {
        return o;
      }
    }
    return -1;
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
      records.channel().close(); // never close(): before 4.4 it trims, a write to the broker's file
    }
    return end;
  }

  /** Whether the batch read last from the cursor's segment still sits where it was. */
  private static boolean unchanged(Cursor c, FileRecords records) {
    if (records.sizeInBytes() < c.position) {
      return false; // truncated
    }
    if (c.lastPosition < 0) {
      return true; // nothing read from this segment yet
    }
    try {
      for (FileChannelRecordBatch batch : records.batchesFrom(c.lastPosition)) {
        return batch.baseOffset() == c.lastBase && batch.partitionLeaderEpoch() == c.lastEpoch
            && batch.position() + batch.sizeInBytes() == c.position;
      }
    } catch (KafkaException notABatch) {
      // rewritten: the position falls inside another batch now (a size that reads as none)
    }
    return false;
  }

  /** The records at or after `next` in the cursor's node, into its `held`. */
  private static void read(Cursor c, long next) throws IOException {
    long[] bases = segments(c.dir, ".log");
    if (c.segment >= 0 && Arrays.binarySearch(bases, c.segment) < 0) {
      c.reset(); // its segment is gone: deleted after a snapshot, or a tail truncated away
    }
    for (int i = 0; i < bases.length; i++) {
      long base = bases[i];
      if (base < c.segment || (i + 1 < bases.length && bases[i + 1] <= next)) {
        continue;
      }
      if (base != c.segment) {
        c.segment = base;
        c.position = 0;
        c.lastPosition = -1;
      }
      File file = new File(c.dir, String.format("%020d.log", base));
      FileRecords records;
      try {
        records = FileRecords.open(file, false); // read-only: the broker's file is never written
      } catch (java.nio.file.NoSuchFileException gone) {
        c.reset(); // deleted between the listing and the open
        return;
      }
      try {
        if (!unchanged(c, records)) {
          // a divergent tail dropped and perhaps written anew: read the node again
          c.reset();
          records.channel().close();
          read(c, next);
          return;
        }
        for (FileChannelRecordBatch batch : records.batchesFrom(c.position)) {
          if (c.held.size() >= HOLD_MAX) {
            break; // no majority for long (too few folders up): read on once it moves
          }
          c.lastPosition = batch.position();
          c.lastBase = batch.baseOffset();
          c.lastEpoch = batch.partitionLeaderEpoch();
          c.position = batch.position() + batch.sizeInBytes();
          if (batch.lastOffset() < next) {
            continue;
          }
          for (Record r : batch) {
            if (r.offset() < next) {
              continue;
            }
            c.held.put(r.offset(), new Held(c.lastEpoch, line(batch, r)));
          }
        }
      } finally {
        records.channel().close(); // never close(): before 4.4 it trims, a write to the broker's file
      }
    }
  }

  /** One record's line: decoded by the serde, or a control record's type. */
  private static ObjectNode line(FileChannelRecordBatch batch, Record r) {
    if (!batch.isControlBatch()) {
      return decode(r).put("offset", r.offset());
    }
    if (ControlRecordType.parse(r.key()) == ControlRecordType.LEADER_CHANGE) {
      int leader = ControlRecordUtils.deserializeLeaderChangeMessage(r).leaderId();
      ObjectNode line = JSON.createObjectNode().put("offset", r.offset())
          .put("time", r.timestamp()).put("type", "LEADER_CHANGE");
      line.putObject("data").put("leaderId", leader);
      return line;
    }
    return JSON.createObjectNode().put("offset", r.offset()).put("time", r.timestamp())
        .put("type", "_CONTROL");
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
