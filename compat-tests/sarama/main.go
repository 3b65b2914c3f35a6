// Command saramadrv drives IBM/sarama (github.com/IBM/sarama) for grete's compat tests.
//
//	saramadrv -bootstrap HOST:PORT <command> [flags]
//
// Every command prints JSON lines on stdout and exits 0 when it ran to the end; the Python tests
// judge the lines. The commands and their output are the same as the franz-go driver's.
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

	"github.com/IBM/sarama"
)

var (
	bootstrap string
	version   = sarama.DefaultVersion
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
	fmt.Fprintf(os.Stderr, "saramadrv: "+format+"\n", args...)
	os.Exit(1)
}

func usage() {
	fmt.Fprintln(os.Stderr, `usage: saramadrv -bootstrap HOST:PORT [-version 2.8.0] COMMAND [flags]
commands:
  produce  -topic T -count N [-codec none|gzip|snappy|lz4|zstd] [-keys K] [-headers] [-ts BASE_MS]
           [-idempotent] [-prefix v]
  consume  -topic T -count N [-group G] [-isolation committed|uncommitted] [-timeout-ms MS]
  group    -topic T -group G -partitions P -count N
  static   -topic T -group G -partitions P
  admin    -topic T -group G       (creates, describes and deletes T; G is a group that exists)
  oversize -topic T -size BYTES
  txn      -topic T -txid ID
  ctp      -in T -out T -group G -txid ID -count N`)
	os.Exit(2)
}

func errorCode(err error) int16 {
	var te *sarama.TopicError
	if errors.As(err, &te) {
		return int16(te.Err)
	}
	var pe *sarama.ProducerError
	if errors.As(err, &pe) {
		return errorCode(pe.Err)
	}
	var ke sarama.KError
	if errors.As(err, &ke) {
		return int16(ke)
	}
	return -1
}

func config() *sarama.Config {
	cfg := sarama.NewConfig()
	cfg.Version = version
	cfg.ClientID = "grete-compat-sarama"
	cfg.Producer.Return.Successes = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	cfg.Consumer.MaxWaitTime = 200 * time.Millisecond
	cfg.Metadata.Retry.Backoff = 100 * time.Millisecond
	return cfg
}

func codec(name string) sarama.CompressionCodec {
	switch name {
	case "none":
		return sarama.CompressionNone
	case "gzip":
		return sarama.CompressionGZIP
	case "snappy":
		return sarama.CompressionSnappy
	case "lz4":
		return sarama.CompressionLZ4
	case "zstd":
		return sarama.CompressionZSTD
	}
	die("unknown codec %q", name)
	return sarama.CompressionNone
}

func recordLine(m *sarama.ConsumerMessage) map[string]any {
	headers := [][]string{}
	for _, h := range m.Headers {
		headers = append(headers, []string{string(h.Key), string(h.Value)})
	}
	var key any
	if m.Key != nil {
		key = string(m.Key)
	}
	return map[string]any{"partition": m.Partition, "offset": m.Offset, "key": key, "value": string(m.Value),
		"headers": headers, "timestamp": m.Timestamp.UnixMilli()}
}

func syncProducer(cfg *sarama.Config) sarama.SyncProducer {
	p, err := sarama.NewSyncProducer(seeds(), cfg)
	if err != nil {
		die("new producer: %v", err)
	}
	return p
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
	idempotent := fs.Bool("idempotent", false, "")
	prefix := fs.String("prefix", "v", "")
	retries := fs.Int("retries", -1, "retries per batch, backing off as Kafka's producer (-1: sarama's 3 x 100 ms)")
	fs.Parse(args)

	cfg := config()
	cfg.Producer.Compression = codec(*codecName)
	if *retries >= 0 {
		cfg.Producer.Retry.Max = *retries
		cfg.Producer.Retry.BackoffFunc = kafkaBackoff
	}
	if *idempotent {
		cfg.Producer.Idempotent = true
		cfg.Net.MaxOpenRequests = 1
	}
	p := syncProducer(cfg)
	defer p.Close()
	msgs := make([]*sarama.ProducerMessage, *count)
	for i := range msgs {
		m := &sarama.ProducerMessage{Topic: *topic, Value: sarama.StringEncoder(*prefix + strconv.Itoa(i))}
		if *keys > 0 {
			m.Key = sarama.StringEncoder("k" + strconv.Itoa(i%*keys))
		}
		if *headers {
			m.Headers = []sarama.RecordHeader{{Key: []byte("n"), Value: []byte(strconv.Itoa(i))},
				{Key: []byte("dup"), Value: []byte("a")}, {Key: []byte("dup"), Value: []byte("b")}}
		}
		if *ts > 0 {
			m.Timestamp = time.UnixMilli(*ts + int64(i))
		}
		msgs[i] = m
	}
	if err := p.SendMessages(msgs); err != nil {
		die("produce: %v%s", err, firstCauses(err))
	}
	for _, m := range msgs {
		v, _ := m.Value.Encode()
		emit(map[string]any{"partition": m.Partition, "offset": m.Offset, "value": string(v)})
	}
}

