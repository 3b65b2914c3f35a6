import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;

/**
 * Transaction scenarios for GreteJavaClient (compat-tests/java/test_java_transactions.py):
 *
 *   txn-fence BOOTSTRAP TOPIC TXN_ID [configs...]       a second producer with the same transactional.id
 *                                                       fences the first -> {"zombie_error": class name}
 *   txn-ctp   BOOTSTRAP SRC DST GROUP TXN_ID N PLAN      consume N from SRC in GROUP, write "out-" values
 *                                                       to DST, sendOffsetsToTransaction(groupMetadata());
 *                                                       PLAN like "a,c" -> {"step","committed"} per step
 *   txn-lso   BOOTSTRAP TOPIC TXN_ID N                   end offsets per isolation level while a
 *                                                       transaction of N records is open, then after commit
 *   txn-read  BOOTSTRAP TOPIC ISOLATION SETTLE_MS        every record of partition 0 visible at ISOLATION,
 *                                                       read up to its end offset, then SETTLE_MS more
 *   txn-refused BOOTSTRAP COMPACTED TXN_ID               a transaction whose first record the broker refuses
 *                                                       (no key on a compacted topic) is aborted, the next
 *                                                       commits -> {"first_error","second":"committed"|class}
 */
final class TxnScenarios {
    private TxnScenarios() { }

