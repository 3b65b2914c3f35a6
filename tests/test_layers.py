"""The module graph of grete/ has no circle: no module reaches itself through its imports.

Layering between the packages is import-linter's job (``lint-imports``, contracts in pyproject.toml);
this checks what a layers contract cannot see, circles inside one package, and counts imports made
under ``TYPE_CHECKING`` and inside functions too (grimp reads every import statement). It also holds
grete/ to small modules: none over 600 lines, no class over 400. And no request handler asks whether
it runs on the embedded node or in a cluster: that is decided once, as the node is assembled, by the
cluster view the broker gets (grete/broker/cluster_view.py).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import grimp

GRETE = Path(__file__).resolve().parent.parent / "grete"
HANDLERS = GRETE / "broker" / "handlers"
# A branch on the cluster's absence, or on whether a partition has a replication path.
MODE_BRANCH = re.compile(r"cluster is None|cluster is not None|\.replicated\b")
MAX_MODULE_LINES = 600
MAX_CLASS_LINES = 400
GENERATED = ("protocol/messages/", "protocol/metadata/")  # codecs generated from Kafka's JSON specs
# Over the limits, each with its reason.
MODULE_EXCEPTIONS = {
    "broker/config.py": "BROKER_CONFIGS and TOPIC_CONFIGS are a table of definitions; the rest is ~400 lines",
}
CLASS_EXCEPTIONS = {
    "broker/network/connection.py:KafkaConnection": "not yet split: the connection is being reworked",
}


def _circles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child)))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_finder_sees_a_circle() -> None:
    graph = grimp.ImportGraph()
    for name in ("a", "b", "c"):
        graph.add_module(name)
    graph.add_import(importer="a", imported="b")
    graph.add_import(importer="b", imported="c")
    assert _circles(graph) == []
    graph.add_import(importer="c", imported="a")
    assert _circles(graph) == [["a", "b", "c"]]


def test_no_import_circles_in_grete() -> None:
    graph = grimp.build_graph("grete", exclude_type_checking_imports=False)
    assert _circles(graph) == []


def _oversized(root: Path) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        name = path.relative_to(root).as_posix()
        if name.startswith(GENERATED):
            continue
        text = path.read_text()
        if len(text.splitlines()) > MAX_MODULE_LINES and name not in MODULE_EXCEPTIONS:
            found.append(f"{name}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
                size = node.end_lineno - node.lineno + 1
                if size > MAX_CLASS_LINES and f"{name}:{node.name}" not in CLASS_EXCEPTIONS:
                    found.append(f"{name}: class {node.name} {size} lines")
    return found


def test_the_size_check_sees_a_large_module_and_class(tmp_path: Path) -> None:
    (tmp_path / "small.py").write_text("class A:\n    pass\n")
    assert _oversized(tmp_path) == []
    (tmp_path / "big.py").write_text("class B:\n" + "    x = 1\n" * MAX_CLASS_LINES + "\n" * 200)
    assert _oversized(tmp_path) == [f"big.py: {MAX_CLASS_LINES + 201} lines",
                                    f"big.py: class B {MAX_CLASS_LINES + 1} lines"]


def test_grete_modules_and_classes_are_small() -> None:
    assert _oversized(GRETE) == []


def _mode_branches(root: Path) -> list[str]:
    return [f"{path.relative_to(root)}:{number}: {line.strip()}"
            for path in sorted(root.rglob("*.py"))
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
            if MODE_BRANCH.search(line)]


def test_the_mode_check_sees_a_branch(tmp_path: Path) -> None:
    (tmp_path / "ok.py").write_text("if ctx.broker.cluster.replicates:\n    pass\n")
    assert _mode_branches(tmp_path) == []
    (tmp_path / "bad.py").write_text("a = broker.cluster is None\nb = p.replicated and 1\n")
    assert _mode_branches(tmp_path) == ["bad.py:1: a = broker.cluster is None", "bad.py:2: b = p.replicated and 1"]


def test_no_handler_branches_on_the_cluster_mode() -> None:
    assert _mode_branches(HANDLERS) == []


VIEW = re.compile(r"RequestContext\[(\w+)\]")


def _views_seen(root: Path) -> dict[str, set[str]]:
    """For each module: the views of the node its handlers take (``RequestContext[<view>]``), and
    ``Broker`` if it imports the node itself."""
    found: dict[str, set[str]] = {}
    for path in sorted(root.glob("*.py")):
        text = path.read_text(encoding="utf-8")
        views = set(VIEW.findall(text))
        if re.search(r"^\s*from grete\.broker\.broker import", text, re.MULTILINE):
            views.add("Broker")
        found[path.name] = views
    return found


def test_the_view_check_sees_the_node(tmp_path: Path) -> None:
    (tmp_path / "ok.py").write_text("def handle(ctx: RequestContext[Groups], r: int) -> None: ...\n")
    (tmp_path / "bad.py").write_text("from grete.broker.broker import Broker\n")
    assert _views_seen(tmp_path) == {"bad.py": {"Broker"}, "ok.py": {"Groups"}}


def test_handlers_see_their_room_s_view_of_the_node() -> None:
    """Each handler takes one of grete.broker.requests.services' views, never the node itself; only
    Envelope, which hands requests to the other handlers, sees all of it."""
    rooms = {"Basics", "DataPlane", "Groups", "Transactions", "Admin", "ClusterControl"}
    seen = {name: views for name, views in _views_seen(HANDLERS).items() if name not in ("__init__.py", "manifest.py")}
    assert {name: views for name, views in seen.items() if len(views) != 1 or not views <= rooms} == {
        "envelope.py": {"Everything"}}
