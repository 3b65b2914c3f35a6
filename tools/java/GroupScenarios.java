import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;

/**
 * Consumer-group scenarios with several members in one JVM, one thread per member (a KafkaConsumer is
 * single-threaded, so each one is only touched by its own thread; the main thread reads what the
 * members publish).
 *
 *   group  BOOTSTRAP TOPIC GROUP MEMBERS PARTITIONS COUNT [configs]
 *     phase 1: MEMBERS join; once the assignment is stable it is printed, COUNT records (record i to
 *     partition i mod PARTITIONS) are produced and every delivery is printed with the member that got it;
 *     phase 2: member m0 closes (leaves), the rest rebalance, COUNT more records, same output.
 *   static BOOTSTRAP TOPIC GROUP PARTITIONS [configs]
 *     members a and b with group.instance.id; a is closed and a new consumer with a's instance id joins
 *     straight away; prints the assignment and each member's count of onPartitionsAssigned calls before
 *     and after ("phase":"before"/"after").
 */
final class GroupScenarios {
    private static final long STABLE_MS = 2_000;  // two heartbeats: a pending rebalance would show by then

    private GroupScenarios() { }

    /** One group member polling on its own thread. */
    static final class Member implements Runnable {
        final String name;
        final Properties props;
        final String topic;
        final Queue out;
        final AtomicInteger assignedCalls = new AtomicInteger();
        volatile List<Integer> assignment = Collections.emptyList();
        volatile boolean stop;
        volatile Throwable failure;
        final Thread thread;

        Member(String name, Properties props, String topic, Queue out) {
            this.name = name;
            this.props = props;
            this.topic = topic;
            this.out = out;
            this.thread = new Thread(this, "member-" + name);
            thread.start();
        }

