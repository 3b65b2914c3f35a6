import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.Properties;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;

/**
 * Produce + consume round trips with several client configurations (SASL mechanisms, SASL_SSL) in one
 * JVM, so compat-tests/security starts Java once per module:
 *
 *   roundtrips BOOTSTRAP TOPIC key=value... [-- BOOTSTRAP TOPIC key=value...]...
 *
 * For each group: 3 records to partition 0 of TOPIC, then read back from offset 0 (assign, no group)
 * -> {"case":i,"offsets":[...],"values":[...]}, or {"case":i,"error":"..."} when the client fails.
 */
final class SaslRoundTrips {
    private SaslRoundTrips() {}

    static void run(String[] args) {
        List<String[]> cases = new ArrayList<>();
        int start = 1;
        for (int i = 1; i <= args.length; i++) {
            if (i == args.length || args[i].equals("--")) {
                cases.add(Arrays.copyOfRange(args, start, i));
                start = i + 1;
            }
        }
        for (int i = 0; i < cases.size(); i++) {
            try {
                one(i, cases.get(i));
            } catch (Exception e) {
                System.out.println("{\"case\":" + i + ",\"error\":" + GreteJavaClient.quote(String.valueOf(e)) + "}");
            }
            System.out.flush();
        }
    }

    private static void one(int index, String[] spec) throws Exception {
        String bootstrap = spec[0];
        String topic = spec[1];
        Properties producer = GreteJavaClient.producerProps(bootstrap);
        GreteJavaClient.extraConfigs(producer, spec, 2);
        producer.put("delivery.timeout.ms", "20000");
        producer.put("request.timeout.ms", "10000");
        List<Long> offsets = new ArrayList<>();
        try (KafkaProducer<String, String> p = new KafkaProducer<>(producer)) {
            for (int i = 0; i < 3; i++) {
                offsets.add(p.send(new ProducerRecord<>(topic, 0, "k", "java-" + index + "-" + i)).get().offset());
            }
        }
        Properties consumer = GreteJavaClient.consumerProps(bootstrap, null);
        GreteJavaClient.extraConfigs(consumer, spec, 2);
        List<String> values = new ArrayList<>();
        TopicPartition tp = new TopicPartition(topic, 0);
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(consumer)) {
            c.assign(Collections.singletonList(tp));
            c.seek(tp, offsets.get(0));
            long deadline = System.currentTimeMillis() + 20000;
            while (values.size() < 3 && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(500))) {
                    values.add(r.value());
                }
            }
        }
        StringBuilder out = new StringBuilder("{\"case\":" + index + ",\"offsets\":" + offsets + ",\"values\":[");
        for (int i = 0; i < values.size(); i++) {
            out.append(i == 0 ? "" : ",").append(GreteJavaClient.quote(values.get(i)));
        }
        System.out.println(out.append("]}"));
    }
}
