"""The metadata of a KRaft broker (``process.roles=broker``): the image a Raft observer builds from the
committed records of ``__cluster_metadata``, and changes made as requests to the active controller.

The image is applied as a controller applies it (``apply_batch``, by whoever runs the observer). A
broker writes nothing to the log itself: each change becomes the request a Kafka 4.3.1 broker sends
the controller (CreateTopics with an explicit assignment and the configs, DeleteTopics by topic id,
CreatePartitions, IncrementalAlterConfigs with SET/DELETE computed against the image,
AllocateProducerIds with this broker's id and epoch, AlterUserScramCredentials, CreateAcls/DeleteAcls,
AlterClientQuotas, a client's own request in an Envelope) over a ``ControllerChannel``.
The answer's errors are raised as the local stores raise them; then the call waits until the image
shows the change (a waiter checked after each applied batch), so a handler that reads back at once
sees it, as under ZooKeeper. A grete controller serves all of these, as Kafka 4.3.1's does.

A SCRAM credential is sent as AlterUserScramCredentials carries it: an upsertion with the salt and
the salted password (``ScramUpsertion``), from which the controller derives the keys it stores, as
Kafka's does; a credential given as stored keys alone is refused (UNSUPPORTED_VERSION), since no
controller request carries those.

Delegation tokens are not written through the store: the controller creates, renews and expires
them itself, from the client's own CreateDelegationToken, RenewDelegationToken and
ExpireDelegationToken, which the broker forwards in an Envelope with the caller's principal
(``forward``; grete/broker/quorum/forwarded_tokens.py). ``set_delegation_token`` and
``remove_delegation_token``, which carry neither the caller nor the HMAC, are refused before anything
is sent: DELEGATION_TOKEN_AUTH_DISABLED.

Changes are not published on ``changes`` here: the application of the image publishes every
change, whichever broker asked for it, once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

from grete.broker.quorum.controller_channel import ControllerChannel
from grete.broker.quorum.forwarding import envelope, unwrap
from grete.broker.security.scram_upsertion import ScramUpsertion
from grete.coordinator.kraft.quorum_store import QuorumMetadataStore
from grete.coordinator.kraft.store import (
    BROKER_RESOURCE,
    CLIENT_METRICS_RESOURCE,
    GROUP_RESOURCE,
    SCRAM_MECHANISM_TYPES,
    TOPIC_RESOURCE,
)
from grete.coordinator.metadata import (
    DelegationTokenInfo,
    NoSuchTopic,
    QuotaEntity,
    ScramCredential,
    TopicExists,
    TopicMeta,
)
from grete.protocol.acls import AclBinding
from grete.protocol.codec import Message
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.messages import (
    AllocateProducerIdsRequest,
    AllocateProducerIdsResponse,
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    CreateAclsRequest,
    CreateAclsResponse,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    EnvelopeResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)

# The versions a Kafka 4.3.1 broker sends (the newest its controller accepts, ak-4.3 specs).
CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS, INCREMENTAL_ALTER_CONFIGS = 7, 6, 3, 1
ALLOCATE_PRODUCER_IDS, ALTER_SCRAM, CREATE_ACLS, DELETE_ACLS, ALTER_CLIENT_QUOTAS = 0, 0, 3, 3, 1
ENVELOPE = 0
SET, DELETE = 0, 1  # IncrementalAlterConfigs' OpType
MISSING_TOPIC = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNKNOWN_TOPIC_ID)
R = TypeVar("R", bound=Message)


async def _no_append(_values: list[bytes]) -> int:
    raise KafkaError(ErrorCode.NOT_CONTROLLER, "a broker does not append to the metadata log")


def _error(code: int, message: str | None, topic: str | None = None) -> Exception | None:
    """The exception the local stores raise for an answer's error code (None for none)."""
    if code == ErrorCode.NONE:
        return None
    try:
        error = ErrorCode(code)
    except ValueError:
        error = ErrorCode.UNKNOWN_SERVER_ERROR
    if topic is not None and error == ErrorCode.TOPIC_ALREADY_EXISTS:
        return TopicExists(topic)
    if topic is not None and error in MISSING_TOPIC:
        return NoSuchTopic(topic)
    return KafkaError(error, message)


def _raise_first(results: list[tuple[int, str | None]], topic: str | None = None) -> None:
    for code, message in results:
        error = _error(code, message, topic)
        if error is not None:
            raise error


