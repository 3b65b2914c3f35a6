import java.lang.reflect.Method;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashSet;
import java.util.List;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;

import org.apache.kafka.clients.consumer.ConsumerRecord;

/**
 * Share groups (KIP-932) with kafka-clients' KafkaShareConsumer (4.x), reached by reflection so the
 * harness still compiles against 3.9's jars, which have no share consumer.
 *
 * share BOOTSTRAP TOPIC GROUP COUNT [configs...]: two share consumers in one thread take turns polling the topic,
 * explicit acknowledgement: "v0" is released on its first delivery, "v1" rejected, the rest accepted.
 * Prints {"c","offset","value","delivery","ack"} per record until COUNT-1 distinct values are
 * accepted or 60 s pass. The records must already be in the topic (share.auto.offset.reset is set by
 * the caller).
 */
final class ShareScenarios {
    private ShareScenarios() { }

    static void share(String[] args) throws Exception {
        String bootstrap = args[1];
        String topic = args[2];
        String group = args[3];
        int count = Integer.parseInt(args[4]);
        Class<?> consumerClass = Class.forName("org.apache.kafka.clients.consumer.KafkaShareConsumer");
        Class<?> ackClass = Class.forName("org.apache.kafka.clients.consumer.AcknowledgeType");
        Method subscribe = consumerClass.getMethod("subscribe", Collection.class);
        Method poll = consumerClass.getMethod("poll", Duration.class);
        Method acknowledge = consumerClass.getMethod("acknowledge", ConsumerRecord.class, ackClass);
        Method commitSync = consumerClass.getMethod("commitSync");
        Method close = consumerClass.getMethod("close");
        List<Object> consumers = new ArrayList<>();
        for (int i = 0; i < 2; i++) {
            Properties p = new Properties();
            p.put("bootstrap.servers", bootstrap);
            p.put("group.id", group);
            p.put("client.id", "share-" + i);
            p.put("share.acknowledgement.mode", "explicit");
            p.put("key.deserializer", "org.apache.kafka.common.serialization.StringDeserializer");
            p.put("value.deserializer", "org.apache.kafka.common.serialization.StringDeserializer");
            GreteJavaClient.extraConfigs(p, args, 5);
            Object c = consumerClass.getConstructor(Properties.class).newInstance(p);
            subscribe.invoke(c, List.of(topic));
            consumers.add(c);
        }
        Set<String> accepted = new HashSet<>();
        long deadline = System.currentTimeMillis() + 60_000;
        try {
            while (accepted.size() < count - 1 && System.currentTimeMillis() < deadline) {
                for (int i = 0; i < consumers.size(); i++) {
                    Object c = consumers.get(i);
                    Iterable<?> records = (Iterable<?>) poll.invoke(c, Duration.ofMillis(500));
                    boolean any = false;
                    for (Object o : records) {
                        ConsumerRecord<?, ?> r = (ConsumerRecord<?, ?>) o;
                        Optional<?> delivery = (Optional<?>) r.getClass().getMethod("deliveryCount").invoke(r);
                        int d = delivery.isPresent() ? ((Number) delivery.get()).intValue() : -1;
                        String value = String.valueOf(r.value());
                        String ack = value.equals("v0") && d == 1 ? "RELEASE" : value.equals("v1") ? "REJECT" : "ACCEPT";
                        acknowledge.invoke(c, r, Enum.valueOf(ackClass.asSubclass(Enum.class), ack));
                        if (ack.equals("ACCEPT")) {
                            accepted.add(value);
                        }
                        System.out.println("{\"c\":" + i + ",\"offset\":" + r.offset() + ",\"value\":\"" + value
                            + "\",\"delivery\":" + d + ",\"ack\":\"" + ack + "\"}");
                        any = true;
                    }
                    if (any) {
                        commitSync.invoke(c);
                    }
                }
            }
        } finally {
            for (Object c : consumers) {
                close.invoke(c);
            }
        }
    }
}
