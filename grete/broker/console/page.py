"""The console's one page: a Jinja2 template (autoescaped: group, member and client ids are the
clients' own strings), charts as inline SVG, and a few lines of script that fetch the page again
every ``REFRESH_S`` while the tab is visible and swap its ``<main>`` in (with no script: a meta
refresh). Machine-readable ``data-*`` attributes carry the numbers the tests compare."""

from __future__ import annotations

from dataclasses import dataclass

from jinja2 import Environment
from jinja2.filters import do_filesizeformat
from markupsafe import Markup, escape

from grete.broker.console.view import ClusterView, GroupRow, GroupsView, LogDirRow, TopicRow

REFRESH_S = 5


@dataclass(slots=True)
class Page:
    cluster: ClusterView
    groups: GroupsView
    log_dirs: list[LogDirRow]
    charts: list[tuple[str, Markup]]  # (title, inline SVG)
    generated: str  # the broker's wall clock, UTC


TEMPLATE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>grete console: broker {{ c.node_id }}</title>
<noscript><meta http-equiv="refresh" content="{{ refresh }}"></noscript>
<style>
body{font:13px/1.4 system-ui,sans-serif;margin:0 1.5em;color:#1a202c}
h1{font-size:18px;margin:.6em 0 .2em}h2{font-size:15px;margin:1.2em 0 .3em}
table{border-collapse:collapse;margin:.2em 0}td,th{border:1px solid #e2e8f0;padding:2px 7px;text-align:left}
th{background:#edf2f7}.num{text-align:right}.bad{background:#fed7d7}.warn{background:#fefcbf}
.ok{color:#276749}.down{color:#c53030;font-weight:bold}.muted{color:#718096}
.charts{display:flex;flex-wrap:wrap;gap:10px}.charts figure{margin:0}figcaption{font-size:12px}
details{margin:.2em 0}summary{cursor:pointer}
</style></head>
<body><main>
<h1>grete console</h1>
<p class="muted">cluster {{ c.cluster_id }} &middot; served by broker {{ c.node_id }} &middot;
controller {{ c.controller_id if c.controller_id >= 0 else "none" }} &middot; {{ generated }}</p>

<h2>Brokers</h2>
<table id="brokers"><tr><th>id</th><th>endpoint</th><th>rack</th><th>status</th><th>role</th>
<th>leaders</th><th>replicas</th></tr>
{% for b in c.brokers %}<tr data-broker="{{ b.id }}" data-status="{{ 'up' if b.live else 'down' }}"
 class="{{ '' if b.live else 'bad' }}"><td>{{ b.id }}{% if b.local %} (this broker){% endif %}</td>
<td>{{ b.endpoint }}</td><td>{{ b.rack or "" }}</td>
<td class="{{ 'ok' if b.live else 'down' }}">{{ 'up' if b.live else 'down' }}</td>
<td>{{ 'controller' if b.controller else '' }}</td><td class="num">{{ b.leaders }}</td>
<td class="num">{{ b.replicas }}</td></tr>
{% endfor %}</table>

<h2>Throughput (broker {{ c.node_id }})</h2>
<div class="charts">{% for title, chart in charts %}<figure>{{ chart }}<figcaption>{{ title }}</figcaption></figure>{% endfor %}</div>

<h2>Topics</h2>
<table id="topics"><tr><th>topic</th><th>partitions</th><th>replication</th><th>under-replicated</th>
<th>offline</th></tr>
{% for t in c.topics %}<tr data-topic="{{ t.name }}" data-partitions="{{ t.partitions|length }}"
 class="{{ 'bad' if t.offline else ('warn' if t.under_replicated else '') }}"><td><a href="#topic-{{ t.name }}">{{ t.name }}</a>
{% if t.internal %}<span class="muted">(internal)</span>{% endif %}</td><td class="num">{{ t.partitions|length }}</td>
<td class="num">{{ t.replication }}</td><td class="num">{{ t.under_replicated }}</td><td class="num">{{ t.offline }}</td></tr>
{% endfor %}</table>
{% for t in c.topics %}<details id="topic-{{ t.name }}"{% if not t.internal %} open{% endif %}><summary>{{ t.name }}</summary>
<table><tr><th>partition</th><th>leader</th><th>replicas</th><th>ISR</th><th>offline replicas</th><th>state</th>
<th>high watermark</th><th>size here</th></tr>
{{ partition_rows(t) }}</table></details>
{% endfor %}

<h2>Groups</h2>
{% if not g.groups %}<p class="muted">No group is coordinated by broker {{ c.node_id }}.</p>{% endif %}
{% for grp in g.groups %}{% set total = grp.total_lag %}<details id="group-{{ grp.group_id }}" open data-group="{{ grp.group_id }}"
 data-kind="{{ grp.kind }}" data-total-lag="{{ total if total is not none else '' }}">
<summary>{{ grp.group_id }} <span class="muted">{{ grp.kind }} &middot; {{ grp.state }} &middot;
{{ grp.members|length }} member(s) &middot; lag {{ total if total is not none else 'unknown' }}</span></summary>
{% if grp.members %}<table><tr><th>member</th><th>client</th><th>host</th><th>assigned</th></tr>
{% for m in grp.members %}<tr class="member"><td>{{ m.member_id }}</td><td>{{ m.client_id }}</td><td>{{ m.host }}</td>
<td>{{ m.assigned }}</td></tr>{% endfor %}</table>{% endif %}
{% if grp.lags %}<table><tr><th>topic</th><th>partition</th><th>{{ 'start offset' if grp.kind == 'share' else 'committed' }}</th>
<th>end offset</th><th>lag</th><th>member</th></tr>
{{ lag_rows(grp) }}</table>{% endif %}</details>
{% endfor %}
{% for broker_id, parts in g.elsewhere|dictsort %}<p class="elsewhere" data-coordinator="{{ broker_id }}">
{% if broker_id >= 0 %}Groups coordinated by broker {{ broker_id }}{% else %}Groups with no coordinator now (no leader){% endif %}
(__consumer_offsets partitions {{ parts|join(', ') }}): {% if broker_id >= 0 %}see broker {{ broker_id }}'s console.{% else %}not shown.{% endif %}</p>
{% endfor %}

<h2>Log dirs (broker {{ c.node_id }})</h2>
<table id="log-dirs"><tr><th>dir</th><th>status</th><th>partitions</th><th>size</th><th>disk total</th>
<th>disk free</th></tr>
{% for d in log_dirs %}<tr data-log-dir="{{ d.path }}" data-online="{{ 'true' if d.online else 'false' }}"
 class="{{ '' if d.online else 'bad' }}"><td>{{ d.path }}</td>
<td class="{{ 'ok' if d.online else 'down' }}">{{ 'online' if d.online else 'offline: ' ~ d.reason }}{{ ' (cordoned)' if d.cordoned else '' }}</td>
<td class="num">{{ d.partitions }}</td><td class="num">{{ d.size_bytes|filesizeformat }}</td>
<td class="num">{{ d.total_bytes|filesizeformat if d.total_bytes >= 0 else '' }}</td>
<td class="num">{{ d.usable_bytes|filesizeformat if d.usable_bytes >= 0 else '' }}</td></tr>
{% endfor %}</table>
</main>
<script>
(function () {
  function tick() {
    if (document.hidden) { return setTimeout(tick, {{ refresh * 1000 }}); }
    fetch(location.href, {credentials: "same-origin"}).then(function (r) {
      return r.ok ? r.text() : Promise.reject(r.status);
    }).then(function (text) {
      var open = Array.from(document.querySelectorAll("details")).map(function (d) { return [d.id, d.open]; });
      var fresh = new DOMParser().parseFromString(text, "text/html").querySelector("main");
      document.querySelector("main").replaceWith(fresh);
      open.forEach(function (o) { var d = document.getElementById(o[0]); if (d) { d.open = o[1]; } });
    }).catch(function () {}).finally(function () { setTimeout(tick, {{ refresh * 1000 }}); });
  }
  setTimeout(tick, {{ refresh * 1000 }});
})();
</script>
</body></html>
"""

_ENV = Environment(autoescape=True, trim_blocks=True, lstrip_blocks=True)


def partition_rows(topic: TopicRow) -> Markup:
    """A topic's partition rows. This and ``lag_rows`` are plain functions, not template loops: the
    two tables grow with the cluster, and autoescaping each of their cells costs several times
    what the rest of the page does (docs/benchmarks.md, "Console page"). Strings are escaped here;
    the rest are integers."""
    name = escape(topic.name)
    rows = []
    for p in topic.partitions:
        replicas, isr = ",".join(map(str, p.replicas)), ",".join(map(str, p.isr))
        state = "offline" if not p.leader_live else ("under-replicated" if p.under_replicated else "ok")
        css = "bad" if not p.leader_live else ("warn" if p.under_replicated else "")
        rows.append(
            f'<tr class="partition {css}" data-topic="{name}" data-partition="{p.index}" data-leader="{p.leader}" '
            f'data-replicas="{replicas}" data-isr="{isr}"><td class="num">{p.index}</td>'
            f'<td class="num">{p.leader if p.leader >= 0 else "none"}</td><td>{replicas}</td><td>{isr}</td>'
            f'<td>{",".join(map(str, p.offline))}</td><td>{state}</td>'
            f'<td class="num">{"" if p.end_offset is None else p.end_offset}</td>'
            f'<td class="num">{"" if p.size_bytes is None else _size(p.size_bytes)}</td></tr>')
    return Markup("\n".join(rows))


def lag_rows(group: GroupRow) -> Markup:
    group_id = escape(group.group_id)
    escaped: dict[str, str] = {}  # topic and member names repeat from row to row
    rows = []
    for row in group.lags:
        lag = row.lag
        topic = escaped.get(row.topic) or escaped.setdefault(row.topic, escape(row.topic))
        owner = escaped.get(row.owner) or escaped.setdefault(row.owner, escape(row.owner))
        rows.append(
            f'<tr class="lag" data-group="{group_id}" data-topic="{topic}" data-partition="{row.partition}" '
            f'data-lag="{"" if lag is None else lag}"><td>{topic}</td><td class="num">{row.partition}</td>'
            f'<td class="num">{row.committed}</td><td class="num">{"unknown" if row.end is None else row.end}</td>'
            f'<td class="num">{"unknown" if lag is None else lag}</td><td>{owner}</td></tr>')
    return Markup("\n".join(rows))


def _size(n: int) -> str:
    return str(do_filesizeformat(n))


_ENV.globals.update(partition_rows=partition_rows, lag_rows=lag_rows)
_TEMPLATE = _ENV.from_string(TEMPLATE)


def render(page: Page) -> str:
    return _TEMPLATE.render(c=page.cluster, g=page.groups, log_dirs=page.log_dirs, charts=page.charts,
                            generated=page.generated, refresh=REFRESH_S)
