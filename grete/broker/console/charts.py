"""Inline SVG line charts, rendered on the server: no script, no library in the browser."""

from __future__ import annotations

from html import escape

from grete.broker.console.samples import WINDOW_S, Point

WIDTH, HEIGHT, LEFT, TOP, BOTTOM = 300, 120, 46, 18, 16


def svg_chart(title: str, runs: list[list[Point]], window: float = WINDOW_S) -> str:
    """A chart of rates against time (right edge: now). Each run is one polyline; the y scale is
    0 to the largest value shown (1 when all are 0)."""
    top = max((rate for run in runs for _, rate in run), default=0.0) or 1.0
    plot_w, plot_h = WIDTH - LEFT - 4, HEIGHT - BOTTOM - TOP
    lines = []
    for run in runs:
        xy = [(LEFT + plot_w * (1 - age / window), TOP + plot_h * (1 - rate / top)) for age, rate in run]
        points = " ".join(f"{x:.1f},{y:.1f}" for x, y in xy)
        lines.append(f'<polyline class="series" fill="none" stroke="#2b6cb0" stroke-width="1.5" points="{points}"/>')
        # A run of one point (a viewer who just arrived) still shows.
        lines.append(f'<circle cx="{xy[-1][0]:.1f}" cy="{xy[-1][1]:.1f}" r="2" fill="#2b6cb0"/>')
    last = runs[-1][-1][1] if runs else None
    caption = f"{escape(title)}: {_human(last)}" if last is not None else f"{escape(title)}: collecting"
    return (f'<svg class="chart" role="img" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" '
            f'data-points="{sum(len(run) for run in runs)}" data-last="{last if last is not None else ""}">'
            f"<title>{caption}</title>"
            f'<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="#f7fafc" stroke="#cbd5e0"/>'
            f'<text x="{LEFT - 4}" y="{TOP + 8}" text-anchor="end" font-size="10">{_human(top)}</text>'
            f'<text x="{LEFT - 4}" y="{TOP + plot_h}" text-anchor="end" font-size="10">0</text>'
            f'<text x="{LEFT}" y="{HEIGHT - 3}" font-size="10">-{int(window // 60)} min</text>'
            f'<text x="{WIDTH - 4}" y="{HEIGHT - 3}" text-anchor="end" font-size="10">now</text>'
            f'<text x="{WIDTH - 4}" y="12" text-anchor="end" font-size="11" fill="#2d3748">'
            f'{"now: " + _human(last) if last is not None else "collecting"}</text>'
            + "".join(lines) + "</svg>")


def _human(value: float | None) -> str:
    if value is None:
        return ""
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if value >= size:
            return f"{value / size:.1f}{unit}"
    return f"{value:.0f}" if value >= 10 or value == int(value) else f"{value:.1f}"
