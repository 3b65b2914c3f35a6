"""Tables, targets, markdown and plots for ``benchmarks/compare.py``.

Every broker column holds the median of its runs, with [min..max] when there was more than one run.
Ratios are grete (or the baseline grete) over each Kafka version, medians over medians; the verdict
compares grete with the first Kafka version only.
"""

from __future__ import annotations

import statistics
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
    ratio_max: float | None = None        # grete/Kafka must be <= this (latencies)
    grete_max: float | None = None        # absolute ceiling for grete's own figure
    plot: bool = True
    ratio: bool = True                    # False: a setting shown for reference, not a comparison


FIGURES = [
    Figure("produce_acks1_p1.mb_per_s", "1. produce 1 KB, acks=1, 1 partition", "MB/s", ratio_target=1.2),
    Figure("produce_acks1_p1.records_per_s", "   same, records/s", "rec/s", plot=False),
    Figure("produce_acks1_p8.mb_per_s", "1. produce 1 KB, acks=1, 8 partitions", "MB/s", ratio_target=1.2),
    Figure("produce_acksall_p1.mb_per_s", "2. produce 1 KB, acks=all+idempotent, 1 partition", "MB/s",
           ratio_target=1.0),
    Figure("produce_acksall_p8.mb_per_s", "2. produce 1 KB, acks=all+idempotent, 8 partitions", "MB/s",
           ratio_target=1.0),
    Figure("consume_p1.mb_per_s", "3. consume 1 KB records, 1 partition", "MB/s", ratio_target=1.2),
    Figure("consume_p1.fetch_latency_avg_ms", "   same, the consumer's Fetch latency (avg, 1 MB)", "ms",
           higher_is_better=False, plot=False),
    Figure("small_p1.records_per_s", "4. produce 100 B, linger.ms=0, 1 partition", "rec/s", ratio_target=1.0),
    Figure("e2e_latency.p50_ms", "5. end-to-end latency p50 (fixed rate)", "ms", higher_is_better=False),
    Figure("e2e_latency.p99_ms", "5. end-to-end latency p99", "ms", higher_is_better=False, ratio_max=1.0),
    Figure("e2e_latency.p999_ms", "5. end-to-end latency p99.9", "ms", higher_is_better=False),
    Figure("empty_fetch.fetch_per_s", "6. empty Fetch requests served", "req/s", ratio_target=1.0),
    Figure("start.seconds", "7. start to first acknowledged produce", "s", higher_is_better=False, grete_max=0.3),
    Figure("rss.idle_mb", "7. idle RSS", "MB", higher_is_better=False, grete_max=40.0),
    Figure("rss.peak_mb", "7. peak RSS during the workloads", "MB", higher_is_better=False),
    Figure("group3.first_record_s", "8. 3-member group: first record consumed", "s", higher_is_better=False,
           grete_max=0.5),
    Figure("group3.all_members_s", "8. 3-member group: every member has a record", "s",
           higher_is_better=False),
    Figure("group3.cold_first_record_s", "8. same, the run's first group: first record", "s",
           higher_is_better=False, plot=False),
    Figure("fetch_small.median_ms", "9. Fetch at offset 0 of the 1 GB log (median)", "ms",
           higher_is_better=False, ratio_max=1.1),
    Figure("fetch_small.first_ms", "9. same, first Fetch on a new connection", "ms", higher_is_better=False,
           plot=False),
    Figure("fetch_big.median_ms", "9. Fetch at offset 0 of the large log (median)", "ms",
           higher_is_better=False, ratio_max=1.1),
    Figure("fetch_big.first_ms", "9. same, first Fetch on a new connection", "ms", higher_is_better=False,
           plot=False),
    Figure("fetch_big.log_gb", "9. large log size", "GB", plot=False, ratio=False),
    Figure("produce_p1000.mb_per_s", "10. produce 1 KB, round robin over 1000 partitions", "MB/s"),
    Figure("p1000_create.seconds", "10. create 1000 partitions until all accept writes", "s",
           higher_is_better=False, plot=False),
]


def lookup(result: dict[str, Any], key: str) -> float | None:
    workload, field = key.split(".")
    value = result.get(workload, {}).get(field)
    return float(value) if isinstance(value, (int, float)) else None


def values(runs: list[dict[str, Any]], key: str) -> list[float]:
    return [v for r in runs if (v := lookup(r, key)) is not None]


def median(runs: list[dict[str, Any]], key: str) -> float | None:
    found = values(runs, key)
    return statistics.median(found) if found else None


