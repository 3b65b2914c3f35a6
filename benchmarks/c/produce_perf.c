/* A producer that costs the client as little as librdkafka allows, so a benchmark measures the
 * brokers: COUNT records of SIZE bytes from one static buffer (no copy, no per-record allocation),
 * spread over the topic's partitions by librdkafka's random partitioner, then a flush. Prints the
 * records acknowledged and failed; exits 1 on any failure.
 *
 *   produce_perf BOOTSTRAP TOPIC COUNT SIZE [key=value ...]   (extra librdkafka settings)
 *
 * Built by benchmarks/bench_host_brokers.py with gcc against Debian's librdkafka-dev. */
#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long acked, failed;

static void delivered(rd_kafka_t *rk, const rd_kafka_message_t *msg, void *opaque) {
    (void)rk;
    (void)opaque;
    if (msg->err)
        failed++;
    else
        acked++;
}

static int set(rd_kafka_conf_t *conf, const char *key, const char *value) {
    char err[512];
    if (rd_kafka_conf_set(conf, key, value, err, sizeof err) != RD_KAFKA_CONF_OK) {
        fprintf(stderr, "%s=%s: %s\n", key, value, err);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: %s BOOTSTRAP TOPIC COUNT SIZE [key=value ...]\n", argv[0]);
        return 2;
    }
    long count = atol(argv[3]);
    size_t size = (size_t)atol(argv[4]);
    char *payload = malloc(size);
    memset(payload, 'x', size);
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    if (set(conf, "bootstrap.servers", argv[1]) || set(conf, "partitioner", "random"))
        return 2;
    for (int i = 5; i < argc; i++) {
        char *eq = strchr(argv[i], '=');
        if (!eq) {
            fprintf(stderr, "not key=value: %s\n", argv[i]);
            return 2;
        }
        *eq = '\0';
        if (set(conf, argv[i], eq + 1))
            return 2;
    }
    rd_kafka_conf_set_dr_msg_cb(conf, delivered);
    char err[512];
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
    if (!rk) {
        fprintf(stderr, "%s\n", err);
        return 2;
    }
    rd_kafka_topic_t *topic = rd_kafka_topic_new(rk, argv[2], NULL);
    for (long n = 0; n < count;) {
        if (rd_kafka_produce(topic, RD_KAFKA_PARTITION_UA, 0, payload, size, NULL, 0, NULL) == 0) {
            n++;
            continue;
        }
        if (rd_kafka_last_error() != RD_KAFKA_RESP_ERR__QUEUE_FULL) {
            fprintf(stderr, "produce: %s\n", rd_kafka_err2str(rd_kafka_last_error()));
            return 1;
        }
        rd_kafka_poll(rk, 10); /* the queue is full: serve delivery reports until there is room */
    }
    rd_kafka_flush(rk, 120 * 1000);
    printf("%ld acked %ld failed\n", acked, failed);
    rd_kafka_topic_destroy(topic);
    rd_kafka_destroy(rk);
    free(payload);
    return failed || acked != count ? 1 : 0;
}
