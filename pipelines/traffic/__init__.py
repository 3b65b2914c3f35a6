"""An OSPBench-style traffic pipeline on Spark's Kafka connector, pointed at grete.

Modules: ``data`` (synthetic loop-detector sensors and their JSON events), ``generator`` (paced
publishing: constant rate and periodic bursts, idempotent, with an end of input), ``session`` (a
local SparkSession with the connector jars from tools/spark_dist.py), ``streaming`` (parse, join flow
with speed, aggregate per window, Kafka sink keyed by window), ``batch`` (exact offset and timestamp
ranges), ``topics`` (creating the topics to fit the cluster, reading offset ranges back with a plain
consumer), ``reference`` (the expected windows computed in plain Python from the input, compared
with the output window by window), ``__main__`` (the command line).
"""
