"""grete's direct data path, client side (docs/direct.md), and what the broker shares with its
clients: the transports and the region and slot layouts. Imports nothing of the broker (an
import-linter contract in pyproject.toml)."""
