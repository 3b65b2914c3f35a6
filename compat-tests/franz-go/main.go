// Command franzgo drives franz-go (github.com/twmb/franz-go) for grete's compat tests.
//
//	franzgo -bootstrap HOST:PORT <command> [flags]
//
// Every command prints JSON lines on stdout (one object a line) and exits 0 when it ran to the
// end; the Python tests judge the lines. Commands: produce, consume, group, static, admin,
// oversize, txn (see usage()).
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

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

var (
	bootstrap string
	outMu     sync.Mutex
)

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
	fmt.Fprintf(os.Stderr, "franzgo: "+format+"\n", args...)
	os.Exit(1)
}

func usage() {
	fmt.Fprintln(os.Stderr, `usage: franzgo -bootstrap HOST:PORT COMMAND [flags]
commands:
  produce  -topic T -count N [-codec none|gzip|snappy|lz4|zstd] [-keys K] [-headers] [-ts BASE_MS]
           [-partition P] [-idempotent=true|false] [-prefix v]
  consume  -topic T -count N [-group G] [-isolation committed|uncommitted] [-timeout-ms MS]
  group    -topic T -group G -partitions P -count N [-protocol classic|consumer]
  static   -topic T -group G -partitions P
  admin    -topic T -group G       (creates, describes and deletes T; G is a group that exists)
  oversize -topic T -size BYTES
  txn      -topic T -txid ID
  ctp      -in T -out T -group G -txid ID -count N`)
	os.Exit(2)
}

func errorCode(err error) int16 {
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return ke.Code
	}
	return -1
}

func codec(name string) kgo.CompressionCodec {
	switch name {
	case "none":
		return kgo.NoCompression()
	case "gzip":
		return kgo.GzipCompression()
	case "snappy":
		return kgo.SnappyCompression()
	case "lz4":
		return kgo.Lz4Compression()
	case "zstd":
		return kgo.ZstdCompression()
	}
	die("unknown codec %q", name)
	return kgo.NoCompression()
}

// seeds: every address of -bootstrap (a cluster's are given comma-separated, as Kafka's tools take them).
func seeds() []string { return strings.Split(bootstrap, ",") }

func newClient(opts ...kgo.Opt) *kgo.Client {
	base := []kgo.Opt{kgo.SeedBrokers(seeds()...), kgo.FetchMaxWait(200 * time.Millisecond),
		kgo.RetryTimeout(20 * time.Second)}
	if os.Getenv("FRANZGO_DEBUG") != "" { // the client's own log on stderr, to see what it waits for
		base = append(base, kgo.WithLogger(kgo.BasicLogger(os.Stderr, kgo.LogLevelDebug, nil)))
	}
	cl, err := kgo.NewClient(append(base, opts...)...)
	if err != nil {
		die("new client: %v", err)
	}
	return cl
}

