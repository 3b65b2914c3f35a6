"""Client quotas as Kafka enforces them: producer and consumer byte rates, the share of request
handling time (``request_percentage``) and partition mutations (``controller_mutation_rate``), for
(user, client-id) entities with Kafka's precedence of the eight user/client-id combinations.

Each quota group has a :class:`Rate` over ``quota.window.num`` samples of ``quota.window.size.seconds``
(Kafka's SampledStat and Rate, including how a young sensor's window is stretched to the full span).
When a recording takes the rate over the quota, the client is throttled for the time that brings
the windowed rate back to the quota assuming no further traffic, X = (O - T) / T * W (Kafka's
ClientQuotaManager.throttleTime). The broker answers at once with ``throttle_time_ms`` and then
reads nothing more from that connection for that long (KIP-219); the connection does the muting.

The quotas themselves live in the metadata store (``/config/users``, ``/config/clients`` under
ZooKeeper) and are followed through its change feed. With no quota of a kind configured, a request
costs one dictionary lookup here.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from time import monotonic
from typing import Any, Protocol

from grete.broker.config import BrokerConfig
from grete.coordinator.metadata import ChangeKind, MetadataChange, MetadataStore
from grete.protocol import messages  # not the class: the Fetch codec loads with the first Fetch
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.messages import ApiKey

PRODUCE_RATE = "producer_byte_rate"
FETCH_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
MUTATION_RATE = "controller_mutation_rate"

FINAL_OR_INITIAL_EPOCH = 0  # a fetch with session epoch <= 0 is a full fetch (KIP-227)
SENSOR_EXPIRY_MS = 3_600_000  # Kafka's InactiveSensorExpirationTimeSeconds


class QuotedRequest(Protocol):
    """What the quota step reads of a ``RequestContext`` (a protocol: the broker, which owns the
    quotas, is what the context points to)."""

    @property
    def api_key(self) -> int: ...
    @property
    def client_id(self) -> str | None: ...
    @property
    def size(self) -> int: ...
    @property
    def principal(self) -> str: ...


class Rate:
    """Kafka's Rate over a SampledStat: values summed per window of ``window_ms``, ``samples``
    windows kept, a window older than all of them reset on use; the rate is the sum divided by the
    elapsed span, which counts at least ``samples - 1`` whole windows (so a burst at start-up is
    measured over the full span rather than over its own few milliseconds)."""

    __slots__ = ("samples", "window_ms", "_starts", "_values", "_current", "last_used")

    def __init__(self, samples: int, window_ms: int, now_ms: float) -> None:
        self.samples = samples
        self.window_ms = window_ms
        self._starts = [now_ms]
        self._values = [0.0]
        self._current = 0
        self.last_used = now_ms

    def record(self, value: float, now_ms: float) -> None:
        self.last_used = now_ms
        if now_ms - self._starts[self._current] >= self.window_ms:
            self._current = (self._current + 1) % self.samples
            if self._current == len(self._starts):
                self._starts.append(now_ms)
                self._values.append(0.0)
            else:
                self._starts[self._current] = now_ms
                self._values[self._current] = 0.0
        self._values[self._current] += value

    def span_ms(self, now_ms: float) -> float:
        self._purge(now_ms)
        elapsed = now_ms - min(self._starts)
        whole = int(elapsed // self.window_ms)
        if whole < self.samples - 1:
            elapsed += (self.samples - 1 - whole) * self.window_ms
        return elapsed

    def per_second(self, now_ms: float) -> float:
        span = self.span_ms(now_ms)
        return sum(self._values) / (span / 1000.0)

    def _purge(self, now_ms: float) -> None:
        expire = self.samples * self.window_ms
        for i, start in enumerate(self._starts):
            if now_ms - start >= expire:
                self._starts[i] = now_ms
                self._values[i] = 0.0


class ThrottleAverage:
    """Kafka's throttle-time sensor (an Avg over the quota window): the mean of the throttle times
    given to one quota group in the last ``span_ms``."""

    __slots__ = ("span_ms", "_entries")

    def __init__(self, span_ms: int) -> None:
        self.span_ms = span_ms
        self._entries: deque[tuple[float, int]] = deque()

    def record(self, throttle_ms: int, now_ms: float) -> None:
        self._entries.append((now_ms, throttle_ms))
        self._purge(now_ms)

    def value(self, now_ms: float) -> float:
        self._purge(now_ms)
        return sum(ms for _, ms in self._entries) / len(self._entries) if self._entries else 0.0

    def _purge(self, now_ms: float) -> None:
        while self._entries and now_ms - self._entries[0][0] >= self.span_ms:
            self._entries.popleft()


class TokenBucket:
    """Kafka's TokenBucket (KIP-599) for partition mutations: full at ``samples * window`` seconds
    of the quota, refilled at the quota's rate, emptied by what is recorded; below zero is over."""

    __slots__ = ("burst_s", "tokens", "_last_ms", "last_used")

    def __init__(self, burst_s: float, limit: float, now_ms: float) -> None:
        self.burst_s = burst_s
        self.tokens = burst_s * limit
        self._last_ms = now_ms
        self.last_used = now_ms

    def value(self, limit: float, now_ms: float) -> float:
        self.tokens = min(self.burst_s * limit, self.tokens + limit * (now_ms - self._last_ms) / 1000.0)
        self._last_ms = now_ms
        return self.tokens

    def record(self, permits: float, limit: float, now_ms: float) -> None:
        self.last_used = now_ms
        self.tokens = min(self.burst_s * limit, self.value(limit, now_ms) - permits)