    static KafkaProducer<String, String> transactional(String bootstrap, String txnId, String[] args, int from) {
        Properties p = GreteJavaClient.producerProps(bootstrap);
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txnId);
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "30000");
        GreteJavaClient.extraConfigs(p, args, from);
        KafkaProducer<String, String> producer = new KafkaProducer<>(p);
        producer.initTransactions();
        return producer;
    }

    static void fence(String[] args) throws Exception {
        String topic = args[2];
        KafkaProducer<String, String> zombie = transactional(args[1], args[3], args, 4);
        zombie.beginTransaction();
        zombie.send(new ProducerRecord<>(topic, 0, "z", "from-zombie")).get();
        try (KafkaProducer<String, String> fresh = transactional(args[1], args[3], args, 4)) {
            fresh.beginTransaction();
            fresh.send(new ProducerRecord<>(topic, 0, "f", "from-fresh")).get();
            fresh.commitTransaction();
        }
        String error = "none";
        try {
            zombie.send(new ProducerRecord<>(topic, 0, "z", "zombie-again"));
            zombie.commitTransaction();
        } catch (KafkaException e) {
            error = e.getClass().getSimpleName();
        } finally {
            zombie.close(Duration.ofSeconds(5));
        }
        System.out.println("{\"zombie_error\":" + GreteJavaClient.quote(error) + "}");
    }

    static void consumeTransformProduce(String[] args) {
        String src = args[2];
        String dst = args[3];
        String group = args[4];
        int n = Integer.parseInt(args[6]);
        try (KafkaProducer<String, String> producer = transactional(args[1], args[5], args, 8)) {
            for (String step : args[7].split(",")) {
                Properties cp = GreteJavaClient.consumerProps(args[1], group);
                cp.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
                try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(cp)) {
                    consumer.subscribe(Collections.singletonList(src));
                    List<ConsumerRecord<String, String>> batch = new ArrayList<>();
                    long deadline = System.currentTimeMillis() + 60_000;
                    while (batch.size() < n && System.currentTimeMillis() < deadline) {
                        for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
                            batch.add(r);
                        }
                    }
                    producer.beginTransaction();
                    Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                    for (ConsumerRecord<String, String> r : batch) {
                        producer.send(new ProducerRecord<>(dst, r.partition(), r.key(), "out-" + r.value()));
                        offsets.put(new TopicPartition(src, r.partition()), new OffsetAndMetadata(r.offset() + 1));
                    }
                    producer.sendOffsetsToTransaction(offsets, consumer.groupMetadata());
                    producer.flush();  // abortTransaction() would drop batches not sent yet
                    if (step.equals("c")) {
                        producer.commitTransaction();
                    } else {
                        producer.abortTransaction();
                    }
                    OffsetAndMetadata committed = consumer.committed(Collections.singleton(new TopicPartition(src, 0)))
                        .get(new TopicPartition(src, 0));
                    System.out.println("{\"step\":\"" + step + "\",\"read\":" + batch.size() + ",\"committed\":"
                        + (committed == null ? "null" : committed.offset()) + "}");
                }
            }
        }
    }

    static void refusedFirstRecord(String[] args) {
        String topic = args[2];
        try (KafkaProducer<String, String> producer = transactional(args[1], args[3], args, 4)) {
            producer.beginTransaction();
            String first = "none";
            try {
                producer.send(new ProducerRecord<>(topic, 0, null, "no-key")).get();
            } catch (Exception e) {
                first = (e.getCause() == null ? e : e.getCause()).getClass().getSimpleName();
            }
            producer.abortTransaction();
            String second = "committed";
            try {
                producer.beginTransaction();
                producer.send(new ProducerRecord<>(topic, 0, "k", "after")).get();
                producer.commitTransaction();
            } catch (Exception e) {
                second = (e.getCause() == null ? e : e.getCause()).getClass().getSimpleName();
            }
            System.out.println("{\"first_error\":" + GreteJavaClient.quote(first) + ",\"second\":"
                + GreteJavaClient.quote(second) + "}");
        }
    }

    static void lastStableOffset(String[] args) throws Exception {
        String topic = args[2];
        int n = Integer.parseInt(args[4]);
        TopicPartition tp = new TopicPartition(topic, 0);
        try (KafkaProducer<String, String> producer = transactional(args[1], args[3], args, 5)) {
            producer.beginTransaction();
            for (int i = 0; i < n; i++) {
                producer.send(new ProducerRecord<>(topic, 0, "k" + i, "t" + i));
            }
            producer.flush();
            System.out.println("{\"phase\":\"open\"," + endOffsets(args[1], tp) + "}");
            producer.commitTransaction();
            System.out.println("{\"phase\":\"committed\"," + endOffsets(args[1], tp) + "}");
        }
    }

    private static String endOffsets(String bootstrap, TopicPartition tp) {
        StringBuilder b = new StringBuilder();
        for (String level : new String[] {"read_uncommitted", "read_committed"}) {
            Properties cp = GreteJavaClient.consumerProps(bootstrap, null);
            cp.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, level);
            try (KafkaConsumer<String, String> c = new KafkaConsumer<>(cp)) {
                long end = c.endOffsets(Collections.singleton(tp), Duration.ofSeconds(20)).get(tp);
                b.append(b.length() > 0 ? "," : "").append('"').append(level).append("\":").append(end);
            }
        }
        return b.toString();
    }

    static void read(String[] args) {
        Properties cp = GreteJavaClient.consumerProps(args[1], null);
        cp.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, args[3]);
        long settle = Long.parseLong(args[4]);
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(cp)) {
            TopicPartition tp = new TopicPartition(args[2], 0);
            c.assign(Collections.singleton(tp));
            c.seekToBeginning(Collections.singleton(tp));
            // Read up to the end offset at this isolation level (the LSO for read_committed), then
            // keep polling for SETTLE_MS to show that nothing more arrives.
            long end = c.endOffsets(Collections.singleton(tp), Duration.ofSeconds(20)).get(tp);
            long deadline = System.currentTimeMillis() + 60_000;
            long quietUntil = Long.MAX_VALUE;
            while (System.currentTimeMillis() < Math.min(deadline, quietUntil)) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
                    System.out.println("{\"offset\":" + r.offset() + ",\"value\":" + GreteJavaClient.quote(r.value()) + "}");
                }
                if (quietUntil == Long.MAX_VALUE && c.position(tp) >= end) {
                    quietUntil = System.currentTimeMillis() + settle;
                }
            }
            System.out.println("{\"position\":" + c.position(tp) + ",\"end\":" + end + "}");
        }
    }
}