func ctxFor(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

func recordLine(r *kgo.Record) map[string]any {
	headers := [][]string{}
	for _, h := range r.Headers {
		headers = append(headers, []string{h.Key, string(h.Value)})
	}
	var key any
	if r.Key != nil {
		key = string(r.Key)
	}
	return map[string]any{"partition": r.Partition, "offset": r.Offset, "key": key, "value": string(r.Value),
		"headers": headers, "timestamp": r.Timestamp.UnixMilli()}
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
	partition := fs.Int("partition", -1, "")
	idempotent := fs.Bool("idempotent", true, "")
	prefix := fs.String("prefix", "v", "")
	fs.Parse(args)

	opts := []kgo.Opt{kgo.DefaultProduceTopic(*topic), kgo.ProducerBatchCompression(codec(*codecName)),
		kgo.RequiredAcks(kgo.AllISRAcks())}
	if !*idempotent {
		opts = append(opts, kgo.DisableIdempotentWrite())
	}
	if *partition >= 0 {
		opts = append(opts, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	}
	cl := newClient(opts...)
	defer cl.Close()
	ctx, cancel := ctxFor(60 * time.Second)
	defer cancel()
	recs := make([]*kgo.Record, *count)
	for i := range recs {
		r := &kgo.Record{Value: []byte(*prefix + strconv.Itoa(i)), Partition: int32(*partition)}
		if *keys > 0 {
			r.Key = []byte("k" + strconv.Itoa(i%*keys))
		}
		if *headers {
			r.Headers = []kgo.RecordHeader{{Key: "n", Value: []byte(strconv.Itoa(i))},
				{Key: "dup", Value: []byte("a")}, {Key: "dup", Value: []byte("b")}}
		}
		if *ts > 0 {
			r.Timestamp = time.UnixMilli(*ts + int64(i))
		}
		recs[i] = r
	}
	results := cl.ProduceSync(ctx, recs...)
	if err := results.FirstErr(); err != nil {
		die("produce: %v", err)
	}
	for _, res := range results {
		emit(map[string]any{"partition": res.Record.Partition, "offset": res.Record.Offset,
			"value": string(res.Record.Value)})
	}
	if *idempotent {
		id, epoch, err := cl.ProducerID(ctx)
		if err != nil {
			die("producer id: %v", err)
		}
		emit(map[string]any{"producer_id": id, "producer_epoch": epoch})
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

	opts := []kgo.Opt{kgo.ConsumeTopics(*topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())}
	if *isolation == "committed" {
		opts = append(opts, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	}
	if *group != "" {
		opts = append(opts, kgo.ConsumerGroup(*group), kgo.DisableAutoCommit())
	}
	cl := newClient(opts...)
	defer cl.Close()
	ctx, cancel := ctxFor(time.Duration(*timeoutMs) * time.Millisecond)
	defer cancel()
	got := 0
	for got < *count && ctx.Err() == nil {
		fetches := cl.PollRecords(ctx, *count-got)
		var recs []*kgo.Record
		fetches.EachRecord(func(r *kgo.Record) { recs = append(recs, r) })
		for _, r := range recs {
			emit(recordLine(r))
		}
		got += len(recs)
		if *group != "" && len(recs) > 0 {
			if err := cl.CommitRecords(ctx, recs...); err != nil {
				die("commit: %v", err)
			}
		}
	}
	emit(map[string]any{"consumed": got})
}

// --- groups -----------------------------------------------------------------------------------

type member struct {
	name     string
	cl       *kgo.Client
	mu       sync.Mutex
	assigned map[int32]bool
	events   int // OnPartitionsAssigned calls with a non-empty assignment
	phase    *int
	consumed *int
	stop     chan struct{}
	done     chan struct{}
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

var consumedMu sync.Mutex

// groupProtocol is the group command's -protocol: "classic" (the client assigns) or "consumer" (KIP-848).
var groupProtocol = "classic"

func joinMember(name, topic, group, instance string, phase, consumed *int) *member {
	m := &member{name: name, assigned: map[int32]bool{}, phase: phase, consumed: consumed,
		stop: make(chan struct{}), done: make(chan struct{})}
	opts := []kgo.Opt{kgo.ConsumeTopics(topic), kgo.ConsumerGroup(group), kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.SessionTimeout(6 * time.Second), kgo.HeartbeatInterval(500 * time.Millisecond),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, a map[string][]int32) {
			m.mu.Lock()
			defer m.mu.Unlock()
			for _, p := range a[topic] {
				m.assigned[p] = true
			}
			if len(a[topic]) > 0 {
				m.events++
			}
		}),
		kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, r map[string][]int32) {
			m.mu.Lock()
			defer m.mu.Unlock()
			for _, p := range r[topic] {
				delete(m.assigned, p)
			}
		}),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, r map[string][]int32) {
			m.mu.Lock()
			defer m.mu.Unlock()
			for _, p := range r[topic] {
				delete(m.assigned, p)
			}
		}),
	}
	if instance != "" {
		opts = append(opts, kgo.InstanceID(instance))
	}
	if groupProtocol == "consumer" {
		// KIP-848: the broker assigns (cooperative-sticky is sent as the "uniform" server assignor).
		opts = append(opts, kgo.ServerSideBalancer())
	}
	m.cl = newClient(opts...)
	go m.loop()
	return m
}

func (m *member) loop() {
	defer close(m.done)
	for {
		select {
		case <-m.stop:
			return
		default:
		}
		ctx, cancel := ctxFor(200 * time.Millisecond)
		fetches := m.cl.PollFetches(ctx)
		cancel()
		var recs []*kgo.Record
		fetches.EachRecord(func(r *kgo.Record) { recs = append(recs, r) })
		if len(recs) > 0 {
			consumedMu.Lock()
			for _, r := range recs {
				line := recordLine(r)
				line["member"] = m.name
				line["phase"] = *m.phase
				emit(line)
			}
			*m.consumed += len(recs)
			consumedMu.Unlock()
			cctx, ccancel := ctxFor(10 * time.Second)
			if err := m.cl.CommitRecords(cctx, recs...); err != nil {
				emit(map[string]any{"member": m.name, "commit_error": err.Error()})
			}
			ccancel()
		}
		m.cl.AllowRebalance()
	}
}

func (m *member) close() {
	close(m.stop)
	<-m.done
	m.cl.Close() // leaves the group (a static member does not)
}

// waitBalanced waits until the members own every partition between them, each at least one.
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
	cl := newClient(kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	defer cl.Close()
	ctx, cancel := ctxFor(30 * time.Second)
	defer cancel()
	var recs []*kgo.Record
	for i, v := range values {
		recs = append(recs, &kgo.Record{Value: []byte(v), Partition: int32(i % partitions)})
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		die("produce: %v", err)
	}
}

