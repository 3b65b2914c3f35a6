"""The broker's own counters: plain integers and fixed bucket arrays, updated on the hot path.

Nothing here allocates per request or takes a lock: a produce adds to two ints of its topic's
:class:`TopicCounters`, a request adds one to its API's count and one bucket of each phase's
:class:`Histogram`. Turning them into Prometheus series, with Kafka's names, happens only when
someone scrapes (``grete.broker.metrics.metrics_http``).

Phases follow Kafka's RequestMetrics split, as grete has them: a request is dispatched in the
loop step that read it, so there is no request queue (``RequestQueueTimeMs`` is 0); ``LocalTimeMs``
is the handler's own run, ``RemoteTimeMs`` the wait of a parked request (a long-poll Fetch, a
JoinGroup), ``ResponseSendTimeMs`` from the answer being ready to its bytes being handed to the
socket, behind earlier answers of the same connection included. Empty Fetches answered from a
connection's memo are counted as requests but not timed (they never reach a handler).
"""

from __future__ import annotations

from bisect import bisect_left

from grete.protocol.messages import APIS

# Upper bounds in ms; the last bucket is everything above.
LATENCY_BUCKETS_MS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0,
                      1000.0, 2500.0, 5000.0, 10000.0, 30000.0)
PHASES = ("totaltimems", "requestqueuetimems", "localtimems", "remotetimems", "responsequeuetimems",
          "responsesendtimems", "throttletimems")


# Kafka's RequestMetrics names a Fetch by who sent it, FetchConsumer or FetchFollower, besides
# Fetch. A request is counted under one of these two pseudo keys only; "Fetch" is their sum, made
# when scraped, so a fetch pays for one histogram, not two.
FETCH_CONSUMER, FETCH_FOLLOWER = -1, -2


class Histogram:
    """Counts per fixed bucket, the sum and the count; quantiles estimated from the buckets."""

    __slots__ = ("counts", "count", "sum")

    def __init__(self) -> None:
        self.counts = [0] * (len(LATENCY_BUCKETS_MS) + 1)
        self.count = 0
        self.sum = 0.0

    def observe(self, value_ms: float) -> None:
        self.counts[bisect_left(LATENCY_BUCKETS_MS, value_ms)] += 1
        self.count += 1
        self.sum += value_ms

    def merged(self, other: Histogram) -> Histogram:
        both = Histogram()
        both.counts = [a + b for a, b in zip(self.counts, other.counts, strict=True)]
        both.count, both.sum = self.count + other.count, self.sum + other.sum
        return both

    def quantile(self, q: float) -> float:
        """The upper bound of the bucket holding the q-th observation (0 with none)."""
        if not self.count:
            return 0.0
        rank = q * self.count
        seen = 0
        for index, n in enumerate(self.counts):
            seen += n
            if seen >= rank and n:
                return LATENCY_BUCKETS_MS[index] if index < len(LATENCY_BUCKETS_MS) else LATENCY_BUCKETS_MS[-1]
        return LATENCY_BUCKETS_MS[-1]


class TopicCounters:
    """Kafka's BrokerTopicMetrics for one topic (or, as ``BrokerMetrics.totals``, for all)."""

    __slots__ = ("messages_in", "bytes_in", "bytes_out", "bytes_rejected", "total_produce", "total_fetch",
                 "failed_produce", "failed_fetch")

    def __init__(self) -> None:
        self.messages_in = 0
        self.bytes_in = 0
        self.bytes_out = 0
        self.bytes_rejected = 0
        self.total_produce = 0
        self.total_fetch = 0
        self.failed_produce = 0
        self.failed_fetch = 0


