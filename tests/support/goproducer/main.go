// A Go producer audited through the kaudit plugin: confluent-kafka-go built with
// `-tags dynamic` against a shared librdkafka, so that the plugin resolves its rd_kafka_*
// symbols from the process (tests/cluster/test_plugin_go.py builds and runs it).
//
// It reads librdkafka properties (key=value lines, the plugin's among them) from -config,
// writes "go <n>" values to -topic at -rate per second until its standard input closes,
// flushes, and prints its own account of every delivery report on standard output:
// "delivered <partition> <offset>" or "failed <partition> <error>", then "librdkafka
// <version>".
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

func properties(path string) (kafka.ConfigMap, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	conf := kafka.ConfigMap{}
	scanner := bufio.NewScanner(f)
	for scanner.Scan() {
		line := strings.TrimSpace(scanner.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		key, value, ok := strings.Cut(line, "=")
		if !ok {
			return nil, fmt.Errorf("%s: not key=value: %q", path, line)
		}
		conf[strings.TrimSpace(key)] = strings.TrimSpace(value)
	}
	return conf, scanner.Err()
}

func main() {
	config := flag.String("config", "", "librdkafka properties file")
	topic := flag.String("topic", "", "topic to write to")
	rate := flag.Int("rate", 2000, "values per second")
	flag.Parse()
	conf, err := properties(*config)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	p, err := kafka.NewProducer(&conf)
	if err != nil {
		fmt.Fprintln(os.Stderr, "producer:", err)
		os.Exit(1)
	}
	out := os.Stdout // a line as each report comes: the test reads them while it runs
	done := make(chan struct{})
	go func() { // the delivery reports, in the order librdkafka gives them
		for e := range p.Events() {
			switch ev := e.(type) {
			case *kafka.Message:
				if ev.TopicPartition.Error != nil {
					fmt.Fprintf(out, "failed %d %v\n", ev.TopicPartition.Partition,
						ev.TopicPartition.Error)
				} else {
					fmt.Fprintf(out, "delivered %d %d\n", ev.TopicPartition.Partition,
						ev.TopicPartition.Offset)
				}
			case kafka.Error:
				fmt.Fprintln(os.Stderr, "error:", ev)
			}
		}
		close(done)
	}()
	var stop atomic.Bool
	go func() { // until the standard input closes
		_, _ = io.Copy(io.Discard, os.Stdin)
		stop.Store(true)
	}()
	start, sent := time.Now(), 0
	for !stop.Load() {
		due := int(time.Since(start).Seconds() * float64(*rate))
		for ; sent < due; sent++ {
			msg := &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: topic,
				Partition: kafka.PartitionAny}, Value: []byte(fmt.Sprintf("go %d", sent))}
			for {
				err := p.Produce(msg, nil)
				if err == nil {
					break
				}
				if err.(kafka.Error).Code() != kafka.ErrQueueFull {
					fmt.Fprintln(os.Stderr, "produce:", err)
					os.Exit(1)
				}
				time.Sleep(time.Millisecond)
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	for p.Flush(1000) > 0 {
	}
	p.Close()
	<-done
	_, version := kafka.LibraryVersion()
	fmt.Fprintf(out, "librdkafka %s\n", version)
}
