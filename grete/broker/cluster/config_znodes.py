"""Entity configs under ``/config/<kind>/<entity>`` and their change notifications, as Kafka 3.9's
AdminZkClient writes them (shared by the metadata cache and its security part)."""

from __future__ import annotations

from grete.coordinator.zookeeper import zk_layout as zk
from grete.coordinator.zookeeper.zk_client import NodeExistsError, ZkClient


async def read_config(client: ZkClient, kind: str, entity: str) -> dict[str, str]:
    found = await client.get(zk.config_path(kind, entity))
    return zk.decode_config(found[0]) if found and found[0] else {}


async def write_config(client: ZkClient, kind: str, entity: str, configs: dict[str, str], *,
                       notify: bool = True) -> None:
    path = zk.config_path(kind, entity)
    data = zk.encode_config(configs)
    try:
        await client.create(path, data, makepath=True)
    except NodeExistsError:
        await client.set(path, data)
    if notify:
        await client.create(f"{zk.CONFIG_CHANGES}/{zk.CONFIG_CHANGE_PREFIX}",
                            zk.encode_config_change(kind, entity), sequence=True)


def change_sequence(child: str) -> int:
    """The sequence number of a change-notification znode (``..._0000000042``); -1 if none."""
    digits = child.rsplit("_", 1)[-1]
    return int(digits) if digits.isdigit() else -1
