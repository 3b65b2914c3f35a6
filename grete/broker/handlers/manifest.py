"""API key -> (handler module, min version, max version, advertised min).

Written by ``python -m grete.broker.registry`` from the ``@api`` declaration of each module;
a test fails when it is out of date. Do not edit by hand."""

HANDLERS: dict[int, tuple[str, int, int, int]] = {
    0: ("produce", 0, 13, 0),  # Produce
    1: ("fetch", 4, 18, 4),  # Fetch
    2: ("list_offsets", 1, 11, 1),  # ListOffsets
    3: ("metadata", 0, 13, 0),  # Metadata
    4: ("leader_and_isr", 2, 7, 2),  # LeaderAndIsr
    5: ("stop_replica", 3, 4, 3),  # StopReplica
    6: ("update_metadata", 5, 8, 5),  # UpdateMetadata
    7: ("controlled_shutdown", 1, 3, 1),  # ControlledShutdown
    8: ("offset_commit", 2, 10, 2),  # OffsetCommit
    9: ("offset_fetch", 1, 10, 1),  # OffsetFetch
    10: ("find_coordinator", 0, 5, 0),  # FindCoordinator
    11: ("join_group", 0, 9, 0),  # JoinGroup
    12: ("heartbeat", 0, 4, 0),  # Heartbeat
    13: ("leave_group", 0, 5, 0),  # LeaveGroup
    14: ("sync_group", 0, 5, 0),  # SyncGroup
    15: ("describe_groups", 0, 6, 0),  # DescribeGroups
    16: ("list_groups", 0, 5, 0),  # ListGroups
    17: ("sasl_handshake", 0, 1, 0),  # SaslHandshake
    18: ("api_versions", 0, 4, 0),  # ApiVersions
    19: ("create_topics", 2, 7, 2),  # CreateTopics
    20: ("delete_topics", 1, 6, 1),  # DeleteTopics
    21: ("delete_records", 0, 2, 0),  # DeleteRecords
    22: ("init_producer_id", 0, 5, 0),  # InitProducerId
    23: ("offset_for_leader_epoch", 2, 4, 2),  # OffsetForLeaderEpoch
    24: ("add_partitions_to_txn", 0, 3, 0),  # AddPartitionsToTxn
    25: ("add_offsets_to_txn", 0, 4, 0),  # AddOffsetsToTxn
    26: ("end_txn", 0, 4, 0),  # EndTxn
    27: ("write_txn_markers", 0, 1, 0),  # WriteTxnMarkers
    28: ("txn_offset_commit", 0, 4, 0),  # TxnOffsetCommit
    29: ("describe_acls", 0, 3, 0),  # DescribeAcls
    30: ("create_acls", 0, 3, 0),  # CreateAcls
    31: ("delete_acls", 0, 3, 0),  # DeleteAcls
    32: ("describe_configs", 1, 4, 1),  # DescribeConfigs
    33: ("alter_configs", 0, 2, 0),  # AlterConfigs
    34: ("alter_replica_log_dirs", 1, 2, 1),  # AlterReplicaLogDirs
    35: ("describe_log_dirs", 1, 5, 1),  # DescribeLogDirs
    36: ("sasl_authenticate", 0, 2, 0),  # SaslAuthenticate
    37: ("create_partitions", 0, 3, 0),  # CreatePartitions
    42: ("delete_groups", 0, 2, 0),  # DeleteGroups
    43: ("elect_leaders", 0, 2, 0),  # ElectLeaders
    44: ("incremental_alter_configs", 0, 1, 0),  # IncrementalAlterConfigs
    45: ("alter_partition_reassignments", 0, 1, 0),  # AlterPartitionReassignments
    46: ("list_partition_reassignments", 0, 0, 0),  # ListPartitionReassignments
    47: ("offset_delete", 0, 0, 0),  # OffsetDelete
    48: ("describe_client_quotas", 0, 1, 0),  # DescribeClientQuotas
    49: ("alter_client_quotas", 0, 1, 0),  # AlterClientQuotas
    50: ("describe_user_scram_credentials", 0, 0, 0),  # DescribeUserScramCredentials
    51: ("alter_user_scram_credentials", 0, 0, 0),  # AlterUserScramCredentials
    56: ("alter_partition", 0, 3, 0),  # AlterPartition
    60: ("describe_cluster", 0, 2, 0),  # DescribeCluster
    61: ("describe_producers", 0, 0, 0),  # DescribeProducers
    65: ("describe_transactions", 0, 0, 0),  # DescribeTransactions
    66: ("list_transactions", 0, 2, 0),  # ListTransactions
    67: ("allocate_producer_ids", 0, 0, 0),  # AllocateProducerIds
    68: ("consumer_group_heartbeat", 0, 1, 0),  # ConsumerGroupHeartbeat
    69: ("consumer_group_describe", 0, 1, 0),  # ConsumerGroupDescribe
    71: ("get_telemetry_subscriptions", 0, 0, 0),  # GetTelemetrySubscriptions
    72: ("push_telemetry", 0, 0, 0),  # PushTelemetry
    74: ("list_config_resources", 0, 1, 0),  # ListConfigResources
    75: ("describe_topic_partitions", 0, 0, 0),  # DescribeTopicPartitions
    76: ("share_group_heartbeat", 1, 1, 1),  # ShareGroupHeartbeat
    77: ("share_group_describe", 1, 1, 1),  # ShareGroupDescribe
    78: ("share_fetch", 1, 2, 1),  # ShareFetch
    79: ("share_acknowledge", 1, 2, 1),  # ShareAcknowledge
    90: ("describe_share_group_offsets", 0, 0, 0),  # DescribeShareGroupOffsets
    91: ("alter_share_group_offsets", 0, 0, 0),  # AlterShareGroupOffsets
    92: ("delete_share_group_offsets", 0, 0, 0),  # DeleteShareGroupOffsets
    32000: ("direct_produce_address", 0, 0, 0),  # DirectProduceAddress
    32001: ("direct_consume_address", 0, 0, 0),  # DirectConsumeAddress
    32002: ("direct_replica_register", 0, 0, 0),  # DirectReplicaRegister
}