        @Override
        public void run() {
            try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(props)) {
                consumer.subscribe(Collections.singletonList(topic), new ConsumerRebalanceListener() {
                    @Override
                    public void onPartitionsRevoked(Collection<TopicPartition> parts) { }

                    @Override
                    public void onPartitionsAssigned(Collection<TopicPartition> parts) {
                        assignedCalls.incrementAndGet();
                    }
                });
                while (!stop) {
                    boolean any = false;
                    for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
                        out.add("{\"member\":" + GreteJavaClient.quote(name) + ",\"partition\":" + r.partition()
                            + ",\"offset\":" + r.offset() + ",\"value\":" + GreteJavaClient.quote(r.value()) + "}");
                        any = true;
                    }
                    if (any) {
                        consumer.commitSync();  // so whoever takes a partition over starts after these
                    }
                    assignment = partitions(consumer.assignment());
                }
            } catch (Throwable t) {
                failure = t;
            }
        }

        void close() throws InterruptedException {
            stop = true;
            thread.join(30_000);
        }
    }

    /** Deliveries as JSON lines, filled by the member threads. */
    static final class Queue extends ConcurrentLinkedQueue<String> { }

    static List<Integer> partitions(Set<TopicPartition> parts) {
        List<Integer> ids = new ArrayList<>();
        for (TopicPartition tp : parts) {
            ids.add(tp.partition());
        }
        Collections.sort(ids);
        return ids;
    }

    private static Properties memberProps(String[] args, String group, int from) {
        Properties p = GreteJavaClient.consumerProps(args[1], group);
        GreteJavaClient.extraConfigs(p, args, from);
        return p;
    }

    static void group(String[] args) throws Exception {
        String topic = args[2];
        int members = Integer.parseInt(args[4]);
        int partitions = Integer.parseInt(args[5]);
        int count = Integer.parseInt(args[6]);
        Queue out = new Queue();
        List<Member> live = new ArrayList<>();
        for (int m = 0; m < members; m++) {
            live.add(new Member("m" + m, memberProps(args, args[3], 7), topic, out));
        }
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(GreteJavaClient.producerProps(args[1]))) {
            runPhase(1, live, partitions, producer, topic, 0, count, out);
            live.remove(0).close();
            System.out.println("{\"phase\":2,\"left\":\"m0\"}");
            runPhase(2, live, partitions, producer, topic, count, count, out);
        } finally {
            for (Member m : live) {
                m.close();
            }
        }
    }

    private static void runPhase(int phase, List<Member> live, int partitions, KafkaProducer<String, String> producer,
                                 String topic, int first, int count, Queue out) throws Exception {
        System.out.println("{\"phase\":" + phase + ",\"assignment\":" + assignmentJson(waitStable(live, partitions))
            + "}");
        List<Future<RecordMetadata>> sent = new ArrayList<>();
        for (int i = first; i < first + count; i++) {
            sent.add(producer.send(new ProducerRecord<>(topic, i % partitions, "k" + i, "v" + i + "-" + topic)));
        }
        for (Future<RecordMetadata> f : sent) {
            f.get();
        }
        long deadline = System.currentTimeMillis() + 30_000;
        int seen = 0;
        long quietUntil = Long.MAX_VALUE;  // after the last expected record, listen 1 s more for duplicates
        while (System.currentTimeMillis() < Math.min(deadline, quietUntil)) {
            String line = out.poll();
            if (line == null) {
                checkAlive(live);
                Thread.sleep(20);
                continue;
            }
            System.out.println("{\"phase\":" + phase + "," + line.substring(1));
            if (++seen == count) {
                quietUntil = System.currentTimeMillis() + 1_000;
            }
        }
        if (seen < count) {
            fail("phase " + phase + ": " + seen + " of " + count + " records delivered");
        }
    }

    /** Waits until the live members' assignments cover every partition once and stay so for STABLE_MS. */
    private static Map<String, List<Integer>> waitStable(List<Member> live, int partitions) throws Exception {
        long deadline = System.currentTimeMillis() + 45_000;
        Map<String, List<Integer>> last = null;
        long since = 0;
        while (System.currentTimeMillis() < deadline) {
            checkAlive(live);
            Map<String, List<Integer>> now = snapshot(live);
            if (!covers(now, partitions)) {
                last = null;
            } else if (!now.equals(last)) {
                last = now;
                since = System.currentTimeMillis();
            } else if (System.currentTimeMillis() - since >= STABLE_MS) {
                return now;
            }
            Thread.sleep(50);
        }
        fail("no stable assignment covering " + partitions + " partitions: " + snapshot(live));
        return null;
    }

    private static Map<String, List<Integer>> snapshot(List<Member> live) {
        Map<String, List<Integer>> now = new LinkedHashMap<>();
        for (Member m : live) {
            now.put(m.name, m.assignment);
        }
        return now;
    }

    private static boolean covers(Map<String, List<Integer>> assignment, int partitions) {
        Set<Integer> seen = new HashSet<>();
        int total = 0;
        for (List<Integer> parts : assignment.values()) {
            if (parts.isEmpty()) {
                return false;
            }
            seen.addAll(parts);
            total += parts.size();
        }
        return total == partitions && seen.size() == partitions;
    }

    static void staticRestart(String[] args) throws Exception {
        String topic = args[2];
        String group = args[3];
        int partitions = Integer.parseInt(args[4]);
        Queue out = new Queue();
        List<Member> live = new ArrayList<>();
        for (String name : new String[] {"a", "b"}) {
            live.add(new Member(name, staticProps(args, group, name), topic, out));
        }
        try {
            Map<String, List<Integer>> before = waitStable(live, partitions);
            System.out.println("{\"phase\":\"before\",\"assignment\":" + assignmentJson(before) + ",\"events\":"
                + eventsJson(live) + "}");
            live.remove(0).close();  // a static member's close() does not leave the group
            live.add(0, new Member("a", staticProps(args, group, "a"), topic, out));
            Map<String, List<Integer>> after = waitStable(live, partitions);
            System.out.println("{\"phase\":\"after\",\"assignment\":" + assignmentJson(after) + ",\"events\":"
                + eventsJson(live) + "}");
        } finally {
            for (Member m : live) {
                m.close();
            }
        }
    }

    private static Properties staticProps(String[] args, String group, String name) {
        Properties p = memberProps(args, group, 5);
        p.put(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, group + "-" + name);
        return p;
    }

    private static void checkAlive(List<Member> live) {
        for (Member m : live) {
            if (m.failure != null) {
                m.failure.printStackTrace();
                fail("member " + m.name + " failed: " + m.failure);
            }
        }
    }

    private static void fail(String why) {
        System.err.println(why);
        System.out.flush();
        System.exit(3);
    }

    private static String assignmentJson(Map<String, List<Integer>> assignment) {
        StringBuilder b = new StringBuilder("{");
        for (Map.Entry<String, List<Integer>> e : assignment.entrySet()) {
            b.append(b.length() > 1 ? "," : "").append(GreteJavaClient.quote(e.getKey())).append(':')
                .append(e.getValue().toString().replace(" ", ""));
        }
        return b.append('}').toString();
    }

    private static String eventsJson(List<Member> live) {
        StringBuilder b = new StringBuilder("{");
        for (Member m : live) {
            b.append(b.length() > 1 ? "," : "").append(GreteJavaClient.quote(m.name)).append(':')
                .append(m.assignedCalls.get());
        }
        return b.append('}').toString();
    }
}
