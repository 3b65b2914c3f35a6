"""An OSPBench-style traffic pipeline on Spark's Kafka connector, pointed at grete.

Modules: ``data`` (synthetic loop-detector sensors and their JSON events), ``generator`` (paced
publishing: constant rate and periodic bursts), ``session`` (a local SparkSession with the connector
jars from tools/spark_dist.py), ``streaming`` (parse, join flow with speed, aggregate per window,
Kafka sink), ``batch`` (exact offset and timestamp ranges), ``__main__`` (the command line).
"""
