"""The handler manifest (read at start-up, so ApiVersions needs no imports) must say exactly what
the handler modules' own ``@api`` declarations say: nothing advertised that is not implemented."""

from __future__ import annotations

from grete.broker.handlers.manifest import HANDLERS
from grete.broker.requests.registry import advertised_versions, declared_handlers, render_manifest


def test_manifest_matches_the_handler_declarations():
    declared = declared_handlers()
    expected = render_manifest(declared)
    import grete.broker.handlers.manifest as manifest
    with open(manifest.__file__, encoding="utf-8") as f:
        assert f.read() == expected, "run: python -m grete.broker.requests.registry"
    assert {k: (v.min_version, v.max_version) for k, v in declared.items()} == \
        {k: (lo, hi) for k, (_, lo, hi, _) in HANDLERS.items()}


def test_advertisement_excludes_what_must_not_be_advertised():
    keys = {key for key, _, _ in advertised_versions()}
    # Telemetry, which Kafka 4.3.1 answers but does not advertise without a client-telemetry metrics
    # reporter (measured).
    assert keys.isdisjoint({71, 72})
    ranges = {key: (lo, hi) for key, lo, hi in advertised_versions()}
    # Share groups (KIP-932) at Kafka 4.3.1's versions, the share coordinator's APIs and FindCoordinator v6.
    assert [ranges[k] for k in (76, 77, 78, 79, 90, 91, 92)] == [(1, 1), (1, 1), (1, 2), (1, 2), (0, 1), (0, 0), (0, 0)]
    assert [ranges[k] for k in (10, 83, 84, 85, 86, 87)] == [(0, 6), (0, 0), (0, 0), (0, 1), (0, 0), (0, 1)]
    # Transactions at Kafka 4.3.1's versions: KIP-890 part 1 (TRANSACTION_ABORTABLE, AddPartitionsToTxn
    # v4 between brokers) and transaction version 2 (EndTxn 5, TxnOffsetCommit 5, AddPartitionsToTxn 5,
    # WriteTxnMarkers 2); InitProducerId v6 is two-phase commit (KIP-939): not offered.
    assert (ranges[22], ranges[24], ranges[25], ranges[26], ranges[27], ranges[28]) == (
        (0, 5), (0, 5), (0, 4), (0, 5), (1, 2), (0, 5))
    # Produce: min 0 for librdkafka's checks; v12+ adds the batch's partition to its transaction as
    # Kafka's ADD_PARTITION does (compat-tests/wire/test_data_path_versions.py).
    assert ranges[0] == (0, 13)
    assert ranges[1][0] == 4          # Fetch: no down-conversion versions
