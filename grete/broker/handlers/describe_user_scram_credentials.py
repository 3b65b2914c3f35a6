"""DescribeUserScramCredentials (50): the mechanisms and iteration counts of users' SCRAM credentials
(never the salt or keys). Needs DESCRIBE on the cluster. Errors as Kafka's: RESOURCE_NOT_FOUND for a
named user without credentials, DUPLICATE_RESOURCE for a user named twice."""

from __future__ import annotations

from collections import Counter

from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import Admin
from grete.broker.security.authz import Op, cluster_allowed
from grete.protocol.errors import ErrorCode
from grete.protocol.messages import (
    ApiKey,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
)

MECHANISM_CODES = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}

Response = DescribeUserScramCredentialsResponse


@api(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, 0)
def handle(ctx: RequestContext[Admin], request: DescribeUserScramCredentialsRequest) -> Response:
    if not cluster_allowed(ctx, Op.DESCRIBE):
        return Response(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                        error_message="Cluster authorization failed.", results=[])
    stored = ctx.broker.metadata.scram_credentials()
    response = Response(error_code=0, error_message=None, results=[])
    if not request.users:  # null or empty: every user with credentials
        names = sorted(stored)
        counts: Counter[str] = Counter()
    else:
        names = list(dict.fromkeys(u.name for u in request.users))
        counts = Counter(u.name for u in request.users)
    for name in names:
        if counts[name] > 1:
            response.results.append(Response.DescribeUserScramCredentialsResult(
                user=name, error_code=ErrorCode.DUPLICATE_RESOURCE,
                error_message=f"Cannot describe SCRAM credentials for the same user twice in a single "
                              f"request: {name}", credential_infos=[]))
            continue
        credentials = stored.get(name)
        if not credentials:
            response.results.append(Response.DescribeUserScramCredentialsResult(
                user=name, error_code=ErrorCode.RESOURCE_NOT_FOUND,
                error_message=f"Attempt to describe a user credential that does not exist: {name}",
                credential_infos=[]))
            continue
        response.results.append(Response.DescribeUserScramCredentialsResult(
            user=name, error_code=0, error_message=None, credential_infos=[
                Response.CredentialInfo(mechanism=MECHANISM_CODES[m], iterations=c.iterations)
                for m, c in sorted(credentials.items())]))
    return response
