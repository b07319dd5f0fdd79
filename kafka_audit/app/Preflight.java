package kafka_audit.app.preflight;

import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.Collection;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.FeatureMetadata;
import org.apache.kafka.clients.admin.FinalizedVersionRange;
import org.apache.kafka.clients.admin.SupportedVersionRange;
import org.apache.kafka.common.Node;
import org.apache.kafka.server.common.MetadataVersion;

/**
 * `kafka-audit check`'s look at the cluster through the Java client, the one the Spark
 * Kafka source uses: the same profile, mapped to Java properties, must connect and
 * authenticate here too. Reads the properties from stdin (never from the command line,
 * which other users can see: they may hold a password), prints one line of JSON: the
 * cluster id, the brokers, the finalized metadata.version (the Kafka release level,
 * e.g. "4.1-IV1") and the eligible leader replicas' feature (finalized level, highest
 * supported). Runs on the newest broker jars' Java client (kafka_audit/jars.py).
 * An error prints {"error": ...} and exits 1.
 */
public final class Preflight {
  private static final String ELR = "eligible.leader.replicas.version";

  private Preflight() {}

  public static void main(String[] args) throws Exception {
    Properties props = new Properties();
    props.load(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    int seconds = args.length > 0 ? Integer.parseInt(args[0]) : 20;
    props.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, Integer.toString(seconds * 1000));
    props.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, Integer.toString(seconds * 1000));
    try (Admin admin = Admin.create(props)) {
      DescribeClusterResult cluster = admin.describeCluster();
      String id = cluster.clusterId().get(seconds, TimeUnit.SECONDS);
      Collection<Node> nodes = cluster.nodes().get(seconds, TimeUnit.SECONDS);
      FeatureMetadata features = admin.describeFeatures().featureMetadata()
          .get(seconds, TimeUnit.SECONDS);
      Map<String, FinalizedVersionRange> finalized = features.finalizedFeatures();
      FinalizedVersionRange mv = finalized.get("metadata.version");
      String release = "unknown";
      if (mv != null) {
        try {
          release = MetadataVersion.fromFeatureLevel(mv.maxVersionLevel()).version();
        } catch (IllegalArgumentException newer) {
          release = "newer than this client knows (level " + mv.maxVersionLevel() + ")";
        }
      }
      // KIP-966's eligible leader replicas: the finalized level (absent: 0, off) and the
      // highest the brokers support (absent: a Kafka without them, before 4.0)
      FinalizedVersionRange elr = finalized.get(ELR);
      SupportedVersionRange elrSupported = features.supportedFeatures().get(ELR);
      StringBuilder out = new StringBuilder("{\"cluster_id\": ").append(quote(id))
          .append(", \"brokers\": ").append(nodes.size())
          .append(", \"metadata_version\": ").append(quote(release))
          .append(", \"elr_level\": ").append(elr == null ? 0 : elr.maxVersionLevel())
          .append(", \"elr_supported\": ")
          .append(elrSupported == null ? 0 : elrSupported.maxVersion())
          .append("}");
      System.out.println(out);
    } catch (ExecutionException e) {
      Throwable cause = e.getCause() == null ? e : e.getCause();
      System.out.println("{\"error\": " + quote(cause.getClass().getSimpleName() + ": "
          + cause.getMessage()) + "}");
      System.exit(1);
    } catch (java.util.concurrent.TimeoutException e) {
      System.out.println("{\"error\": " + quote("TimeoutException: no answer within " + seconds
          + "s") + "}");
      System.exit(1);
    }
  }

  private static String quote(String s) {
    StringBuilder b = new StringBuilder("\"");
    for (char c : String.valueOf(s).toCharArray()) {
      if (c == '"' || c == '\\') {
        b.append('\\').append(c);
      } else if (c < 0x20) {
        b.append(String.format("\\u%04x", (int) c));
      } else {
        b.append(c);
      }
    }
    return b.append('"').toString();
  }
}