class MutationQuota:
    """One request's view of its client's ``controller_mutation_rate`` (Kafka's Strict- and
    PermissiveControllerMutationQuota). Strict (the versions whose clients know
    THROTTLING_QUOTA_EXCEEDED): nothing more is accepted once the bucket is empty, but a mutation
    that empties it is; permissive: everything is accepted and the client throttled afterwards."""

    def __init__(self, bucket: TokenBucket | None, limit: float, strict: bool) -> None:
        self._bucket = bucket
        self._limit = limit
        self._strict = strict
        self._throttle_ms = 0.0
        self._recorded_ms = 0.0

    def record(self, permits: int) -> None:
        bucket = self._bucket
        if bucket is None:
            return
        now_ms = monotonic() * 1000
        if self._strict:
            tokens = bucket.value(self._limit, now_ms)
            if tokens < 0:
                self._throttled(tokens, now_ms)
                raise KafkaError(ErrorCode.THROTTLING_QUOTA_EXCEEDED)  # no message, as Kafka 4.3 answers
        bucket.record(permits, self._limit, now_ms)
        if not self._strict and bucket.tokens < 0:
            self._throttled(bucket.tokens, now_ms)

    def _throttled(self, tokens: float, now_ms: float) -> None:
        self._throttle_ms = round(-tokens / self._limit * 1000)
        self._recorded_ms = now_ms

    def throttle_ms(self) -> int:
        """What is left of the throttle time (a request may have waited since it was computed)."""
        if not self._throttle_ms:
            return 0
        return max(0, int(self._throttle_ms - (monotonic() * 1000 - self._recorded_ms)))


# An entity's user or client-id part: a name, None for <default>, False when the entity names none.
Part = str | None | bool


@dataclass(frozen=True, slots=True)
class Match:
    """The quota that applies to a (user, client-id) and the sensor it is measured on: Kafka's
    metric tags, where a default quota still gives each user or client its own sensor."""

    limit: float
    user_tag: str
    client_tag: str


def _candidates(user: str, client: str) -> tuple[tuple[Part, Part, str, str], ...]:
    """Kafka's precedence (DefaultQuotaCallback): the most specific configured entity wins."""
    return ((user, client, user, client), (user, None, user, client), (user, False, user, ""),
            (None, client, user, client), (None, None, user, client), (None, False, user, ""),
            (False, client, "", client), (False, None, "", client))


