import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.Future;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.OffsetAndTimestamp;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * A small driver for Java's kafka-clients, used by compat-tests/java. One command per run; results are
 * printed as one JSON object per line so the Python side can compare them with other clients' views.
 *
 *   produce  BOOTSTRAP TOPIC COUNT [key=value producer configs...]       -> {"partition":p,"offset":o} per record
 *   txn      BOOTSTRAP TOPIC TXN_ID PLAN [configs...]                    PLAN like "c3,a2,c1": commit 3, abort 2, ...
 *   consume  BOOTSTRAP TOPIC GROUP COUNT [key=value consumer configs...]  -> {"partition","offset","key","value","headers"}
 *   admin    BOOTSTRAP TOPIC PARTITIONS                                    -> creates, then describes cluster and topic
 *   group    BOOTSTRAP TOPIC GROUP MEMBERS PARTITIONS COUNT [configs...]   see GroupScenarios.group
 *   static   BOOTSTRAP TOPIC GROUP PARTITIONS [configs...]                 see GroupScenarios.staticRestart
 *   produce-ts BOOTSTRAP TOPIC PLAN                                        PLAN like "t1,t2/t3": timestamps, "/" flushes
 *   times    BOOTSTRAP TOPIC PARTITION TS[,TS...]                          -> {"ts","offset","timestamp"} (null past the end)
 *   roundtrips BOOTSTRAP TOPIC [configs...] [-- ...]                    see SaslRoundTrips
 *   oversize BOOTSTRAP TOPIC SIZE [configs...]                             -> {"error","message"} or {"partition","offset"}
 *   txn-fence | txn-ctp | txn-lso | txn-read | txn-refused ...              see TxnScenarios
 *   decode-group-records -  (stdin: KEYHEX VALUEHEX lines)                 see GroupRecords (Kafka 4)
 *   share    BOOTSTRAP TOPIC GROUP COUNT                                   see ShareScenarios (kafka-clients 4.x)
 *
 * Record i of a produce run has key "k<i mod 4>", value "v<i>-<topic>" and a header "i" = i.
 */
public final class GreteJavaClient {
    private GreteJavaClient() { }

    public static void main(String[] args) throws Exception {
        if (args.length < 2) {
            System.err.println("usage: produce|txn|consume|admin BOOTSTRAP ...");
            System.exit(2);
        }
        switch (args[0]) {
            case "produce": produce(args); break;
            case "txn": transactions(args); break;
            case "consume": consume(args); break;
            case "admin": admin(args); break;
            case "group": GroupScenarios.group(args); break;
            case "static": GroupScenarios.staticRestart(args); break;
            case "produce-ts": produceTimestamps(args); break;
            case "times": offsetsForTimes(args); break;
            case "oversize": oversize(args); break;
            case "txn-fence": TxnScenarios.fence(args); break;
            case "txn-ctp": TxnScenarios.consumeTransformProduce(args); break;
            case "txn-lso": TxnScenarios.lastStableOffset(args); break;
            case "txn-read": TxnScenarios.read(args); break;
            case "txn-refused": TxnScenarios.refusedFirstRecord(args); break;
            case "decode-group-records": GroupRecords.decode(args); break;
            case "roundtrips": SaslRoundTrips.run(args); break;
            case "share": ShareScenarios.share(args); break;
            default:
                System.err.println("unknown command " + args[0]);
                System.exit(2);
        }
    }

    static void extraConfigs(Properties props, String[] args, int from) {
        for (int i = from; i < args.length; i++) {
            int eq = args[i].indexOf('=');
            props.put(args[i].substring(0, eq), args[i].substring(eq + 1));
        }
    }