def _config_ops(before: dict[str, str], after: dict[str, str]) -> list[IncrementalAlterConfigsRequest.AlterableConfig]:
    """SET for each new or changed key, DELETE for each removed one: ``before`` becomes ``after``."""
    op = IncrementalAlterConfigsRequest.AlterableConfig
    return ([op(name=k, config_operation=DELETE, value=None) for k in sorted(before) if k not in after]
            + [op(name=k, config_operation=SET, value=v) for k, v in sorted(after.items()) if before.get(k) != v])


class BrokerMetadataStore(QuorumMetadataStore):
    forwards = True  # the active controller writes and logs the changes

    def __init__(self, cluster_id: str, channel: ControllerChannel, broker_epoch: Callable[[], int]) -> None:  # noqa: D107
        super().__init__(cluster_id, _no_append)
        self.channel = channel
        self.broker_epoch = broker_epoch  # this broker's registration epoch, for AllocateProducerIds
        self._waiters: list[tuple[Callable[[], bool], asyncio.Future[None]]] = []

    # --- the image --------------------------------------------------------------------------------
    def apply_records(self, records: list[tuple[Message, int]]) -> list[tuple[Message, int]]:
        applied = super().apply_records(records)
        if applied:
            for condition, future in list(self._waiters):
                if not future.done() and condition():
                    future.set_result(None)
        return applied

    async def until(self, condition: Callable[[], bool], what: str) -> None:
        """Until the image satisfies ``condition`` (the controller committed the change; the observer
        has still to fetch and apply it); REQUEST_TIMED_OUT after the channel's timeout."""
        if condition():
            return
        entry = (condition, asyncio.get_running_loop().create_future())
        self._waiters.append(entry)
        try:
            async with asyncio.timeout(self.channel.timeout_s):
                await entry[1]
        except TimeoutError:
            raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"the metadata image does not show {what} yet") from None
        finally:
            self._waiters.remove(entry)

    async def _ask(self, request: Message, version: int, answer: type[R]) -> R:
        response = await self.channel.call(request, version)
        assert isinstance(response, answer)
        return response

    # --- topics -----------------------------------------------------------------------------------
    async def create_topic(self, name: str, assignment: dict[int, list[int]], configs: dict[str, str],
                           internal: bool = False, elected: bool = True) -> TopicMeta:
        if name in self._topics:
            raise TopicExists(name)
        topic = CreateTopicsRequest.CreatableTopic(
            name=name, num_partitions=-1, replication_factor=-1,
            assignments=[CreateTopicsRequest.CreatableReplicaAssignment(partition_index=i, broker_ids=list(r))
                         for i, r in sorted(assignment.items())],
            configs=[CreateTopicsRequest.CreatableTopicConfig(name=k, value=v) for k, v in sorted(configs.items())])
        request = CreateTopicsRequest(topics=[topic], timeout_ms=self._timeout_ms())
        response = await self._ask(request, CREATE_TOPICS, CreateTopicsResponse)
        _raise_first([(r.error_code, r.error_message) for r in response.topics], name)
        topic_id = next(r.topic_id for r in response.topics if r.name == name)
        await self.until(lambda: (found := self._by_id.get(topic_id)) is not None
                          and len(found.partitions) >= len(assignment), f"topic {name} created")
        meta = self._by_id[topic_id]
        meta.internal = internal or meta.internal
        return meta

    async def delete_topic(self, name: str) -> TopicMeta:
        meta = self._existing(name)
        request = DeleteTopicsRequest(topics=[DeleteTopicsRequest.DeleteTopicState(name=None, topic_id=meta.topic_id)],
                                      timeout_ms=self._timeout_ms())
        response = await self._ask(request, DELETE_TOPICS, DeleteTopicsResponse)
        _raise_first([(r.error_code, r.error_message) for r in response.responses], name)
        await self.until(lambda: meta.topic_id not in self._by_id, f"topic {name} deleted")
        return meta

    async def add_partitions(self, name: str, assignment: dict[int, list[int]]) -> TopicMeta:
        """``assignment``: the new partitions only, numbered on from the existing ones."""
        meta = self._existing(name)
        count = len(meta.partitions) + len(assignment)
        request = CreatePartitionsRequest(topics=[CreatePartitionsRequest.CreatePartitionsTopic(
            name=name, count=count, assignments=[CreatePartitionsRequest.CreatePartitionsAssignment(broker_ids=list(r))
                                                 for _i, r in sorted(assignment.items())])],
            timeout_ms=self._timeout_ms())
        response = await self._ask(request, CREATE_PARTITIONS, CreatePartitionsResponse)
        _raise_first([(r.error_code, r.error_message) for r in response.results], name)
        await self.until(lambda: len(meta.partitions) >= count or meta.topic_id not in self._by_id,
                          f"{count} partitions of {name}")
        if meta.topic_id not in self._by_id:  # deleted meanwhile
            raise NoSuchTopic(name)
        return meta

    async def forward(self, request: Message, answer: type[R], version: int, client_id: str | None,
                      principal: str, token_authenticated: bool, client_host: str) -> R:
        """A client's request in an Envelope, carried out by the controller as the caller's own (Kafka's
        ForwardingManager); the controller's answer. The Envelope's error is raised."""
        wrapped = envelope(request, version, client_id, principal, token_authenticated, client_host)
        response = await self._ask(wrapped, ENVELOPE, EnvelopeResponse)
        _raise_first([(response.error_code, "the active controller did not carry out the forwarded request")])
        unwrapped = unwrap(response, type(request).API_KEY, version)
        assert isinstance(unwrapped, answer)
        return unwrapped

    def _timeout_ms(self) -> int:
        return int(self.channel.timeout_s * 1000)

    # --- configs: IncrementalAlterConfigs ---------------------------------------------------------
    async def set_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        self._existing(name)
        await self._set_configs(TOPIC_RESOURCE, name, configs, topic=name)

    async def set_broker_configs(self, scope: str, configs: dict[str, str]) -> None:
        await self._set_configs(BROKER_RESOURCE, scope, configs)

    async def set_group_configs(self, group_id: str, configs: dict[str, str]) -> None:
        await self._set_configs(GROUP_RESOURCE, group_id, configs)

    async def set_client_metrics(self, name: str, configs: dict[str, str]) -> None:
        await self._set_configs(CLIENT_METRICS_RESOURCE, name, configs)

    async def validate_configs(self, resource_type: int, name: str, configs: dict[str, str]) -> None:
        """Asked of the controller with validate_only, as Kafka's brokers forward a validating
        IncrementalAlterConfigs: its rules (eligible leader replicas' among them) are the ones that count."""
        await self._set_configs(resource_type, name, configs, topic=name if resource_type == TOPIC_RESOURCE else None,
                                validate_only=True)

    async def _set_configs(self, resource_type: int, name: str, configs: dict[str, str],
                           topic: str | None = None, *, validate_only: bool = False) -> None:
        """The resource's configs become ``configs``: SET and DELETE against the image."""
        ops = _config_ops(self._configs_by_resource.get((resource_type, name), {}), configs)
        if not ops:
            return
        request = IncrementalAlterConfigsRequest(validate_only=validate_only, resources=[
            IncrementalAlterConfigsRequest.AlterConfigsResource(resource_type=resource_type, resource_name=name,
                                                                configs=ops)])
        response = await self._ask(request, INCREMENTAL_ALTER_CONFIGS, IncrementalAlterConfigsResponse)
        _raise_first([(r.error_code, r.error_message) for r in response.responses], topic)
        if validate_only:
            return

        def shown() -> bool:
            current = self._configs_by_resource.get((resource_type, name), {})
            return all(current.get(op.name) == op.value for op in ops)
        await self.until(shown, f"the configs of {name or 'the cluster default'}")

    async def allocate_producer_ids(self, count: int) -> int:
        """The block the controller grants this broker (Kafka's: 1000 ids), which must hold ``count``."""
        request = AllocateProducerIdsRequest(broker_id=self.channel.node_id, broker_epoch=self.broker_epoch())
        response = await self._ask(request, ALLOCATE_PRODUCER_IDS, AllocateProducerIdsResponse)
        _raise_first([(response.error_code, None)])
        if response.producer_id_len < count:
            raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"the controller granted {response.producer_id_len} "
                             f"producer ids, not {count}")
        end = response.producer_id_start + response.producer_id_len
        await self.until(lambda: self._next_producer_id >= end, f"producer ids up to {end}")
        return response.producer_id_start

    # --- security ---------------------------------------------------------------------------------
    async def set_scram_credential(self, user: str, mechanism: str, credential: ScramCredential | None) -> None:
        """As AlterUserScramCredentials to the controller: an upsertion with the salted password it
        derives the keys from (Kafka's ScramControlManager), or a deletion; done once the image shows it."""
        if credential is None:
            await self._delete_scram_credential(user, mechanism)
            return
        if not isinstance(credential, ScramUpsertion):
            raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, "a KRaft broker sends the controller a SCRAM credential "
                             "as AlterUserScramCredentials carries it (the salted password), not as stored keys")
        request = AlterUserScramCredentialsRequest(upsertions=[
            AlterUserScramCredentialsRequest.ScramCredentialUpsertion(
                name=user, mechanism=SCRAM_MECHANISM_TYPES[mechanism], iterations=credential.iterations,
                salt=credential.salt, salted_password=credential.salted_password)])
        await self._alter_scram(request)
        stored = credential.stored()
        await self.until(lambda: self.scram_credential(user, mechanism) == stored, f"{mechanism} of {user} upserted")

    async def _delete_scram_credential(self, user: str, mechanism: str) -> None:
        if self.scram_credential(user, mechanism) is None:
            return
        await self._alter_scram(AlterUserScramCredentialsRequest(deletions=[
            AlterUserScramCredentialsRequest.ScramCredentialDeletion(name=user,
                                                                     mechanism=SCRAM_MECHANISM_TYPES[mechanism])]))
        await self.until(lambda: self.scram_credential(user, mechanism) is None, f"{mechanism} of {user} deleted")

    async def _alter_scram(self, request: AlterUserScramCredentialsRequest) -> None:
        response = await self._ask(request, ALTER_SCRAM, AlterUserScramCredentialsResponse)
        _raise_first([(r.error_code, r.error_message) for r in response.results])

    async def add_acls(self, acls: list[AclBinding]) -> None:
        new = [a for a in dict.fromkeys(acls) if a not in self._acls]
        if not new:
            return
        request = CreateAclsRequest(creations=[CreateAclsRequest.AclCreation(
            resource_type=int(a.resource_type), resource_name=a.resource_name,
            resource_pattern_type=int(a.pattern_type), principal=a.principal, host=a.host,
            operation=int(a.operation), permission_type=int(a.permission)) for a in new])
        response = await self._ask(request, CREATE_ACLS, CreateAclsResponse)
        _raise_first([(r.error_code, r.error_message) for r in response.results])
        await self.until(lambda: all(a in self._acls for a in new), "the new ACLs")

    async def remove_acls(self, acls: list[AclBinding]) -> None:
        """One exact filter per binding (its own pattern type matches only itself)."""
        old = [a for a in dict.fromkeys(acls) if a in self._acls]
        if not old:
            return
        request = DeleteAclsRequest(filters=[DeleteAclsRequest.DeleteAclsFilter(
            resource_type_filter=int(a.resource_type), resource_name_filter=a.resource_name,
            pattern_type_filter=int(a.pattern_type), principal_filter=a.principal, host_filter=a.host,
            operation=int(a.operation), permission_type=int(a.permission)) for a in old])
        response = await self._ask(request, DELETE_ACLS, DeleteAclsResponse)
        _raise_first([(r.error_code, r.error_message) for r in response.filter_results])
        await self.until(lambda: not any(a in self._acls for a in old), "the ACLs removed")

    async def alter_client_quotas(self, entity: QuotaEntity, changes: dict[str, float | None]) -> None:
        request = AlterClientQuotasRequest(entries=[AlterClientQuotasRequest.EntryData(
            entity=[AlterClientQuotasRequest.EntityData(entity_type=kind, entity_name=name) for kind, name in entity],
            ops=[AlterClientQuotasRequest.OpData(key=key, value=0.0 if value is None else value, remove=value is None)
                 for key, value in sorted(changes.items())])])
        response = await self._ask(request, ALTER_CLIENT_QUOTAS, AlterClientQuotasResponse)
        _raise_first([(r.error_code, r.error_message) for r in response.entries])
        await self.until(lambda: all(self._quotas.get(entity, {}).get(key) == value for key, value in changes.items()),
                          f"the quotas of {entity}")

    async def set_delegation_token(self, token: DelegationTokenInfo) -> None:
        raise KafkaError(ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED, "a KRaft broker does not write delegation "
                         "tokens: CreateDelegationToken is carried out by the controller")

    async def remove_delegation_token(self, token_id: str) -> None:
        raise KafkaError(ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED, "a KRaft broker does not write delegation "
                         "tokens: ExpireDelegationToken is carried out by the controller")

    # --- finalized features: UpdateFeatures -------------------------------------------------------
    async def set_finalized_features(self, levels: dict[str, int], static_min_isr: int = 1) -> int:
        """Never reached: a KRaft broker forwards UpdateFeatures whole to the active controller
        (handlers/update_features.py), whose checks answer it."""
        raise KafkaError(ErrorCode.NOT_CONTROLLER, "UpdateFeatures is carried out by the controller")