// kafkaBackoff is the Java producer's (KIP-580): retry.backoff.ms=100 doubling up to
// retry.backoff.max.ms=1000.
func kafkaBackoff(retries, _ int) time.Duration {
	if retries > 4 {
		return time.Second
	}
	return min(100*time.Millisecond<<retries, time.Second)
}

// firstCauses names the distinct reasons of a failed batch (sarama's error carries only a count).
func firstCauses(err error) string {
	var failed sarama.ProducerErrors
	if !errors.As(err, &failed) {
		return ""
	}
	seen := map[string]bool{}
	causes := []string{}
	for _, e := range failed {
		if text := e.Err.Error(); !seen[text] && len(causes) < 3 {
			seen[text] = true
			causes = append(causes, text)
		}
	}
	return " (" + strings.Join(causes, "; ") + ")"
}

// consumeGroup reads up to count records as a member of group, committing each; then leaves.
func consumeGroup(cfg *sarama.Config, topic, group string, count int, timeout time.Duration) int {
	cfg.Consumer.Offsets.AutoCommit.Enable = false
	cg, err := sarama.NewConsumerGroup(seeds(), group, cfg)
	if err != nil {
		die("new consumer group: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	h := &countingHandler{want: count, cancel: cancel}
	for ctx.Err() == nil {
		if err := cg.Consume(ctx, []string{topic}, h); err != nil && ctx.Err() == nil {
			die("consume: %v", err)
		}
	}
	if err := cg.Close(); err != nil {
		die("close: %v", err)
	}
	return h.got
}

type countingHandler struct {
	mu     sync.Mutex
	want   int
	got    int
	cancel context.CancelFunc
}

func (h *countingHandler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (h *countingHandler) Cleanup(sarama.ConsumerGroupSession) error { return nil }
func (h *countingHandler) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for m := range claim.Messages() {
		h.mu.Lock()
		if h.got >= h.want {
			h.mu.Unlock()
			return nil
		}
		h.got++
		emit(recordLine(m))
		sess.MarkMessage(m, "")
		sess.Commit()
		if h.got >= h.want {
			h.cancel()
		}
		h.mu.Unlock()
	}
	return nil
}

func cmdConsume(args []string) {
	fs := flag.NewFlagSet("consume", flag.ExitOnError)
	topic := fs.String("topic", "", "")
	count := fs.Int("count", 10, "stop after this many records")
	group := fs.String("group", "", "consume in this group and commit what was read")
	isolation := fs.String("isolation", "uncommitted", "")
	timeoutMs := fs.Int("timeout-ms", 15000, "")
	fs.Parse(args)

	cfg := config()
	if *isolation == "committed" {
		cfg.Consumer.IsolationLevel = sarama.ReadCommitted
	}
	timeout := time.Duration(*timeoutMs) * time.Millisecond
	if *group != "" {
		emit(map[string]any{"consumed": consumeGroup(cfg, *topic, *group, *count, timeout)})
		return
	}
	client, err := sarama.NewClient(seeds(), cfg)
	if err != nil {
		die("new client: %v", err)
	}
	defer client.Close()
	consumer, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		die("new consumer: %v", err)
	}
	defer consumer.Close()
	partitions, err := client.Partitions(*topic)
	if err != nil {
		die("partitions: %v", err)
	}
	merged := make(chan *sarama.ConsumerMessage)
	for _, p := range partitions {
		pc, err := consumer.ConsumePartition(*topic, p, sarama.OffsetOldest)
		if err != nil {
			die("consume partition %d: %v", p, err)
		}
		defer pc.AsyncClose()
		go func() {
			for m := range pc.Messages() {
				merged <- m
			}
		}()
	}
	got := 0
	deadline := time.After(timeout)
	for got < *count {
		select {
		case m := <-merged:
			emit(recordLine(m))
			got++
		case <-deadline:
			emit(map[string]any{"consumed": got})
			return
		}
	}
	emit(map[string]any{"consumed": got})
}

// --- groups -----------------------------------------------------------------------------------

type member struct {
	name     string
	cg       sarama.ConsumerGroup
	mu       sync.Mutex
	assigned map[int32]bool
	events   int // sessions set up with a non-empty assignment
	topic    string
	cancel   context.CancelFunc
	done     chan struct{}
}

var (
	consumedMu sync.Mutex
	phase      int
	consumed   int
)

func (m *member) Setup(sess sarama.ConsumerGroupSession) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.assigned = map[int32]bool{}
	for _, p := range sess.Claims()[m.topic] {
		m.assigned[p] = true
	}
	if len(m.assigned) > 0 {
		m.events++
	}
	return nil
}

