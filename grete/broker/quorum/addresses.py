"""Where the replicas of the metadata quorum listen, as a Raft driver learns it.

A static quorum names its voters in ``controller.quorum.voters`` (``id@host:port``). A dynamic one
(KIP-853) names only ``controller.quorum.bootstrap.servers`` (``host:port``, no ids: Kafka gives them
the ids -2, -3, ... to address them) and keeps every voter's endpoints in its voter set; a replica
also learns the leader's address from the NodeEndpoints of the answers it gets, before its log holds
the voter set (a broker or a new controller that starts empty).
"""

from __future__ import annotations

import socket
from dataclasses import dataclass

from grete.broker.config import BrokerConfig
from grete.broker.network.listeners import parse_listeners
from grete.coordinator.kraft.voters import Endpoint, VoterSet

FIRST_BOOTSTRAP_ID = -2  # Kafka's: the bootstrap servers are -2, -3, ... in the order given


@dataclass(frozen=True, slots=True)
class VoterAddress:
    node_id: int
    host: str
    port: int


def _host_port(entry: str, key: str, form: str) -> tuple[str, int]:
    host, _, port = entry.strip().rpartition(":")
    try:
        return host.strip("[]"), int(port)
    except ValueError:
        raise ValueError(f"{key}: {entry!r} is not of the form {form}") from None


def parse_voters(entries: list[str]) -> dict[int, VoterAddress]:
    """``controller.quorum.voters``: ``id@host:port`` entries (Kafka's QuorumConfig.parseVoterConnections)."""
    voters: dict[int, VoterAddress] = {}
    for entry in entries:
        node, _, address = entry.strip().partition("@")
        host, port = _host_port(address, "controller.quorum.voters", "id@host:port")
        try:
            voter = VoterAddress(int(node), host, port)
        except ValueError:
            raise ValueError(f"controller.quorum.voters: {entry!r} is not of the form id@host:port") from None
        voters[voter.node_id] = voter
    return voters


def parse_bootstrap(entries: list[str]) -> dict[int, VoterAddress]:
    """``controller.quorum.bootstrap.servers``: ``host:port`` entries, by the ids Kafka gives them."""
    return {FIRST_BOOTSTRAP_ID - i: VoterAddress(FIRST_BOOTSTRAP_ID - i, *_host_port(e, "controller.quorum.bootstrap.servers", "host:port"))
            for i, e in enumerate(entries)}


class AddressBook:
    """Every replica's address on ``listener``: the voter set's endpoints first, then what answers
    named (a leader the log does not list yet), then the configured voters and bootstrap servers."""

    def __init__(self, listener: str, voters: dict[int, VoterAddress], bootstrap: dict[int, VoterAddress]) -> None:
        self.listener = listener
        self._configured = {**voters, **bootstrap}
        self._voter_set: dict[int, VoterAddress] = {}
        self._learned: dict[int, VoterAddress] = {}

    def voter_set(self, voters: VoterSet) -> None:
        self._voter_set = {}
        for node in voters.nodes.values():
            endpoint = node.address(self.listener)
            if endpoint is not None:
                self._voter_set[node.node_id] = VoterAddress(node.node_id, endpoint.host, endpoint.port)

    def learned(self, node_id: int, host: str, port: int) -> None:
        if node_id >= 0 and host:
            self._learned[node_id] = VoterAddress(node_id, host, port)

    def get(self, node_id: int) -> VoterAddress | None:
        return self._voter_set.get(node_id) or self._learned.get(node_id) or self._configured.get(node_id)


def quorum_addresses(voters: list[str], bootstrap: list[str]) -> tuple[dict[int, VoterAddress], dict[int, VoterAddress]]:
    """(static voters, bootstrap servers) of a node's configuration: one of the two is set (Kafka's
    QuorumConfig: controller.quorum.voters wins when both are); ValueError naming a bad entry."""
    if voters:
        return parse_voters(voters), {}
    if bootstrap:
        return {}, parse_bootstrap(bootstrap)
    raise ValueError("If using process.roles, either controller.quorum.bootstrap.servers must contain the set of "
                     "bootstrap controllers or controller.quorum.voters must contain a parseable set of controllers.")


def controller_endpoints(config: BrokerConfig) -> tuple[Endpoint, ...]:
    """This controller's endpoints as its voter set entry lists them: each controller listener's
    advertised address (``advertised.listeners``, else ``listeners``; an empty or wildcard host is
    this host's name, as Kafka's effectiveAdvertisedControllerListeners resolves it)."""
    names = [name.upper() for name in config.get_list("controller.listener.names")]
    advertised = {a.name: a for a in parse_listeners(config.get_list("advertised.listeners"))}
    bound = {a.name: a for a in parse_listeners(config.get_list("listeners"))}
    found = []
    for name in names:
        listener = advertised.get(name) or bound.get(name)
        if listener is not None:
            host = listener.host if listener.host not in ("", "0.0.0.0", "::") else socket.getfqdn()
            found.append(Endpoint(name, host, listener.port))
    return tuple(found)