def verdict(fig: Figure, grete: float | None, kafka: float | None) -> str:
    if grete is None:
        return "no figure"
    if fig.grete_max is not None:
        return "met" if grete <= fig.grete_max else "NOT met"
    if not kafka:
        return ""
    if fig.ratio_target is not None:
        return "met" if grete / kafka >= fig.ratio_target else "NOT met"
    if fig.ratio_max is not None:
        return "met" if grete / kafka <= fig.ratio_max else "NOT met"
    return ""


def target_text(fig: Figure) -> str:
    if fig.grete_max is not None:
        return f"grete <= {fig.grete_max:g} {fig.unit}"
    if fig.ratio_target is not None:
        return f"ratio >= {fig.ratio_target:g}"
    if fig.ratio_max is not None:
        return f"ratio <= {fig.ratio_max:g}"
    return ""


def fmt(value: float | None) -> str:
    if value is None:
        return "—"
    if value >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3g}" if value < 10 else f"{value:.1f}"


def cell(found: list[float]) -> str:
    if not found:
        return "—"
    text = fmt(statistics.median(found))
    return text if len(found) < 2 else f"{text} [{fmt(min(found))}..{fmt(max(found))}]"


def rows(runs: dict[str, list[dict[str, Any]]], order: list[str]) -> tuple[list[str], list[list[str]]]:
    """(header, table): a column per broker, a ratio column per (grete-like, Kafka) pair."""
    gretes = [n for n in order if not n.startswith("kafka")]
    kafkas = [n for n in order if n.startswith("kafka")]
    pairs = [(g, k) for g in gretes for k in kafkas]
    header = ["workload", "unit", *order, *(f"{g}/{k}" for g, k in pairs), "target", "verdict"]
    table = []
    for fig in FIGURES:
        workload = fig.key.split(".")[0]
        if not any(workload in r for results in runs.values() for r in results):
            continue  # not run (--workloads): no row, rather than a row of dashes
        medians = {n: median(runs[n], fig.key) for n in order}
        ratios = [f"{medians[g] / medians[k]:.2f}" if fig.ratio and medians[g] is not None and medians[k]
                  else "—" for g, k in pairs]
        primary = medians[kafkas[0]] if kafkas else None
        grete = medians.get("grete")
        table.append([fig.label, fig.unit, *(cell(values(runs[n], fig.key)) for n in order), *ratios,
                      target_text(fig), verdict(fig, grete, primary) if "grete" in medians else ""])
    return header, table


def errors(runs: dict[str, list[dict[str, Any]]]) -> list[str]:
    """Every workload that failed, as 'broker run N workload: error'."""
    out = []
    for name, results in runs.items():
        for i, result in enumerate(results):
            for workload, figures in result.items():
                if isinstance(figures, dict) and "error" in figures:
                    out.append(f"{name} run {i + 1} {workload}: {figures['error']}")
    return out


def text_table(table: list[list[str]], header: list[str]) -> str:
    widths = [max(len(r[i]) for r in [header, *table]) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in [header, *table]]
    return "\n".join(lines)


def markdown_table(table: list[list[str]], header: list[str]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(c.strip() for c in r) + " |" for r in table]
    return "\n".join(lines)


KAFKA_COLORS = ["#e76f51", "#f4a261", "#e9c46a"]


def colors(order: list[str]) -> list[str]:
    kafkas = iter(KAFKA_COLORS * 3)
    return ["#2a9d8f" if n == "grete" else "#8ab17d" if n.startswith("grete") else next(kafkas) for n in order]


def plot(runs: dict[str, list[dict[str, Any]]], order: list[str], path: Path) -> None:
    """One panel per figure (units differ), a bar per broker at its median, whiskers at min and max."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figs = [f for f in FIGURES if f.plot and any(values(runs[n], f.key) for n in order)]
    if not figs:
        return
    cols = 4
    nrows = (len(figs) + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(4.2 * cols, 3.3 * nrows), squeeze=False)
    for ax, f in zip(axes.flat, figs, strict=False):
        found = [values(runs[n], f.key) for n in order]
        mids = [statistics.median(v) if v else 0.0 for v in found]
        low = [m - min(v) if v else 0.0 for m, v in zip(mids, found, strict=True)]
        high = [max(v) - m if v else 0.0 for m, v in zip(mids, found, strict=True)]
        bars = ax.bar(order, mids, color=colors(order), yerr=[low, high], capsize=3)
        ax.bar_label(bars, labels=[fmt(m) for m in mids], fontsize=7)
        ax.set_title(f.label.replace(", ", ",\n", 1), fontsize=8)
        ax.set_ylabel(f.unit + ("" if f.higher_is_better else " (lower is better)"), fontsize=7)
        ax.tick_params(labelsize=7)
        ax.margins(y=0.2)
    for ax in list(axes.flat)[len(figs):]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