func waitConsumed(consumed *int, want int, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		consumedMu.Lock()
		n := *consumed
		consumedMu.Unlock()
		if n >= want {
			time.Sleep(300 * time.Millisecond) // a duplicate would show up now
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	die("consumed %d of %d records", *consumed, want)
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
	protocol := fs.String("protocol", "classic", "classic or consumer (KIP-848, kgo.ServerSideBalancer)")
	fs.Parse(args)
	groupProtocol = *protocol

	phase, consumed := 0, 0
	m0 := joinMember("m0", *topic, *group, "", &phase, &consumed)
	emit(map[string]any{"phase": 0, "assignment": waitBalanced([]*member{m0}, *partitions, 30*time.Second)})
	members := []*member{m0, joinMember("m1", *topic, *group, "", &phase, &consumed),
		joinMember("m2", *topic, *group, "", &phase, &consumed)}
	consumedMu.Lock()
	phase = 1
	consumedMu.Unlock()
	emit(map[string]any{"phase": 1, "assignment": waitBalanced(members, *partitions, 30*time.Second)})
	produceTo(*topic, *partitions, values(1, *count, *topic))
	waitConsumed(&consumed, *count, 30*time.Second)

	consumedMu.Lock()
	phase = 2
	consumedMu.Unlock()
	m0.close()
	emit(map[string]any{"phase": 2, "left": "m0"})
	members = members[1:]
	emit(map[string]any{"phase": 2, "assignment": waitBalanced(members, *partitions, 30*time.Second)})
	produceTo(*topic, *partitions, values(2, *count, *topic))
	waitConsumed(&consumed, 2**count, 30*time.Second)
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

	phase, consumed := 0, 0
	a := joinMember("a", *topic, *group, "static-a", &phase, &consumed)
	b := joinMember("b", *topic, *group, "static-b", &phase, &consumed)
	before := waitBalanced([]*member{a, b}, *partitions, 30*time.Second)
	time.Sleep(time.Second)
	emit(map[string]any{"phase": "before", "assignment": before,
		"events": map[string]int{"a": a.events, "b": b.events}})
	a.close()
	a = joinMember("a", *topic, *group, "static-a", &phase, &consumed)
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

	cl := newClient()
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := ctxFor(60 * time.Second)
	defer cancel()

	created, err := adm.CreateTopic(ctx, 3, 1, map[string]*string{"retention.ms": kadm.StringPtr("3600000")}, *topic)
	if err != nil {
		die("create: %v", err)
	}
	emit(map[string]any{"step": "create", "topic": created.Topic, "partitions": created.NumPartitions})
	_, err = adm.CreateTopic(ctx, 1, 1, nil, *topic)
	emit(map[string]any{"step": "create-again", "error_code": errorCode(err)})

	var details kadm.TopicDetails
	for i := 0; i < 50; i++ { // until every partition has a leader
		details, err = adm.ListTopics(ctx, *topic)
		if err == nil && details[*topic].Err == nil && len(details[*topic].Partitions) == 3 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		die("list topics: %v", err)
	}
	var parts []int32
	for _, p := range details[*topic].Partitions {
		parts = append(parts, p.Partition)
	}
	sort.Slice(parts, func(i, j int) bool { return parts[i] < parts[j] })
	emit(map[string]any{"step": "describe", "partitions": parts})

	configs, err := adm.DescribeTopicConfigs(ctx, *topic)
	if err != nil {
		die("describe configs: %v", err)
	}
	rc, err := configs.On(*topic, nil)
	if err != nil {
		die("describe configs: %v", err)
	}
	values := map[string]any{}
	for _, c := range rc.Configs {
		if c.Key == "retention.ms" || c.Key == "cleanup.policy" {
			values[c.Key] = map[string]any{"value": c.MaybeValue(), "source": c.Source.String()}
		}
	}
	emit(map[string]any{"step": "describe-configs", "configs": values})

	groups, err := adm.ListGroups(ctx)
	if err != nil {
		die("list groups: %v", err)
	}
	var names []string
	for name := range groups {
		names = append(names, name)
	}
	sort.Strings(names)
	emit(map[string]any{"step": "list-groups", "groups": names, "has_group": groups[*group].Group == *group})

	deleted, err := adm.DeleteTopic(ctx, *topic)
	if err != nil {
		die("delete: %v", err)
	}
	emit(map[string]any{"step": "delete", "topic": deleted.Topic})
	_, err = adm.DeleteTopic(ctx, *topic)
	emit(map[string]any{"step": "delete-again", "error_code": errorCode(err)})
}

// --- errors and transactions ------------------------------------------------------------------

func cmdOversize(args []string) {
	fs := flag.NewFlagSet("oversize", flag.ExitOnError)
	topic := fs.String("topic", "", "")
	size := fs.Int("size", 8000, "")
	fs.Parse(args)

	// No compression (franz-go's default is snappy, which would shrink the record under the limit).
	cl := newClient(kgo.DefaultProduceTopic(*topic), kgo.RecordRetries(3),
		kgo.ProducerBatchCompression(kgo.NoCompression()))
	defer cl.Close()
	ctx, cancel := ctxFor(30 * time.Second)
	defer cancel()
	big := []byte(strings.Repeat("x", *size))
	err := cl.ProduceSync(ctx, &kgo.Record{Value: big}).FirstErr()
	line := map[string]any{"step": "big", "error_code": errorCode(err)}
	if err != nil {
		line["error"] = err.Error()
	}
	emit(line)
	res := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("small")})
	if err := res.FirstErr(); err != nil {
		die("small record after the refused one: %v", err)
	}
	emit(map[string]any{"step": "small", "partition": res[0].Record.Partition, "offset": res[0].Record.Offset})
}