    static Properties producerProps(String bootstrap) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        return p;
    }

    static ProducerRecord<String, String> record(String topic, int i) {
        ProducerRecord<String, String> r = new ProducerRecord<>(topic, "k" + (i % 4), "v" + i + "-" + topic);
        r.headers().add("i", Integer.toString(i).getBytes(java.nio.charset.StandardCharsets.UTF_8));
        return r;
    }

    private static void produce(String[] args) throws Exception {
        String topic = args[2];
        int count = Integer.parseInt(args[3]);
        Properties p = producerProps(args[1]);
        extraConfigs(p, args, 4);
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            List<Future<RecordMetadata>> sent = new ArrayList<>();
            for (int i = 0; i < count; i++) {
                sent.add(producer.send(record(topic, i)));
            }
            for (Future<RecordMetadata> f : sent) {
                RecordMetadata md = f.get();
                System.out.println("{\"partition\":" + md.partition() + ",\"offset\":" + md.offset() + "}");
            }
        }
    }

    private static void transactions(String[] args) throws Exception {
        String topic = args[2];
        Properties p = producerProps(args[1]);
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, args[3]);
        extraConfigs(p, args, 5);
        int i = 0;
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            producer.initTransactions();
            for (String step : args[4].split(",")) {
                int n = Integer.parseInt(step.substring(1));
                producer.beginTransaction();
                for (int k = 0; k < n; k++) {
                    producer.send(record(topic, i++));
                }
                producer.flush();
                if (step.charAt(0) == 'c') {
                    producer.commitTransaction();
                } else {
                    producer.abortTransaction();
                }
                System.out.println("{\"step\":\"" + step + "\",\"done\":true}");
            }
        }
    }

    private static void produceTimestamps(String[] args) throws Exception {
        String topic = args[2];
        int i = 0;
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(producerProps(args[1]))) {
            for (String batch : args[3].split("/")) {
                List<Future<RecordMetadata>> sent = new ArrayList<>();
                for (String ts : batch.split(",")) {
                    sent.add(producer.send(new ProducerRecord<>(topic, 0, Long.parseLong(ts), "k" + i, "v" + i)));
                    i++;
                }
                producer.flush();  // one batch per "/"-separated group, so lookups cross batch boundaries
                for (Future<RecordMetadata> f : sent) {
                    RecordMetadata md = f.get();
                    System.out.println("{\"offset\":" + md.offset() + ",\"timestamp\":" + md.timestamp() + "}");
                }
            }
        }
    }

    private static void offsetsForTimes(String[] args) {
        TopicPartition tp = new TopicPartition(args[2], Integer.parseInt(args[3]));
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(consumerProps(args[1], null))) {
            for (String ts : args[4].split(",")) {
                long t = Long.parseLong(ts);
                OffsetAndTimestamp found = consumer.offsetsForTimes(Collections.singletonMap(tp, t),
                    Duration.ofSeconds(20)).get(tp);
                System.out.println("{\"ts\":" + t + ",\"offset\":" + (found == null ? "null" : found.offset())
                    + ",\"timestamp\":" + (found == null ? "null" : found.timestamp()) + "}");
            }
        }
    }

    private static void oversize(String[] args) throws Exception {
        String topic = args[2];
        int size = Integer.parseInt(args[3]);
        Properties p = producerProps(args[1]);
        p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "20000");
        extraConfigs(p, args, 4);
        String value = "x".repeat(size);
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            try {
                RecordMetadata md = producer.send(new ProducerRecord<>(topic, 0, "big", value)).get();
                System.out.println("{\"partition\":" + md.partition() + ",\"offset\":" + md.offset() + "}");
            } catch (java.util.concurrent.ExecutionException e) {
                Throwable c = e.getCause();
                System.out.println("{\"error\":" + quote(c.getClass().getSimpleName()) + ",\"message\":"
                    + quote(String.valueOf(c.getMessage())) + "}");
            }
            // The same producer still works afterwards: the refusal is per record, not fatal.
            RecordMetadata md = producer.send(new ProducerRecord<>(topic, 0, "small", "ok")).get();
            System.out.println("{\"partition\":" + md.partition() + ",\"offset\":" + md.offset() + "}");
        }
    }

    static Properties consumerProps(String bootstrap, String group) {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        if (group != null) {
            p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        }
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        return p;
    }

    private static void consume(String[] args) {
        String topic = args[2];
        int count = Integer.parseInt(args[4]);
        Properties p = consumerProps(args[1], args[3]);
        extraConfigs(p, args, 5);
        long deadline = System.currentTimeMillis() + 60_000;
        int seen = 0;
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(p)) {
            consumer.subscribe(Collections.singletonList(topic));
            while (seen < count && System.currentTimeMillis() < deadline) {
                ConsumerRecords<String, String> batch = consumer.poll(Duration.ofMillis(500));
                for (ConsumerRecord<String, String> r : batch) {
                    System.out.println(recordJson(r));
                    seen++;
                }
            }
            // Commit what was read, so other clients can check the group's offsets.
            Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
            for (TopicPartition tp : consumer.assignment()) {
                offsets.put(tp, new OffsetAndMetadata(consumer.position(tp)));
            }
            consumer.commitSync(offsets);
        }
        if (seen < count) {
            System.err.println("timed out after " + seen + " of " + count + " records");
            System.exit(3);
        }
    }

    private static String recordJson(ConsumerRecord<String, String> r) {
        StringBuilder headers = new StringBuilder();
        for (Header h : r.headers()) {
            if (headers.length() > 0) {
                headers.append(',');
            }
            headers.append(quote(h.key())).append(':')
                .append(quote(new String(h.value(), java.nio.charset.StandardCharsets.UTF_8)));
        }
        return "{\"partition\":" + r.partition() + ",\"offset\":" + r.offset() + ",\"key\":" + quote(r.key())
            + ",\"value\":" + quote(r.value()) + ",\"headers\":{" + headers + "}}";
    }

    private static void admin(String[] args) throws Exception {
        String topic = args[2];
        int partitions = Integer.parseInt(args[3]);
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, args[1]);
        try (Admin admin = Admin.create(p)) {
            admin.createTopics(Collections.singletonList(new NewTopic(topic, partitions, (short) 1))).all().get();
            DescribeClusterResult cluster = admin.describeCluster();
            Collection<Node> nodes = cluster.nodes().get();
            StringBuilder ids = new StringBuilder();
            for (Node n : nodes) {
                ids.append(ids.length() > 0 ? "," : "").append(n.id());
            }
            System.out.println("{\"cluster_id\":" + quote(cluster.clusterId().get()) + ",\"controller\":"
                + cluster.controller().get().id() + ",\"nodes\":[" + ids + "]}");
            TopicDescription d = waitForLeaders(admin, topic, partitions);
            StringBuilder leaders = new StringBuilder();
            for (TopicPartitionInfo info : d.partitions()) {
                leaders.append(leaders.length() > 0 ? "," : "").append(info.leader() == null ? -1 : info.leader().id());
            }
            System.out.println("{\"topic\":" + quote(d.name()) + ",\"partitions\":" + d.partitions().size()
                + ",\"leaders\":[" + leaders + "]}");
            boolean listed = admin.listTopics().names().get().contains(topic);
            System.out.println("{\"listed\":" + listed + "}");
        }
    }

    private static TopicDescription waitForLeaders(Admin admin, String topic, int partitions) throws Exception {
        long deadline = System.currentTimeMillis() + 30_000;
        while (true) {
            try {
                TopicDescription d = admin.describeTopics(Collections.singletonList(topic)).allTopicNames().get().get(topic);
                boolean ready = d.partitions().size() == partitions;
                for (TopicPartitionInfo info : d.partitions()) {
                    ready &= info.leader() != null;
                }
                if (ready || System.currentTimeMillis() > deadline) {
                    return d;
                }
            } catch (java.util.concurrent.ExecutionException e) {
                if (System.currentTimeMillis() > deadline) {
                    throw e;
                }
            }
            Thread.sleep(100);
        }
    }

    static String quote(String s) {
        if (s == null) {
            return "null";
        }
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
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