class ClientQuotas:
    def __init__(self, config: BrokerConfig, metadata: MetadataStore) -> None:
        self._samples = config.get_int("quota.window.num")
        self._window_ms = config.get_int("quota.window.size.seconds") * 1000
        self._mutation_samples = config.get_int("controller.quota.window.num")
        self._mutation_window_ms = config.get_int("controller.quota.window.size.seconds") * 1000
        self._metadata = metadata
        self._limits: dict[str, dict[tuple[Part, Part], float]] = {}
        self._matches: dict[tuple[str, str, str], Match | None] = {}
        self._sensors: dict[tuple[str, str, str], Rate] = {}
        self._buckets: dict[tuple[str, str], TokenBucket] = {}
        self._throttles: dict[tuple[str, str, str], ThrottleAverage] = {}
        self._last_sweep = 0.0
        self.active = False  # any produce, fetch or request quota configured
        metadata.changes.subscribe(self._changed)
        self._reload()

    # --- configuration -----------------------------------------------------------------------
    def _changed(self, change: MetadataChange) -> None:
        if change.kind is ChangeKind.CLIENT_QUOTAS_CHANGED:
            self._reload()

    def _reload(self) -> None:
        limits: dict[str, dict[tuple[Part, Part], float]] = {}
        for entity, values in self._metadata.client_quotas().items():
            named: dict[str, str | None] = dict(entity)
            if "ip" in named:
                continue  # connection_creation_rate: connection_quotas' business
            key = (named.get("user", False), named.get("client-id", False))
            for name, value in values.items():
                limits.setdefault(name, {})[key] = value
        self._limits = limits
        self._matches.clear()
        self.active = any(k in limits for k in (PRODUCE_RATE, FETCH_RATE, REQUEST_PERCENTAGE))

    def match(self, kind: str, user: str, client: str) -> Match | None:
        memo = (kind, user, client)
        if memo in self._matches:
            return self._matches[memo]
        table = self._limits.get(kind, {})
        found = None
        for u, c, user_tag, client_tag in _candidates(user, client):
            limit = table.get((u, c))
            if limit is not None:
                found = Match(limit, user_tag, client_tag)
                break
        self._matches[memo] = found
        return found

    def limit(self, kind: str, user: str, client: str) -> float | None:
        found = self.match(kind, user, client)
        return None if found is None else found.limit

    # --- measuring -----------------------------------------------------------------------------
    def record(self, kind: str, user: str, client: str, value: float, now_ms: float | None = None) -> int:
        """Record ``value`` against the client's quota of ``kind``; the throttle time in ms (0 when
        the rate stays within the quota or no quota applies)."""
        found = self.match(kind, user, client)
        if found is None:
            return 0
        now_ms = monotonic() * 1000 if now_ms is None else now_ms
        rate = self._sensor(kind, found, now_ms)
        rate.record(value, now_ms)
        observed = rate.per_second(now_ms)
        if observed <= found.limit:
            return 0
        throttle = round((observed - found.limit) / found.limit * rate.span_ms(now_ms))
        if kind == REQUEST_PERCENTAGE:
            throttle = min(throttle, self._window_ms)  # Kafka caps the request-time throttle at one window
        average = self._throttles.get((kind, found.user_tag, found.client_tag))
        if average is None:
            average = self._throttles[(kind, found.user_tag, found.client_tag)] = ThrottleAverage(
                self._samples * self._window_ms)
        average.record(throttle, now_ms)
        return throttle

    def unrecord(self, kind: str, user: str, client: str, value: float, now_ms: float) -> None:
        """Take back a recording (a throttled fetch answers without its data)."""
        found = self.match(kind, user, client)
        if found is not None:
            self._sensor(kind, found, now_ms).record(-value, now_ms)

    def exceeded(self, kind: str, user: str, client: str, now_ms: float) -> int:
        """The throttle time a client already over its quota must wait (0 if it is not over)."""
        found = self.match(kind, user, client)
        if found is None:
            return 0
        rate = self._sensor(kind, found, now_ms)
        observed = rate.per_second(now_ms)
        if observed <= found.limit:
            return 0
        return round((observed - found.limit) / found.limit * rate.span_ms(now_ms))

    def _sensor(self, kind: str, found: Match, now_ms: float) -> Rate:
        key = (kind, found.user_tag, found.client_tag)
        rate = self._sensors.get(key)
        if rate is None:
            self._sweep(now_ms)
            mutation = kind == MUTATION_RATE
            rate = Rate(self._mutation_samples if mutation else self._samples,
                        self._mutation_window_ms if mutation else self._window_ms, now_ms)
            self._sensors[key] = rate
        return rate

    def _sweep(self, now_ms: float) -> None:
        """Drop sensors unused for an hour (Kafka expires inactive sensors likewise), at most once a minute."""
        if now_ms - self._last_sweep < 60_000:
            return
        self._last_sweep = now_ms
        for key in [k for k, r in self._sensors.items() if now_ms - r.last_used > SENSOR_EXPIRY_MS]:
            del self._sensors[key]
            self._throttles.pop(key, None)
        for pair in [k for k, b in self._buckets.items() if now_ms - b.last_used > SENSOR_EXPIRY_MS]:
            del self._buckets[pair]

    def mutations(self, ctx: QuotedRequest, strict: bool) -> MutationQuota:
        """The request's partition-mutation quota (CreateTopics, CreatePartitions, DeleteTopics)."""
        user, client = user_of(ctx.principal), ctx.client_id or ""
        found = self.match(MUTATION_RATE, user, client)
        if found is None:
            return MutationQuota(None, 0.0, strict)
        now_ms = monotonic() * 1000
        key = (found.user_tag, found.client_tag)
        bucket = self._buckets.get(key)
        if bucket is None:
            self._sweep(now_ms)
            bucket = TokenBucket(self._mutation_samples * self._mutation_window_ms / 1000, found.limit, now_ms)
            self._buckets[key] = bucket
        return MutationQuota(bucket, found.limit, strict)

    def observed(self) -> list[tuple[str, str, str, float, float]]:
        """(quota key, user tag, client-id tag, rate now, mean throttle ms) per measured quota group,
        for the metrics endpoint (Kafka's byte-rate / request-time and throttle-time sensors)."""
        now_ms = monotonic() * 1000
        out = []
        for (kind, user, client), rate in sorted(self._sensors.items()):
            average = self._throttles.get((kind, user, client))
            out.append((kind, user, client, rate.per_second(now_ms), average.value(now_ms) if average else 0.0))
        return out

    # --- the pipeline's step -------------------------------------------------------------------
    def throttle(self, ctx: QuotedRequest, request: Any, response: Any,
                 handler_s: float) -> tuple[int, Any]:
        """Record the request against its client's quotas: (throttle ms, the response to send),
        the response replaced by an empty one for a throttled consumer Fetch, as Kafka answers."""
        user = user_of(ctx.principal)
        client = ctx.client_id or ""
        now_ms = monotonic() * 1000
        request_ms = 0
        if REQUEST_PERCENTAGE in self._limits:
            # Kafka caps the request-time throttle at one window.
            request_ms = self.record(REQUEST_PERCENTAGE, user, client, handler_s * 100.0, now_ms)
        api = ctx.api_key
        if api == ApiKey.PRODUCE:
            produced = self.record(PRODUCE_RATE, user, client, ctx.size, now_ms) if PRODUCE_RATE in self._limits else 0
            return max(produced, request_ms), response
        if api == ApiKey.FETCH and response is not None and not _from_follower(request):
            size = fetched_bytes(response) if FETCH_RATE in self._limits else 0
            fetched = self.record(FETCH_RATE, user, client, size, now_ms) if FETCH_RATE in self._limits else 0
            throttle = max(fetched, request_ms)
            if throttle:
                if FETCH_RATE in self._limits:
                    self.unrecord(FETCH_RATE, user, client, size, now_ms)
                return throttle, throttled_fetch(request, response, throttle)
            return 0, response
        if api == ApiKey.SHARE_FETCH and response is not None and FETCH_RATE in self._limits:
            # The consumer byte rate covers share consumers too, as in Kafka. Kafka answers a throttled
            # ShareFetch empty, leaving what it acquired locked until the lock times out and then
            # delivered again; grete sends those records and throttles the next request instead (the
            # bytes stay counted, so the rate holds over the window).
            return max(self.record(FETCH_RATE, user, client, fetched_bytes(response), now_ms), request_ms), response
        return request_ms, response


