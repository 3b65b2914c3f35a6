"""The web console on ``console.listener``: one server-rendered page with the cluster as this broker's
metadata cache knows it (brokers, topics, partitions, ISR), the groups this broker coordinates with
their lag, throughput charts from the broker's own counters, and the log dirs.

``view`` assembles the page's data from the broker's state, ``samples`` keeps the charts' ring,
``page`` renders HTML (Jinja2, inline SVG), ``auth`` checks HTTP Basic credentials against the
broker's SASL users, ``server`` answers HTTP on the broker's loop. The node imports
``grete.broker.console.server`` by name and only when ``console.listener`` is set.
"""
