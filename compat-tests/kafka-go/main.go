// Command kafkagodrv drives segmentio/kafka-go (github.com/segmentio/kafka-go) for grete's compat tests.
//
//	kafkagodrv -bootstrap HOST:PORT <command> [flags]
//
// Every command prints JSON lines on stdout and exits 0 when it ran to the end; the Python tests
// judge the lines. The commands and their output are those of the franz-go driver, less what
// kafka-go does not have: no idempotent or transactional producer, no static membership.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
)

var (
	bootstrap string
	outMu     sync.Mutex
)

// seeds: every address of -bootstrap (a cluster's are given comma-separated, as Kafka's tools take them).
func seeds() []string { return strings.Split(bootstrap, ",") }

func emit(v map[string]any) {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	outMu.Lock()
	defer outMu.Unlock()
	os.Stdout.Write(append(b, '\n'))
}

func die(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "kafkagodrv: "+format+"\n", args...)
	os.Exit(1)
}

func usage() {
	fmt.Fprintln(os.Stderr, `usage: kafkagodrv -bootstrap HOST:PORT COMMAND [flags]
commands:
  produce  -topic T -count N [-codec none|gzip|snappy|lz4|zstd] [-keys K] [-headers] [-ts BASE_MS] [-prefix v]
  consume  -topic T -count N [-group G] [-isolation committed|uncommitted] [-timeout-ms MS]
  group    -topic T -group G -partitions P -count N
  admin    -topic T -group G       (creates, describes and deletes T; G is a group that exists)
  oversize -topic T -size BYTES`)
	os.Exit(2)
}

func errorCode(err error) int16 {
	var we kafka.WriteErrors
	if errors.As(err, &we) {
		for _, e := range we {
			if e != nil {
				return errorCode(e)
			}
		}
	}
	var ke kafka.Error
	if errors.As(err, &ke) {
		return int16(ke)
	}
	return -1
}

func codec(name string) kafka.Compression {
	switch name {
	case "none":
		return 0
	case "gzip":
		return kafka.Gzip
	case "snappy":
		return kafka.Snappy
	case "lz4":
		return kafka.Lz4
	case "zstd":
		return kafka.Zstd
	}
	die("unknown codec %q", name)
	return 0
}