func cmdTxn(args []string) {
	fs := flag.NewFlagSet("txn", flag.ExitOnError)
	topic := fs.String("topic", "", "")
	txid := fs.String("txid", "", "")
	fs.Parse(args)

	cl := newClient(kgo.DefaultProduceTopic(*topic), kgo.TransactionalID(*txid),
		kgo.TransactionTimeout(30*time.Second))
	defer cl.Close()
	ctx, cancel := ctxFor(60 * time.Second)
	defer cancel()
	for _, step := range []struct {
		name   string
		commit kgo.TransactionEndTry
	}{{"commit1", kgo.TryCommit}, {"abort", kgo.TryAbort}, {"commit2", kgo.TryCommit}} {
		if err := cl.BeginTransaction(); err != nil {
			die("begin: %v", err)
		}
		var recs []*kgo.Record
		for i := 0; i < 3; i++ {
			recs = append(recs, &kgo.Record{Value: []byte(fmt.Sprintf("%s-%d", step.name, i))})
		}
		results := cl.ProduceSync(ctx, recs...)
		if err := results.FirstErr(); err != nil {
			die("produce in txn: %v", err)
		}
		var offsets []int64
		for _, r := range results {
			offsets = append(offsets, r.Record.Offset)
		}
		if err := cl.EndTransaction(ctx, step.commit); err != nil {
			die("end txn %s: %v", step.name, err)
		}
		emit(map[string]any{"step": step.name, "offsets": offsets})
	}
}

// cmdCtp: a GroupTransactSession (member of -group, read_committed) reads -count records of -in
// and runs two transactions, each producing the transformed half to -out; End commits the consumed
// offsets inside the transaction (TxnOffsetCommit with the generation and member id). The first is
// committed, the second aborted.
func cmdCtp(args []string) {
	fs := flag.NewFlagSet("ctp", flag.ExitOnError)
	in := fs.String("in", "", "")
	out := fs.String("out", "", "")
	group := fs.String("group", "", "")
	txid := fs.String("txid", "", "")
	count := fs.Int("count", 10, "")
	fs.Parse(args)

	sess, err := kgo.NewGroupTransactSession(kgo.SeedBrokers(seeds()...), kgo.FetchMaxWait(200*time.Millisecond),
		kgo.TransactionalID(*txid), kgo.DefaultProduceTopic(*out), kgo.ConsumerGroup(*group),
		kgo.ConsumeTopics(*in), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.SessionTimeout(6*time.Second),
		kgo.HeartbeatInterval(500*time.Millisecond))
	if err != nil {
		die("new session: %v", err)
	}
	defer sess.Close()
	ctx, cancel := ctxFor(60 * time.Second)
	defer cancel()
	half := *count / 2
	for _, step := range []struct {
		name string
		end  kgo.TransactionEndTry
	}{{"commit", kgo.TryCommit}, {"abort", kgo.TryAbort}} {
		if err := sess.Begin(); err != nil {
			die("begin: %v", err)
		}
		var recs []*kgo.Record
		for len(recs) < half && ctx.Err() == nil {
			sess.PollRecords(ctx, half-len(recs)).EachRecord(func(r *kgo.Record) { recs = append(recs, r) })
		}
		if len(recs) < half {
			die("read %d of %d records", len(recs), half)
		}
		var outs []*kgo.Record
		for _, r := range recs {
			outs = append(outs, &kgo.Record{Value: []byte("out-" + string(r.Value))})
		}
		if err := sess.ProduceSync(ctx, outs...).FirstErr(); err != nil {
			die("produce in txn: %v", err)
		}
		_, generation := sess.Client().GroupMetadata()
		committed, err := sess.End(ctx, step.end)
		if err != nil {
			die("end %s: %v", step.name, err)
		}
		emit(map[string]any{"step": step.name, "base_offset": outs[0].Offset, "committed": committed,
			"input_next": recs[len(recs)-1].Offset + 1, "generation": generation})
	}
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
