package kafka_audit.spark;

import io.delta.storage.HadoopFileSystemLogStore;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.FileAlreadyExistsException;
import java.util.Iterator;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.s3a.S3AFileSystem;
import software.amazon.awssdk.core.sync.RequestBody;
import software.amazon.awssdk.services.s3.model.PutObjectRequest;
import software.amazon.awssdk.services.s3.model.S3Exception;

/**
 * Delta Spark's commits to an object-store warehouse, created with {@code If-None-Match: *}.
 *
 * <p>Delta's own log store for S3 ({@code S3SingleDriverLogStore}) checks that a commit file
 * is absent and then writes it: safe only while one Spark driver is the table's only writer.
 * The auditor's tables have other writers (producer hosts appending to {@code acks} with
 * delta-rs, the service's delta-rs commits beside Spark's), and delta-rs creates each commit
 * file with {@code If-None-Match: *}. This store does the same through the S3A file
 * system's own S3 client (its endpoint, credentials and retries): of two writers of one
 * version the store creates one file and answers the other 412 (409 while the first is
 * still in flight), which becomes the {@link FileAlreadyExistsException} Delta retries at
 * the next version. {@code kafka-audit check} proves the store honours the header.
 *
 * <p>Set for the {@code s3a} scheme by {@code jobs/spark.py} when the warehouse is remote.
 */
public final class ConditionalPutLogStore extends HadoopFileSystemLogStore {

  public ConditionalPutLogStore(Configuration initHadoopConf) {
    super(initHadoopConf);
  }

  @Override
  public void write(Path path, Iterator<String> actions, Boolean overwrite,
      Configuration hadoopConf) throws IOException {
    FileSystem fs = path.getFileSystem(hadoopConf);
    if (!(fs instanceof S3AFileSystem)) {
      throw new IOException("ConditionalPutLogStore writes through S3A only, not to " + path);
    }
    S3AFileSystem s3 = (S3AFileSystem) fs;
    StringBuilder body = new StringBuilder();
    while (actions.hasNext()) {
      body.append(actions.next()).append('\n');
    }
    PutObjectRequest.Builder request = PutObjectRequest.builder()
        .bucket(s3.getBucket())
        .key(s3.pathToKey(s3.makeQualified(path)));
    if (!overwrite) {
      request.ifNoneMatch("*");
    }
    try {
      s3.getS3AInternals().getAmazonS3Client("Delta commit").putObject(
          request.build(),
          RequestBody.fromBytes(body.toString().getBytes(StandardCharsets.UTF_8)));
    } catch (S3Exception e) {
      if (!overwrite && (e.statusCode() == 412 || e.statusCode() == 409)) {
        throw new FileAlreadyExistsException(path.toString());
      }
      throw new IOException("could not write " + path + ": " + e.getMessage(), e);
    }
  }

  @Override
  public Boolean isPartialWriteVisible(Path path, Configuration hadoopConf) {
    return false;  // one PUT: the object is there whole or not at all
  }
}
