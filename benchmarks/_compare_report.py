"""Tables, targets, markdown and plots for ``benchmarks/compare.py``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Figure:
    key: str            # "<workload>.<field>" in a broker's result dict
    label: str
    unit: str
    higher_is_better: bool = True
    ratio_target: float | None = None     # grete/Kafka must be >= this
    grete_max: float | None = None        # absolute ceiling for grete's own figure


FIGURES = [
    Figure("produce_acks1_p1.mb_per_s", "produce 1 KB, acks=1, 1 partition", "MB/s", ratio_target=1.2),
    Figure("produce_acks1_p1.records_per_s", "  same, records/s", "rec/s"),
    Figure("produce_acks1_p8.mb_per_s", "produce 1 KB, acks=1, 8 partitions", "MB/s", ratio_target=1.2),
    Figure("produce_acksall_p1.mb_per_s", "produce 1 KB, acks=all+idempotent, 1 partition", "MB/s",
           ratio_target=1.0),
    Figure("produce_acksall_p8.mb_per_s", "produce 1 KB, acks=all+idempotent, 8 partitions", "MB/s",
           ratio_target=1.0),
    Figure("consume_p1.mb_per_s", "consume 1 KB records, 1 partition", "MB/s", ratio_target=1.2),
    Figure("small_p1.records_per_s", "produce 100 B, linger.ms=0, 1 partition", "rec/s", ratio_target=1.0),
    Figure("empty_fetch.fetch_per_s", "empty Fetch requests served", "req/s", ratio_target=1.0),
    Figure("start.seconds", "start to first acknowledged produce", "s", higher_is_better=False, grete_max=0.3),
    Figure("rss.idle_mb", "idle RSS", "MB", higher_is_better=False, grete_max=40.0),
    Figure("rss.peak_mb", "peak RSS during the workloads", "MB", higher_is_better=False),
]


def lookup(result: dict[str, Any], key: str) -> float | None:
    workload, field = key.split(".")
    value = result.get(workload, {}).get(field)
    return float(value) if isinstance(value, (int, float)) else None


def verdict(fig: Figure, grete: float | None, kafka: float | None) -> str:
    if grete is None:
        return "no figure"
    if fig.grete_max is not None:
        return "met" if grete <= fig.grete_max else "NOT met"
    if fig.ratio_target is not None and kafka:
        return "met" if grete / kafka >= fig.ratio_target else "NOT met"
    return ""


def target_text(fig: Figure) -> str:
    if fig.grete_max is not None:
        return f"grete <= {fig.grete_max:g} {fig.unit}"
    if fig.ratio_target is not None:
        return f"ratio >= {fig.ratio_target:g}"
    return ""


def fmt(value: float | None) -> str:
    if value is None:
        return "—"
    if value >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3g}" if value < 10 else f"{value:.1f}"


def rows(grete: dict[str, Any], kafka: dict[str, Any]) -> list[list[str]]:
    out = []
    for fig in FIGURES:
        g, k = lookup(grete, fig.key), lookup(kafka, fig.key)
        ratio = f"{g / k:.2f}" if g is not None and k else "—"
        out.append([fig.label, fig.unit, fmt(g), fmt(k), ratio, target_text(fig), verdict(fig, g, k)])
    return out


HEADER = ["workload", "unit", "grete", "Kafka", "grete/Kafka", "target", "verdict"]


def text_table(table: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [HEADER, *table]) for i in range(len(HEADER))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in [HEADER, *table]]
    return "\n".join(lines)


def markdown_table(table: list[list[str]]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(c.strip() for c in r) + " |" for r in table]
    return "\n".join(lines)


def plot(grete: dict[str, Any], kafka: dict[str, Any], kafka_name: str, path: Path) -> None:
    """One bar pair per figure, each panel on its own scale (units differ)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figs = [f for f in FIGURES if not f.label.startswith(" ")]
    cols = 4
    nrows = (len(figs) + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(4 * cols, 3.2 * nrows))
    for ax, f in zip(axes.flat, figs, strict=False):
        g, k = lookup(grete, f.key) or 0.0, lookup(kafka, f.key) or 0.0
        bars = ax.bar(["grete", kafka_name], [g, k], color=["#2a9d8f", "#e76f51"])
        ax.bar_label(bars, labels=[fmt(g), fmt(k)], fontsize=8)
        ax.set_title(f.label.replace(", ", ",\n", 1), fontsize=9)
        ax.set_ylabel(f.unit, fontsize=8)
        ax.tick_params(labelsize=8)
        ax.margins(y=0.2)
    for ax in list(axes.flat)[len(figs):]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
