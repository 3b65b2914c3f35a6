"""The broker's side of the direct data path (docs/direct.md): produce regions and their
notifications (produce.py), consumers' metadata slots (consume.py), the service tying them to the
node (service.py). Clients use ``grete.direct``; the layouts both read are in grete/direct/layout.py.
"""