func ctxFor(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

func recordLine(m kafka.Message) map[string]any {
	headers := [][]string{}
	for _, h := range m.Headers {
		headers = append(headers, []string{h.Key, string(h.Value)})
	}
	var key any
	if m.Key != nil {
		key = string(m.Key)
	}
	return map[string]any{"partition": m.Partition, "offset": m.Offset, "key": key, "value": string(m.Value),
		"headers": headers, "timestamp": m.Time.UnixMilli()}
}

// writer returns a Writer that reports every written message (with its offset) to acks.
func writer(topic string, balancer kafka.Balancer, compression kafka.Compression, acks *[]kafka.Message) *kafka.Writer {
	var mu sync.Mutex
	return &kafka.Writer{Addr: kafka.TCP(seeds()...), Topic: topic, Balancer: balancer, Compression: compression,
		RequiredAcks: kafka.RequireAll, BatchTimeout: 10 * time.Millisecond, BatchSize: 1000,
		Completion: func(messages []kafka.Message, err error) {
			if err != nil || acks == nil {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			*acks = append(*acks, messages...)
		}}
}

func partitionsOf(topic string) []int {
	conn, err := kafka.Dial("tcp", seeds()[0])
	if err != nil {
		die("dial: %v", err)
	}
	defer conn.Close()
	parts, err := conn.ReadPartitions(topic)
	if err != nil {
		die("read partitions: %v", err)
	}
	var ids []int
	for _, p := range parts {
		ids = append(ids, p.ID)
	}
	sort.Ints(ids)
	return ids
}

// --- produce / consume ------------------------------------------------------------------------

func cmdProduce(args []string) {
	fs := flag.NewFlagSet("produce", flag.ExitOnError)
	topic := fs.String("topic", "", "")
	count := fs.Int("count", 10, "")
	codecName := fs.String("codec", "none", "")
	keys := fs.Int("keys", 0, "distinct keys k0..k{K-1}; 0 = no key")
	headers := fs.Bool("headers", false, "")
	ts := fs.Int64("ts", 0, "record i gets timestamp BASE+i (ms)")
	prefix := fs.String("prefix", "v", "")
	fs.Parse(args)

	var acks []kafka.Message
	// kafka.Hash: the same key goes to the same partition (the default, RoundRobin, ignores keys).
	w := writer(*topic, &kafka.Hash{}, codec(*codecName), &acks)
	msgs := make([]kafka.Message, *count)
	for i := range msgs {
		m := kafka.Message{Value: []byte(*prefix + strconv.Itoa(i))}
		if *keys > 0 {
			m.Key = []byte("k" + strconv.Itoa(i%*keys))
		}
		if *headers {
			m.Headers = []kafka.Header{{Key: "n", Value: []byte(strconv.Itoa(i))},
				{Key: "dup", Value: []byte("a")}, {Key: "dup", Value: []byte("b")}}
		}
		if *ts > 0 {
			m.Time = time.UnixMilli(*ts + int64(i))
		}
		msgs[i] = m
	}
	ctx, cancel := ctxFor(60 * time.Second)
	defer cancel()
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		die("produce: %v", err)
	}
	if err := w.Close(); err != nil {
		die("close writer: %v", err)
	}
	for _, m := range acks {
		emit(map[string]any{"partition": m.Partition, "offset": m.Offset, "value": string(m.Value)})
	}
}

func cmdConsume(args []string) {
	fs := flag.NewFlagSet("consume", flag.ExitOnError)
	topic := fs.String("topic", "", "")
	count := fs.Int("count", 10, "stop after this many records")
	group := fs.String("group", "", "consume in this group and commit what was read")
	isolation := fs.String("isolation", "uncommitted", "")
	timeoutMs := fs.Int("timeout-ms", 15000, "")
	fs.Parse(args)

	level := kafka.ReadUncommitted
	if *isolation == "committed" {
		level = kafka.ReadCommitted
	}
	ctx, cancel := ctxFor(time.Duration(*timeoutMs) * time.Millisecond)
	defer cancel()
	if *group != "" {
		r := kafka.NewReader(kafka.ReaderConfig{Brokers: seeds(), Topic: *topic, GroupID: *group,
			StartOffset: kafka.FirstOffset, MaxWait: 200 * time.Millisecond, IsolationLevel: level,
			HeartbeatInterval: 500 * time.Millisecond, SessionTimeout: 6 * time.Second})
		got := 0
		for got < *count {
			m, err := r.FetchMessage(ctx)
			if err != nil {
				break
			}
			emit(recordLine(m))
			got++
			if err := r.CommitMessages(ctx, m); err != nil { // synchronous: CommitInterval is 0
				die("commit: %v", err)
			}
		}
		if err := r.Close(); err != nil { // leaves the group
			die("close reader: %v", err)
		}
		emit(map[string]any{"consumed": got})
		return
	}
	merged := make(chan kafka.Message)
	for _, p := range partitionsOf(*topic) {
		r := kafka.NewReader(kafka.ReaderConfig{Brokers: seeds(), Topic: *topic, Partition: p,
			MaxWait: 200 * time.Millisecond, IsolationLevel: level})
		defer r.Close()
		go func() {
			for {
				m, err := r.ReadMessage(ctx)
				if err != nil {
					return
				}
				select {
				case merged <- m:
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	got := 0
	for got < *count {
		select {
		case m := <-merged:
			emit(recordLine(m))
			got++
		case <-ctx.Done():
			emit(map[string]any{"consumed": got})
			return
		}
	}
	emit(map[string]any{"consumed": got})
}

// --- groups (kafka-go's ConsumerGroup: the generations and their assignments) --------------------

type member struct {
	name     string
	cg       *kafka.ConsumerGroup
	mu       sync.Mutex
	assigned map[int]bool
	done     chan struct{}
}

var (
	consumedMu sync.Mutex
	phase      int
	consumed   int
)

func (m *member) owned() []int {
	m.mu.Lock()
	defer m.mu.Unlock()
	var ps []int
	for p := range m.assigned {
		ps = append(ps, p)
	}
	sort.Ints(ps)
	return ps
}

func (m *member) set(ps []kafka.PartitionAssignment) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.assigned = map[int]bool{}
	for _, p := range ps {
		m.assigned[p.ID] = true
	}
}

func joinMember(name, topic, group string) *member {
	cg, err := kafka.NewConsumerGroup(kafka.ConsumerGroupConfig{ID: group, Brokers: seeds(),
		Topics: []string{topic}, HeartbeatInterval: 500 * time.Millisecond, SessionTimeout: 6 * time.Second,
		RebalanceTimeout: 10 * time.Second, JoinGroupBackoff: 200 * time.Millisecond,
		StartOffset: kafka.FirstOffset})
	if err != nil {
		die("new consumer group: %v", err)
	}
	m := &member{name: name, cg: cg, assigned: map[int]bool{}, done: make(chan struct{})}
	go func() {
		defer close(m.done)
		for {
			gen, err := cg.Next(context.Background())
			if err != nil {
				if errors.Is(err, kafka.ErrGroupClosed) {
					return
				}
				time.Sleep(100 * time.Millisecond)
				continue
			}
			m.set(gen.Assignments[topic])
			gen.Start(func(ctx context.Context) { // the generation ended: nothing is owned any more
				<-ctx.Done()
				m.set(nil)
			})
			for _, pa := range gen.Assignments[topic] {
				gen.Start(func(ctx context.Context) { m.consume(ctx, gen, topic, pa) })
			}
		}
	}()
	return m
}

func (m *member) consume(ctx context.Context, gen *kafka.Generation, topic string, pa kafka.PartitionAssignment) {
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: seeds(), Topic: topic, Partition: pa.ID,
		MaxWait: 200 * time.Millisecond})
	defer r.Close()
	if err := r.SetOffset(pa.Offset); err != nil {
		emit(map[string]any{"member": m.name, "seek_error": err.Error()})
		return
	}
	for {
		msg, err := r.ReadMessage(ctx)
		if err != nil {
			return
		}
		consumedMu.Lock()
		line := recordLine(msg)
		line["member"] = m.name
		line["phase"] = phase
		emit(line)
		consumed++
		consumedMu.Unlock()
		if err := gen.CommitOffsets(map[string]map[int]int64{topic: {pa.ID: msg.Offset + 1}}); err != nil {
			emit(map[string]any{"member": m.name, "commit_error": err.Error()})
		}
	}
}

func (m *member) close() {
	if err := m.cg.Close(); err != nil { // leaves the group
		emit(map[string]any{"member": m.name, "close_error": err.Error()})
	}
	<-m.done
}

func waitBalanced(members []*member, partitions int, timeout time.Duration) map[string][]int {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		assignment := map[string][]int{}
		seen := map[int]int{}
		ok := true
		for _, m := range members {
			ps := m.owned()
			assignment[m.name] = ps
			if len(ps) == 0 {
				ok = false
			}
			for _, p := range ps {
				seen[p]++
			}
		}
		if ok && len(seen) == partitions {
			for _, n := range seen {
				if n != 1 {
					ok = false
				}
			}
			if ok {
				return assignment
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	state := map[string][]int{}
	for _, m := range members {
		state[m.name] = m.owned()
	}
	die("group not balanced after %v: %v", timeout, state)
	return nil
}

func produceTo(topic string, partitions int, values []string) {
	target := map[string]int{}
	for i, v := range values {
		target[v] = i % partitions
	}
	// Writer ignores Message.Partition: a balancer puts each value on its partition.
	w := writer(topic, kafka.BalancerFunc(func(m kafka.Message, _ ...int) int { return target[string(m.Value)] }), 0, nil)
	msgs := make([]kafka.Message, len(values))
	for i, v := range values {
		msgs[i] = kafka.Message{Value: []byte(v)}
	}
	ctx, cancel := ctxFor(30 * time.Second)
	defer cancel()
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		die("produce: %v", err)
	}
	w.Close()
}

func waitConsumed(want int, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		consumedMu.Lock()
		n := consumed
		consumedMu.Unlock()
		if n >= want {
			time.Sleep(300 * time.Millisecond) // a duplicate would show up now
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	die("consumed %d of %d records", consumed, want)
}

func setPhase(p int) {
	consumedMu.Lock()
	phase = p
	consumedMu.Unlock()
}

func values(phase, n int, topic string) []string {
	vs := make([]string, n)
	for i := range vs {
		vs[i] = fmt.Sprintf("p%d-%d-%s", phase, i, topic)
	}
	return vs
}

func cmdGroup(args []string) {
	fs := flag.NewFlagSet("group", flag.ExitOnError)
	topic := fs.String("topic", "", "")
	group := fs.String("group", "", "")
	partitions := fs.Int("partitions", 6, "")
	count := fs.Int("count", 24, "records per phase")
	fs.Parse(args)

	m0 := joinMember("m0", *topic, *group)
	emit(map[string]any{"phase": 0, "assignment": waitBalanced([]*member{m0}, *partitions, 30*time.Second)})
	members := []*member{m0, joinMember("m1", *topic, *group), joinMember("m2", *topic, *group)}
	setPhase(1)
	emit(map[string]any{"phase": 1, "assignment": waitBalanced(members, *partitions, 30*time.Second)})
	produceTo(*topic, *partitions, values(1, *count, *topic))
	waitConsumed(*count, 30*time.Second)

	setPhase(2)
	m0.close()
	emit(map[string]any{"phase": 2, "left": "m0"})
	members = members[1:]
	emit(map[string]any{"phase": 2, "assignment": waitBalanced(members, *partitions, 30*time.Second)})
	produceTo(*topic, *partitions, values(2, *count, *topic))
	waitConsumed(2**count, 30*time.Second)
	for _, m := range members {
		m.close()
	}
}

// --- admin ------------------------------------------------------------------------------------

func cmdAdmin(args []string) {
	fs := flag.NewFlagSet("admin", flag.ExitOnError)
	topic := fs.String("topic", "", "")
	group := fs.String("group", "", "")
	fs.Parse(args)

	cl := &kafka.Client{Addr: kafka.TCP(seeds()...), Timeout: 20 * time.Second}
	ctx, cancel := ctxFor(60 * time.Second)
	defer cancel()
	create := func(partitions int, configs []kafka.ConfigEntry) int16 {
		resp, err := cl.CreateTopics(ctx, &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{{Topic: *topic,
			NumPartitions: partitions, ReplicationFactor: 1, ConfigEntries: configs}}})
		if err != nil {
			die("create: %v", err)
		}
		if e := resp.Errors[*topic]; e != nil {
			return errorCode(e)
		}
		return 0
	}
	emit(map[string]any{"step": "create", "error_code": create(3,
		[]kafka.ConfigEntry{{ConfigName: "retention.ms", ConfigValue: "3600000"}})})
	emit(map[string]any{"step": "create-again", "error_code": create(1, nil)})

	var parts []int
	for i := 0; i < 50; i++ { // until every partition has a leader
		meta, err := cl.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{*topic}})
		if err == nil && len(meta.Topics) == 1 && meta.Topics[0].Error == nil && len(meta.Topics[0].Partitions) == 3 {
			parts = nil
			for _, p := range meta.Topics[0].Partitions {
				parts = append(parts, p.ID)
			}
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	sort.Ints(parts)
	emit(map[string]any{"step": "describe", "partitions": parts})

	described, err := cl.DescribeConfigs(ctx, &kafka.DescribeConfigsRequest{Resources: []kafka.DescribeConfigRequestResource{
		{ResourceType: kafka.ResourceTypeTopic, ResourceName: *topic, ConfigNames: []string{"retention.ms", "cleanup.policy"}}}})
	if err != nil {
		die("describe configs: %v", err)
	}
	configs := map[string]any{}
	for _, r := range described.Resources {
		if r.Error != nil {
			die("describe configs of %s: %v", r.ResourceName, r.Error)
		}
		for _, e := range r.ConfigEntries {
			configs[e.ConfigName] = map[string]any{"value": e.ConfigValue, "source": e.ConfigSource}
		}
	}
	emit(map[string]any{"step": "describe-configs", "configs": configs})

	groups, err := cl.ListGroups(ctx, &kafka.ListGroupsRequest{})
	if err != nil {
		die("list groups: %v", err)
	}
	line := map[string]any{"step": "list-groups", "has_group": false}
	for _, g := range groups.Groups {
		if g.GroupID == *group {
			line["has_group"] = true
			line["protocol_type"] = g.ProtocolType
		}
	}
	emit(line)

	del := func() int16 {
		resp, err := cl.DeleteTopics(ctx, &kafka.DeleteTopicsRequest{Topics: []string{*topic}})
		if err != nil {
			die("delete: %v", err)
		}
		if e := resp.Errors[*topic]; e != nil {
			return errorCode(e)
		}
		return 0
	}
	emit(map[string]any{"step": "delete", "error_code": del()})
	emit(map[string]any{"step": "delete-again", "error_code": del()})
}

// --- errors -----------------------------------------------------------------------------------

func cmdOversize(args []string) {
	fs := flag.NewFlagSet("oversize", flag.ExitOnError)
	topic := fs.String("topic", "", "")
	size := fs.Int("size", 8000, "")
	fs.Parse(args)

	var acks []kafka.Message
	w := writer(*topic, &kafka.RoundRobin{}, 0, &acks)
	w.MaxAttempts = 1
	defer w.Close()
	ctx, cancel := ctxFor(30 * time.Second)
	defer cancel()
	err := w.WriteMessages(ctx, kafka.Message{Value: []byte(strings.Repeat("x", *size))})
	line := map[string]any{"step": "big", "error_code": errorCode(err)}
	if err != nil {
		line["error"] = err.Error()
	}
	emit(line)
	if err := w.WriteMessages(ctx, kafka.Message{Value: []byte("small")}); err != nil {
		die("small record after the refused one: %v", err)
	}
	if len(acks) != 1 {
		die("acks: %v", acks)
	}
	emit(map[string]any{"step": "small", "partition": acks[0].Partition, "offset": acks[0].Offset})
}

func main() {
	flag.StringVar(&bootstrap, "bootstrap", "127.0.0.1:9092", "")
	flag.Usage = usage
	flag.Parse()
	if flag.NArg() < 1 {
		usage()
	}
	cmd, rest := flag.Arg(0), flag.Args()[1:]
	switch cmd {
	case "produce":
		cmdProduce(rest)
	case "consume":
		cmdConsume(rest)
	case "group":
		cmdGroup(rest)
	case "admin":
		cmdAdmin(rest)
	case "oversize":
		cmdOversize(rest)
	default:
		usage()
	}
}
