"""A combined node (``process.roles=broker,controller``) in a quorum of several voters, as Kafka 4 runs
one: a controller and a broker in one process.

The controller is the one a controller-only node runs (grete/broker/quorum/controller_node.py), on the
listeners ``controller.listener.names`` names; the broker is a KRaft broker
(grete/broker/quorum/kraft_broker.py) on the other listeners. They share the node's Raft voter, as
Kafka's BrokerServer and ControllerServer share one RaftManager: the broker's metadata image is fed
the batches this voter commits, so it fetches nothing of ``__cluster_metadata`` over the network and
never shows the quorum's leader a second replica with this node's id. Everything else between them
goes over the wire as between separate nodes (registration, heartbeats, AlterPartition, forwarded
admin requests to whichever voter leads), so a combined node behaves as a controller and a broker
side by side. The node of one (the embedded default) is not this: its quorum is itself alone.
"""

from __future__ import annotations

from grete.broker.broker import Broker
from grete.broker.config import BrokerConfig, ConfigError
from grete.broker.network.listeners import parse_listeners
from grete.broker.quorum.controller_node import controller_broker
from grete.broker.quorum.kraft_broker import KRaftBroker


def _listener_names(config: BrokerConfig, key: str) -> list[str]:
    return [listener.name for listener in parse_listeners(config.get_list(key))]


def _restricted(config: BrokerConfig, controller: bool) -> BrokerConfig:
    """The node's configuration with only the controller's listeners (``controller``) or only the
    broker's; every other key as given."""
    names = {name.upper() for name in config.get_list("controller.listener.names")}
    props = dict(config.originals)
    for key in ("listeners", "advertised.listeners"):
        if key in props:
            kept = [entry for entry, name in zip(config.get_list(key), _listener_names(config, key), strict=True)
                    if (name in names) == controller]
            if kept:
                props[key] = ",".join(kept)
            else:
                del props[key]
    return BrokerConfig(props)


def combined_node(config: BrokerConfig) -> tuple[Broker, KRaftBroker, Broker]:
    """(the controller, the broker's membership of the cluster, the broker), sharing one voter."""
    names = {name.upper() for name in config.get_list("controller.listener.names")}
    listeners = set(_listener_names(config, "listeners"))
    if not listeners & names:  # Kafka's KafkaConfig, in its words
        raise ConfigError("controller.listener.names must contain at least one value appearing in the "
                          "'listeners' configuration when running the KRaft controller role")
    if not listeners - names:
        raise ConfigError("listeners must include a listener that is not a controller listener on a combined node")
    controller = controller_broker(_restricted(config, controller=True))
    assert controller.quorum is not None
    membership = KRaftBroker(_restricted(config, controller=False), voter=controller.quorum)
    broker = Broker(membership.config, metadata=membership.metadata, cluster=membership,
                    kraft_version=membership.kraft_version)
    return controller, membership, broker
