"""A SCRAM credential as AlterUserScramCredentials upserts it: what is stored (salt, StoredKey,
ServerKey, iterations) and the salted password it came from.

A store that writes the credential itself (ZooKeeper, the metadata log of a controller or a single
node) reads only the stored fields, as any ``ScramCredential``, and never keeps the salted password.
A KRaft broker writes nothing itself: it sends the upsertion on to the active controller as the
request carried it, and Kafka's controller (ScramControlManager) derives the keys from the salted
password itself, so that is what it needs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from grete.broker.security.sasl import scram_keys
from grete.coordinator.metadata import ScramCredential


@dataclass(frozen=True, slots=True)
class ScramUpsertion(ScramCredential):
    salted_password: bytes = field(default=b"", repr=False)

    @classmethod
    def derive(cls, mechanism: str, salt: bytes, salted_password: bytes, iterations: int) -> ScramUpsertion:
        stored_key, server_key = scram_keys(mechanism, salted_password)
        return cls(salt, stored_key, server_key, iterations, salted_password)

    def stored(self) -> ScramCredential:
        """The credential as a store keeps it (and as a metadata image shows it)."""
        return ScramCredential(self.salt, self.stored_key, self.server_key, self.iterations)