func (m *member) Cleanup(sess sarama.ConsumerGroupSession) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.assigned = map[int32]bool{}
	return nil
}

func (m *member) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for msg := range claim.Messages() {
		consumedMu.Lock()
		line := recordLine(msg)
		line["member"] = m.name
		line["phase"] = phase
		emit(line)
		consumed++
		consumedMu.Unlock()
		sess.MarkMessage(msg, "")
		sess.Commit()
	}
	return nil
}

func (m *member) owned() []int32 {
	m.mu.Lock()
	defer m.mu.Unlock()
	var ps []int32
	for p := range m.assigned {
		ps = append(ps, p)
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
	return ps
}

func joinMember(name, topic, group, instance string) *member {
	cfg := config()
	cfg.Consumer.Offsets.AutoCommit.Enable = false
	cfg.Consumer.Group.Session.Timeout = 6 * time.Second
	cfg.Consumer.Group.Heartbeat.Interval = 500 * time.Millisecond
	cfg.Consumer.Group.InstanceId = instance
	cg, err := sarama.NewConsumerGroup(seeds(), group, cfg)
	if err != nil {
		die("new consumer group: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &member{name: name, cg: cg, assigned: map[int32]bool{}, topic: topic, cancel: cancel,
		done: make(chan struct{})}
	go func() {
		defer close(m.done)
		for ctx.Err() == nil {
			if err := cg.Consume(ctx, []string{topic}, m); err != nil && ctx.Err() == nil {
				emit(map[string]any{"member": name, "consume_error": err.Error()})
				time.Sleep(100 * time.Millisecond)
			}
		}
	}()
	return m
}

func (m *member) close() {
	m.cancel()
	<-m.done
	if err := m.cg.Close(); err != nil { // leaves the group (a static member does not)
		emit(map[string]any{"member": m.name, "close_error": err.Error()})
	}
}

func waitBalanced(members []*member, partitions int, timeout time.Duration) map[string][]int32 {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		assignment := map[string][]int32{}
		seen := map[int32]int{}
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
	state := map[string][]int32{}
	for _, m := range members {
		state[m.name] = m.owned()
	}
	die("group not balanced after %v: %v", timeout, state)
	return nil
}

func produceTo(topic string, partitions int, values []string) {
	cfg := config()
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	p := syncProducer(cfg)
	defer p.Close()
	var msgs []*sarama.ProducerMessage
	for i, v := range values {
		msgs = append(msgs, &sarama.ProducerMessage{Topic: topic, Partition: int32(i % partitions),
			Value: sarama.StringEncoder(v)})
	}
	if err := p.SendMessages(msgs); err != nil {
		die("produce: %v", err)
	}
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

	m0 := joinMember("m0", *topic, *group, "")
	emit(map[string]any{"phase": 0, "assignment": waitBalanced([]*member{m0}, *partitions, 30*time.Second)})
	members := []*member{m0, joinMember("m1", *topic, *group, ""), joinMember("m2", *topic, *group, "")}
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

func cmdStatic(args []string) {
	fs := flag.NewFlagSet("static", flag.ExitOnError)
	topic := fs.String("topic", "", "")
	group := fs.String("group", "", "")
	partitions := fs.Int("partitions", 6, "")
	fs.Parse(args)

	a := joinMember("a", *topic, *group, "static-a")
	b := joinMember("b", *topic, *group, "static-b")
	before := waitBalanced([]*member{a, b}, *partitions, 30*time.Second)
	time.Sleep(time.Second)
	emit(map[string]any{"phase": "before", "assignment": before,
		"events": map[string]int{"a": a.events, "b": b.events}})
	a.close()
	a = joinMember("a", *topic, *group, "static-a")
	after := waitBalanced([]*member{a, b}, *partitions, 30*time.Second)
	time.Sleep(2 * time.Second) // a rebalance of b would happen within this
	emit(map[string]any{"phase": "after", "assignment": after,
		"events": map[string]int{"a": a.events, "b": b.events}})
	a.close()
	b.close()
}

// --- admin ------------------------------------------------------------------------------------

func cmdAdmin(args []string) {
	fs := flag.NewFlagSet("admin", flag.ExitOnError)
	topic := fs.String("topic", "", "")
	group := fs.String("group", "", "")
	fs.Parse(args)

	adm, err := sarama.NewClusterAdmin(seeds(), config())
	if err != nil {
		die("new admin: %v", err)
	}
	defer adm.Close()
	retention := "3600000"
	err = adm.CreateTopic(*topic, &sarama.TopicDetail{NumPartitions: 3, ReplicationFactor: 1,
		ConfigEntries: map[string]*string{"retention.ms": &retention}}, false)
	if err != nil {
		die("create: %v", err)
	}
	emit(map[string]any{"step": "create", "topic": *topic})
	err = adm.CreateTopic(*topic, &sarama.TopicDetail{NumPartitions: 1, ReplicationFactor: 1}, false)
	emit(map[string]any{"step": "create-again", "error_code": errorCode(err)})

	var parts []int32
	for i := 0; i < 50; i++ { // until every partition has a leader
		meta, err := adm.DescribeTopics([]string{*topic})
		if err == nil && len(meta) == 1 && meta[0].Err == sarama.ErrNoError && len(meta[0].Partitions) == 3 {
			parts = nil
			for _, p := range meta[0].Partitions {
				parts = append(parts, p.ID)
			}
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	sort.Slice(parts, func(i, j int) bool { return parts[i] < parts[j] })
	emit(map[string]any{"step": "describe", "partitions": parts})

	entries, err := adm.DescribeConfig(sarama.ConfigResource{Type: sarama.TopicResource, Name: *topic})
	if err != nil {
		die("describe config: %v", err)
	}
	configs := map[string]any{}
	for _, e := range entries {
		if e.Name == "retention.ms" || e.Name == "cleanup.policy" {
			configs[e.Name] = map[string]any{"value": e.Value, "source": e.Source.String(), "default": e.Default}
		}
	}
	emit(map[string]any{"step": "describe-configs", "configs": configs})

	groups, err := adm.ListConsumerGroups()
	if err != nil {
		die("list groups: %v", err)
	}
	protocol, has := groups[*group]
	emit(map[string]any{"step": "list-groups", "has_group": has, "protocol_type": protocol})

	if err := adm.DeleteTopic(*topic); err != nil {
		die("delete: %v", err)
	}
	emit(map[string]any{"step": "delete", "topic": *topic})
	err = adm.DeleteTopic(*topic)
	emit(map[string]any{"step": "delete-again", "error_code": errorCode(err)})
}

// --- errors and transactions ------------------------------------------------------------------

func cmdOversize(args []string) {
	fs := flag.NewFlagSet("oversize", flag.ExitOnError)
	topic := fs.String("topic", "", "")
	size := fs.Int("size", 8000, "")
	fs.Parse(args)

	p := syncProducer(config()) // no compression: sarama's default
	defer p.Close()
	_, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: *topic,
		Value: sarama.ByteEncoder(strings.Repeat("x", *size))})
	line := map[string]any{"step": "big", "error_code": errorCode(err)}
	if err != nil {
		line["error"] = err.Error()
	}
	emit(line)
	partition, offset, err := p.SendMessage(&sarama.ProducerMessage{Topic: *topic, Value: sarama.StringEncoder("small")})
	if err != nil {
		die("small record after the refused one: %v", err)
	}
	emit(map[string]any{"step": "small", "partition": partition, "offset": offset})
}

func cmdTxn(args []string) {
	fs := flag.NewFlagSet("txn", flag.ExitOnError)
	topic := fs.String("topic", "", "")
	txid := fs.String("txid", "", "")
	fs.Parse(args)

	cfg := config()
	cfg.Producer.Idempotent = true
	cfg.Producer.Transaction.ID = *txid
	cfg.Net.MaxOpenRequests = 1
	p := syncProducer(cfg)
	defer p.Close()
	for _, step := range []string{"commit1", "abort", "commit2"} {
		if err := p.BeginTxn(); err != nil {
			die("begin: %v", err)
		}
		var msgs []*sarama.ProducerMessage
		for i := 0; i < 3; i++ {
			msgs = append(msgs, &sarama.ProducerMessage{Topic: *topic,
				Value: sarama.StringEncoder(fmt.Sprintf("%s-%d", step, i))})
		}
		if err := p.SendMessages(msgs); err != nil {
			die("produce in txn: %v", err)
		}
		var offsets []int64
		for _, m := range msgs {
			offsets = append(offsets, m.Offset)
		}
		var err error
		if step == "abort" {
			err = p.AbortTxn()
		} else {
			err = p.CommitTxn()
		}
		if err != nil {
			die("end txn %s: %v", step, err)
		}
		emit(map[string]any{"step": step, "offsets": offsets})
	}
}

// --- consume-transform-produce ----------------------------------------------------------------

type ctpHandler struct {
	n      int
	msgs   []*sarama.ConsumerMessage
	run    func(sarama.ConsumerGroupSession, []*sarama.ConsumerMessage)
	cancel context.CancelFunc
}

func (h *ctpHandler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (h *ctpHandler) Cleanup(sarama.ConsumerGroupSession) error { return nil }
func (h *ctpHandler) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for m := range claim.Messages() {
		h.msgs = append(h.msgs, m)
		if len(h.msgs) == h.n {
			h.run(sess, h.msgs) // still a member: the offsets carry this generation and member id
			h.cancel()
			return nil
		}
	}
	return nil
}

// cmdCtp reads -count records of -in (partition 0) as a member of -group, then runs two
// transactions, each producing the transformed half to -out with the input offsets added through
// AddOffsetsToTxnWithGroupMetadata (KIP-447): the first committed, the second aborted.
func cmdCtp(args []string) {
	fs := flag.NewFlagSet("ctp", flag.ExitOnError)
	in := fs.String("in", "", "")
	out := fs.String("out", "", "")
	group := fs.String("group", "", "")
	txid := fs.String("txid", "", "")
	count := fs.Int("count", 10, "")
	fs.Parse(args)

	pcfg := config()
	pcfg.Producer.Idempotent = true
	pcfg.Producer.Transaction.ID = *txid
	pcfg.Net.MaxOpenRequests = 1
	p := syncProducer(pcfg)
	defer p.Close()

	ccfg := config()
	ccfg.Consumer.Offsets.AutoCommit.Enable = false
	ccfg.Consumer.IsolationLevel = sarama.ReadCommitted
	cg, err := sarama.NewConsumerGroup(seeds(), *group, ccfg)
	if err != nil {
		die("new consumer group: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ran := false
	h := &ctpHandler{n: *count, cancel: cancel, run: func(sess sarama.ConsumerGroupSession, msgs []*sarama.ConsumerMessage) {
		ran = true
		meta := sarama.NewConsumerGroupMetadataFromSession(sess, *group, nil)
		half := len(msgs) / 2
		for _, step := range []struct {
			name string
			part []*sarama.ConsumerMessage
		}{{"commit", msgs[:half]}, {"abort", msgs[half:]}} {
			if err := p.BeginTxn(); err != nil {
				die("begin: %v", err)
			}
			var outs []*sarama.ProducerMessage
			for _, m := range step.part {
				outs = append(outs, &sarama.ProducerMessage{Topic: *out, Value: sarama.StringEncoder("out-" + string(m.Value))})
			}
			if err := p.SendMessages(outs); err != nil {
				die("produce in txn: %v", err)
			}
			next := step.part[len(step.part)-1].Offset + 1
			offsets := map[string][]*sarama.PartitionOffsetMetadata{*in: {{Partition: 0, Offset: next, LeaderEpoch: -1}}}
			if err := p.AddOffsetsToTxnWithGroupMetadata(offsets, meta); err != nil {
				die("add offsets to txn: %v", err)
			}
			if step.name == "commit" {
				err = p.CommitTxn()
			} else {
				err = p.AbortTxn()
			}
			if err != nil {
				die("end txn %s: %v", step.name, err)
			}
			emit(map[string]any{"step": step.name, "base_offset": outs[0].Offset, "input_next": next,
				"generation": meta.GenerationID})
		}
	}}
	for ctx.Err() == nil {
		if err := cg.Consume(ctx, []string{*in}, h); err != nil && ctx.Err() == nil {
			die("consume: %v", err)
		}
	}
	if err := cg.Close(); err != nil {
		die("close: %v", err)
	}
	if !ran {
		die("read %d of %d records", len(h.msgs), *count)
	}
}

func main() {
	flag.StringVar(&bootstrap, "bootstrap", "127.0.0.1:9092", "")
	v := flag.String("version", sarama.DefaultVersion.String(), "the Kafka version sarama assumes")
	flag.Usage = usage
	flag.Parse()
	var err error
	if version, err = sarama.ParseKafkaVersion(*v); err != nil {
		die("version: %v", err)
	}
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
	case "static":
		cmdStatic(rest)
	case "admin":
		cmdAdmin(rest)
	case "oversize":
		cmdOversize(rest)
	case "txn":
		cmdTxn(rest)
	case "ctp":
		cmdCtp(rest)
	default:
		usage()
	}
}