def throttle_for_mutations(ctx: Any, response: Any, quota: MutationQuota) -> None:
    """Put a mutation quota's throttle on the answer and on the connection (the request quota's,
    added by the pipeline afterwards, may still be larger)."""
    throttle = quota.throttle_ms()
    if throttle:
        response.throttle_time_ms = max(response.throttle_time_ms or 0, throttle)
        ctx.throttle_ms = max(ctx.throttle_ms, throttle)


def user_of(principal: str) -> str:
    """The user a quota names: the principal's name without its type (``User:alice`` -> ``alice``)."""
    return principal.partition(":")[2] or principal


def _from_follower(request: Any) -> bool:
    state = getattr(request, "replica_state", None)
    replica = state.replica_id if state is not None and state.replica_id >= 0 else getattr(request, "replica_id", -1)
    return bool(replica is not None and replica >= 0)


def fetched_bytes(response: Any) -> int:
    total = 0
    for topic in response.responses:
        for partition in topic.partitions:
            records = partition.records
            if records:
                total += records.size if hasattr(records, "size") else len(records)
    return total


def throttled_fetch(request: Any, response: Any, throttle: int) -> messages.FetchResponse:
    """Kafka's getThrottledResponse: no data; a full fetch's new session is not handed out."""
    session = response.session_id if request.session_epoch > FINAL_OR_INITIAL_EPOCH else 0
    return messages.FetchResponse(throttle_time_ms=throttle, error_code=0, session_id=session, responses=[])