class ApiCounters:
    """Kafka's RequestMetrics for one API: requests per version, errors per code, phase timings."""

    __slots__ = ("requests", "errors", "phases")

    def __init__(self) -> None:
        self.requests: dict[int, int] = {}
        self.errors: dict[int, int] = {}
        self.phases = {phase: Histogram() for phase in PHASES}

    def merged(self, other: ApiCounters) -> ApiCounters:
        both = ApiCounters()
        for mine, theirs, into in ((self.requests, other.requests, both.requests),
                                   (self.errors, other.errors, both.errors)):
            for key in mine.keys() | theirs.keys():
                into[key] = mine.get(key, 0) + theirs.get(key, 0)
        both.phases = {phase: self.phases[phase].merged(other.phases[phase]) for phase in PHASES}
        return both


class BrokerMetrics:
    def __init__(self) -> None:
        self.topics: dict[str, TopicCounters] = {}
        self.totals = TopicCounters()
        self.apis: dict[int, ApiCounters] = {}
        self.isr_shrinks = 0
        self.isr_expands = 0
        # Replication: bytes of records followers fetched (Kafka's FetcherStats BytesPerSec), and
        # the direct path's pushes (grete/broker/direct/replication.py) sent and received.
        self.replica_fetch_bytes = 0
        self.replica_pushes = 0
        self.replica_push_bytes = 0
        self.replica_pushes_received = 0
        self.replica_push_bytes_received = 0
        self.replica_push_fallbacks = 0
        # KIP-890's AddPartitionsToTxnManager: how long a transactional produce (or TxnOffsetCommit)
        # waited for its coordinator's verification, and the verifications that failed.
        self.txn_verification_time = Histogram()
        self.txn_verification_failures = 0

    def isr_changed(self, before: int, after: int) -> None:
        if after < before:
            self.isr_shrinks += 1
        else:
            self.isr_expands += 1

    def topic(self, name: str) -> TopicCounters:
        counters = self.topics.get(name)
        if counters is None:
            counters = self.topics[name] = TopicCounters()
        return counters

    def forget_topic(self, name: str) -> None:
        """A deleted topic's series go away, as Kafka removes its BrokerTopicMetrics."""
        self.topics.pop(name, None)

    def api(self, api_key: int) -> ApiCounters:
        counters = self.apis.get(api_key)
        if counters is None:
            counters = self.apis[api_key] = ApiCounters()
        return counters

    def by_name(self) -> dict[str, ApiCounters]:
        """Counters under Kafka's request names: per API, and Fetch also as FetchConsumer and
        FetchFollower (Fetch itself: their sum with the errors counted per partition)."""
        named = {APIS[k].name if k in APIS else str(k): c for k, c in self.apis.items() if k >= 0}
        consumer, follower = self.apis.get(FETCH_CONSUMER), self.apis.get(FETCH_FOLLOWER)
        if consumer is not None:
            named["FetchConsumer"] = consumer
        if follower is not None:
            named["FetchFollower"] = follower
        if consumer is not None or follower is not None:
            fetch = (consumer or ApiCounters()).merged(follower or ApiCounters())
            errors = named.get("Fetch")
            if errors is not None:
                fetch.errors = dict(errors.errors)
            named["Fetch"] = fetch
        return named

    def request(self, api_key: int, version: int) -> ApiCounters:
        counters = self.api(api_key)
        counters.requests[version] = counters.requests.get(version, 0) + 1
        return counters

    def produced(self, topic: str, records: int, nbytes: int) -> None:
        for counters in (self.topic(topic), self.totals):
            counters.messages_in += records
            counters.bytes_in += nbytes
            counters.total_produce += 1

    def produce_failed(self, topic: str, nbytes: int) -> None:
        for counters in (self.topic(topic), self.totals):
            counters.total_produce += 1
            counters.failed_produce += 1
            counters.bytes_rejected += nbytes

    def fetched(self, topic: str, nbytes: int, failed: bool) -> None:
        for counters in (self.topic(topic), self.totals):
            counters.total_fetch += 1
            counters.bytes_out += nbytes
            if failed:
                counters.failed_fetch += 1
