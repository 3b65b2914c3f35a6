"""AlterUserScramCredentials (51): upsert and delete users' SCRAM credentials. The client sends the
salt and the salted password; the broker stores what Kafka stores (salt, StoredKey, ServerKey,
iterations), and a KRaft broker sends the salted password on to its controller (ScramUpsertion).
Needs ALTER on the cluster. Per-user errors as Kafka's ScramControlManager: DUPLICATE_RESOURCE (a
user twice in one request), UNACCEPTABLE_CREDENTIAL (empty name, iterations outside 4096..16384),
UNSUPPORTED_SASL_MECHANISM, RESOURCE_NOT_FOUND (deleting what is not there)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import Admin
from grete.broker.security.authz import Op, cluster_allowed
from grete.broker.security.sasl import SCRAM_MAX_ITERATIONS, SCRAM_MIN_ITERATIONS
from grete.broker.security.scram_upsertion import ScramUpsertion
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.messages import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    ApiKey,
)

MECHANISMS = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}

Response = AlterUserScramCredentialsResponse
Result = AlterUserScramCredentialsResponse.AlterUserScramCredentialsResult


@api(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, 0)
async def handle(ctx: RequestContext[Admin], request: AlterUserScramCredentialsRequest) -> Response:
    changes: list[Any] = [*request.deletions, *request.upsertions]
    if not cluster_allowed(ctx, Op.ALTER):
        users = list(dict.fromkeys(c.name for c in changes))
        return Response(results=[Result(user=u, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                        error_message="Cluster authorization failed.") for u in users])
    # One change per user per request, whatever the mechanisms (Apache Kafka 4.3.1 refuses
    # `kafka-configs --add-config 'SCRAM-SHA-256=[...],SCRAM-SHA-512=[...]'` so too); a ZooKeeper
    # cluster refuses only a user's mechanism named twice, as Kafka 3.9's ZkAdminManager.
    per_mechanism = ctx.broker.config.zookeeper_mode
    counts = Counter((c.name, c.mechanism if per_mechanism else 0) for c in changes)
    errors: dict[str, tuple[int, str]] = {}
    for (name, _), count in counts.items():
        if count > 1:
            errors[name] = (ErrorCode.DUPLICATE_RESOURCE,
                            "A user credential cannot be altered twice in the same request")
    store = ctx.broker.metadata
    for deletion in request.deletions:
        if deletion.name in errors:
            continue
        if not deletion.name:
            errors[deletion.name] = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
        elif deletion.mechanism not in MECHANISMS:
            errors[deletion.name] = (ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
        elif store.scram_credential(deletion.name, MECHANISMS[deletion.mechanism]) is None:
            errors[deletion.name] = (ErrorCode.RESOURCE_NOT_FOUND,
                                     "Attempt to delete a user credential that does not exist")
    for upsertion in request.upsertions:
        if upsertion.name in errors:
            continue
        if not upsertion.name:
            errors[upsertion.name] = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
        elif upsertion.mechanism not in MECHANISMS:
            errors[upsertion.name] = (ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
        elif upsertion.iterations < SCRAM_MIN_ITERATIONS:
            errors[upsertion.name] = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations")
        elif upsertion.iterations > SCRAM_MAX_ITERATIONS:
            errors[upsertion.name] = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations")
    results = []
    for name in dict.fromkeys(c.name for c in changes):
        if name in errors:
            code, message = errors[name]
            results.append(Result(user=name, error_code=code, error_message=message))
            continue
        try:
            for deletion in (d for d in request.deletions if d.name == name):
                await store.set_scram_credential(name, MECHANISMS[deletion.mechanism], None)
            for upsertion in (u for u in request.upsertions if u.name == name):
                mechanism = MECHANISMS[upsertion.mechanism]
                await store.set_scram_credential(name, mechanism, ScramUpsertion.derive(
                    mechanism, bytes(upsertion.salt), bytes(upsertion.salted_password), upsertion.iterations))
        except KafkaError as exc:
            results.append(Result(user=name, error_code=exc.code, error_message=str(exc)))
            continue
        results.append(Result(user=name, error_code=0, error_message=None))
    return Response(results=results)
