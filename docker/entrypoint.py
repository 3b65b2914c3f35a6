"""The image's entrypoint: environment variables to a ``server.properties``, then ``grete serve``.

Configuration follows the official ``apache/kafka`` image:

* no input: the image's defaults below (those of Kafka's shipped ``config/server.properties`` that
  matter in a container);
* file input: a ``server.properties`` in ``/mnt/shared/config`` replaces those defaults;
* environment: ``KAFKA_<NAME>`` overrides either. The name maps to the key the official image's
  way: ``___`` -> ``-``, ``__`` -> ``_``, ``_`` -> ``.``, lower case
  (``KAFKA_NUM_PARTITIONS=3`` -> ``num.partitions=3``). ``CLUSTER_ID`` sets ``cluster.id``.

Without ``KAFKA_LISTENERS`` the listeners are the advertised ones on all interfaces, as the
official image derives them. JVM-only variables (``KAFKA_HEAP_OPTS`` ...) are reported and
skipped; ``KAFKA_LOG4J_ROOT_LOGLEVEL`` becomes ``--log-level``.

The file is written (mode 0600: it may hold passwords, which ``--override`` arguments would show in
the process list) and this process becomes ``grete serve`` (exec), so SIGTERM reaches the broker.
Arguments starting with ``-`` are passed on to ``grete serve``; any other command runs instead.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path

PREFIX = "KAFKA_"
FILE_INPUT = Path("/mnt/shared/config/server.properties")
OUTPUT = Path(os.environ.get("GRETE_CONFIG_DIR", "/etc/grete")) / "server.properties"

# Kafka's shipped config/server.properties values that differ from the code defaults, plus the
# container's own: every interface, the volume, and a single node's replication factors.
DEFAULTS = {
    "listeners": "PLAINTEXT://:9092",
    "advertised.listeners": "PLAINTEXT://localhost:9092",
    "log.dirs": "/var/lib/grete/data",
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.replication.factor": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
}

# Variables Kafka's start scripts read for the JVM: nothing for grete to apply.
JVM_ONLY = frozenset({
    "KAFKA_HEAP_OPTS", "KAFKA_OPTS", "KAFKA_JVM_PERFORMANCE_OPTS", "KAFKA_GC_LOG_OPTS", "KAFKA_JMX_OPTS",
    "KAFKA_JMX_PORT", "KAFKA_JMX_HOSTNAME", "KAFKA_LOG4J_OPTS", "KAFKA_LOG4J_LOGGERS",
    "KAFKA_TOOLS_LOG4J_LOGLEVEL", "KAFKA_VERSION", "KAFKA_HOME", "KAFKA_DEBUG",
})
LOG_LEVEL_VAR = "KAFKA_LOG4J_ROOT_LOGLEVEL"
# log4j level names Python's logging does not know.
_LOG4J_TO_PYTHON = {"TRACE": "DEBUG", "WARN": "WARNING", "FATAL": "CRITICAL", "OFF": "CRITICAL"}
_UNDERSCORES = {"_": ".", "__": "_", "___": "-"}


def env_key(name: str) -> str:
    """``KAFKA_LOG_RETENTION_HOURS`` -> ``log.retention.hours``; ``KAFKA_ABC___DEF`` -> ``abc-def``."""
    body = name[len(PREFIX):] if name.startswith(PREFIX) else name
    return re.sub(r"_{1,3}", lambda m: _UNDERSCORES[m.group()], body).lower()


def key_env(key: str) -> str:
    """The inverse: the variable that sets ``key`` (``-`` -> ``___``, ``_`` -> ``__``, ``.`` -> ``_``)."""
    return PREFIX + key.replace("_", "__").replace("-", "___").replace(".", "_").upper()


def env_properties(environ: Mapping[str, str], notes: list[str]) -> dict[str, str]:
    """The broker keys the environment sets; what it skips is explained in ``notes``."""
    props: dict[str, str] = {}
    if "CLUSTER_ID" in environ:
        props["cluster.id"] = environ["CLUSTER_ID"]
    for name in sorted(environ):
        if not name.startswith(PREFIX) or name == LOG_LEVEL_VAR:
            continue
        if name in JVM_ONLY:
            notes.append(f"{name} is a JVM setting: ignored by grete")
            continue
        value = environ[name]
        if "\n" in value or "\r" in value:
            raise SystemExit(f"grete-entrypoint: {name} holds a line break, which a property cannot")
        props[env_key(name)] = value
    return props


def derived_listeners(advertised: str) -> str:
    """``PLAINTEXT://broker1:19092,EXT://localhost:9092`` -> ``PLAINTEXT://:19092,EXT://:9092``:
    the advertised listeners bound on every interface (the official image's rule)."""
    return ",".join(re.sub(r"://(\[[^\]]*\]|[^:/]*):", "://:", item.strip())
                    for item in advertised.split(",") if item.strip())


def read_file_input(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines() if path.is_file() else []


def render(environ: Mapping[str, str], file_lines: list[str], notes: list[str]) -> str:
    """The server.properties text: file input or defaults, then the environment."""
    env = env_properties(environ, notes)
    lines = ["# Written by grete-entrypoint from the environment; see docs/operations.md."]
    if file_lines:
        lines += [f"# from {FILE_INPUT}", *file_lines]
        base: dict[str, str] = {}
    else:
        base = dict(DEFAULTS)
        if "listeners" not in env and "advertised.listeners" in env:
            base["listeners"] = derived_listeners(env["advertised.listeners"])
        elif "listeners" in env and "advertised.listeners" not in env:
            del base["advertised.listeners"]  # grete advertises its listeners then, as Kafka does
    lines += ["# image defaults", *(f"{k}={v}" for k, v in base.items() if k not in env)]
    lines += ["# environment", *(f"{k}={v}" for k, v in env.items())]
    return "\n".join(lines) + "\n"


def log_level(environ: Mapping[str, str]) -> str:
    level = environ.get(LOG_LEVEL_VAR, "INFO").strip().upper() or "INFO"
    return _LOG4J_TO_PYTHON.get(level, level)


def command(environ: Mapping[str, str], args: list[str], config: Path) -> list[str]:
    """What to exec: ``grete serve <config> --log-level L [args]``, or ``args`` themselves when
    they name another command (``bash``, ``python -m ...``)."""
    if args and not args[0].startswith("-"):
        return args
    return ["grete", "serve", str(config), "--log-level", log_level(environ), *args]


def write_config(text: str, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)


def main(argv: list[str]) -> None:
    argv_cmd = command(os.environ, argv, OUTPUT)
    if argv_cmd[:2] == ["grete", "serve"]:
        notes: list[str] = []
        write_config(render(os.environ, read_file_input(FILE_INPUT), notes), OUTPUT)
        for note in notes:
            print(f"grete-entrypoint: {note}", file=sys.stderr)
    os.execvp(argv_cmd[0], argv_cmd)


if __name__ == "__main__":
    main(sys.argv[1:])
