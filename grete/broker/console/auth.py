"""Who may see the console (``console.authentication``).

- ``basic``: HTTP Basic; the user name and password are checked as the broker's SASL listeners
  check them: PLAIN's JAAS users, and SCRAM-SHA-256/512 credentials (the stored key derived from
  the password with the credential's salt and iterations). With an authorizer configured the user
  also needs DESCRIBE on the cluster, as DescribeCluster and DescribeLogDirs do.
- ``none``: anyone who reaches the port (which is 127.0.0.1 unless ``console.listener`` names a host).
- empty (the default): ``basic`` when a listener speaks SASL, ``none`` when every listener is
  PLAINTEXT. A broker with SSL listeners and no SASL one does not start the console without an
  explicit choice: a browser brings no client certificate this console could check.
"""

from __future__ import annotations

import base64
import binascii
import hmac
from dataclasses import dataclass

from grete.broker.broker import Broker
from grete.broker.config import ConfigError
from grete.broker.network.listeners import security_protocol
from grete.broker.security.delegation_tokens import scram_credential_for
from grete.broker.security.sasl import PLAIN, SCRAM_MECHANISMS, SaslFailure, listener_sasl
from grete.protocol.acls import CLUSTER_NAME, AclOperation, ResourceType

REALM = 'Basic realm="grete console", charset="UTF-8"'


@dataclass(frozen=True, slots=True)
class Verdict:
    status: int  # 200, 401 (no or wrong credentials) or 403 (authenticated, not authorized)
    user: str | None = None


class BasicAuth:
    def __init__(self, broker: Broker, sasl_listeners: list[str]) -> None:
        self.broker = broker
        setups = [listener_sasl(broker.config, name, broker.metadata.scram_credential) for name in sasl_listeners]
        self.plain = [setup.factories[PLAIN] for setup in setups if PLAIN in setup.factories]
        self.scram = sorted({m for setup in setups for m in setup.mechanisms if m in SCRAM_MECHANISMS})
        if not self.plain and not self.scram:
            raise ConfigError("console.authentication=basic checks SASL PLAIN or SCRAM users, and no SASL "
                              "listener enables PLAIN or SCRAM")

    def check(self, authorization: str | None, client_host: str) -> Verdict:
        credentials = _basic(authorization)
        if credentials is None or not self.valid(*credentials):
            return Verdict(401)
        user = credentials[0]
        authorizer = self.broker.authorizer
        if authorizer is not None and not authorizer.authorize(f"User:{user}", client_host, AclOperation.DESCRIBE,
                                                               ResourceType.CLUSTER, CLUSTER_NAME):
            return Verdict(403, user)
        return Verdict(200, user)

    def valid(self, user: str, password: str) -> bool:
        for factory in self.plain:
            try:
                factory().evaluate(f"\x00{user}\x00{password}".encode())
                return True
            except SaslFailure:
                pass
        for mechanism in self.scram:
            stored = self.broker.metadata.scram_credential(user, mechanism)
            if stored is not None and hmac.compare_digest(
                    scram_credential_for(mechanism, password, stored.salt, stored.iterations).stored_key,
                    stored.stored_key):
                return True
        return False


def console_auth(broker: Broker) -> BasicAuth | None:
    """The console's check, or None for an open console; ConfigError when the broker is secured and
    no setting says how the console should be."""
    mode = broker.config.get_str("console.authentication").strip().lower()
    if mode not in ("", "basic", "none"):
        raise ConfigError(f"Invalid value {mode} for configuration console.authentication: basic, none or empty")
    protocols = {listener.name: security_protocol(broker.config, listener.name) for listener in broker.listeners}
    sasl = sorted(name for name, protocol in protocols.items() if protocol.startswith("SASL_"))
    if mode == "none":
        return None
    if mode == "" and not sasl:
        if all(protocol == "PLAINTEXT" for protocol in protocols.values()):
            return None
        raise ConfigError("console.listener on a broker with SSL listeners and no SASL one: set "
                          "console.authentication=none to serve the console unauthenticated")
    if not sasl:
        raise ConfigError("console.authentication=basic checks SASL PLAIN or SCRAM users: the broker has no "
                          "SASL listener")
    return BasicAuth(broker, sasl)


def _basic(authorization: str | None) -> tuple[str, str] | None:
    if authorization is None:
        return None
    scheme, _, encoded = authorization.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        user, sep, password = base64.b64decode(encoded.strip(), validate=True).decode("utf-8").partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return None
    return (user, password) if sep and user else None
