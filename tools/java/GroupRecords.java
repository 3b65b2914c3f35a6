import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.lang.reflect.Method;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.HexFormat;

/**
 * decode-group-records (no bootstrap needed; pass "-"): reads "KEYHEX VALUEHEX" lines ("-" for a null
 * value) from stdin and decodes each with Kafka's own __consumer_offsets deserializer
 * (GroupCoordinatorRecordSerde, Kafka 4), printing {"key": ..., "value": ...} with their toString().
 * Reflection keeps the harness compiling against kafka-clients 3.9, whose coordinator classes differ.
 */
final class GroupRecords {
    private GroupRecords() { }

    static void decode(String[] args) throws Exception {
        Class<?> serdeClass = Class.forName("org.apache.kafka.coordinator.group.GroupCoordinatorRecordSerde");
        Object serde = serdeClass.getConstructor().newInstance();
        Method deserialize = serdeClass.getMethod("deserialize", ByteBuffer.class, ByteBuffer.class);
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        for (String line = in.readLine(); line != null; line = in.readLine()) {
            String[] kv = line.trim().split(" ");
            ByteBuffer key = ByteBuffer.wrap(HexFormat.of().parseHex(kv[0]));
            ByteBuffer value = kv[1].equals("-") ? null : ByteBuffer.wrap(HexFormat.of().parseHex(kv[1]));
            Object record = deserialize.invoke(serde, key, value);
            Object k = record.getClass().getMethod("key").invoke(record);
            Object v = record.getClass().getMethod("value").invoke(record);
            Object message = v == null ? null : v.getClass().getMethod("message").invoke(v);
            System.out.println("{\"key\":" + GreteJavaClient.quote(String.valueOf(k)) + ",\"value\":"
                + (message == null ? "null" : GreteJavaClient.quote(String.valueOf(message))) + "}");
        }
    }
}
