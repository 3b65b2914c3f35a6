"""KRaft: metadata kept as Kafka 4 keeps it, as records in a quorum's log (``__cluster_metadata``)."""
