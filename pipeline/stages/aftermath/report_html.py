"""report.html: the matrix of entries and statuses, and a trend chart per cell (inline SVG, no script, no network)."""

from __future__ import annotations

import html
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pipeline.config.bundle import Config
from pipeline.infra.cpu_class import cpu_class
from pipeline.infra.history import History
from pipeline.outcome import Outcome
from pipeline.status import STATUS_COLOURS

_COLOURS = STATUS_COLOURS
LINE = "#0969da"  # the series; a test looks for this colour in a screenshot
REFERENCE = "#8250df"
CURRENT = "#cf222e"
_W, _H, _PAD = 520, 180, 36


@dataclass(frozen=True)
class Series:
    """One cell's metric over nights: the median of each night's samples, with its reference."""

    entry: str
    cell: str
    metric: str
    unit: str
    points: tuple[tuple[str, float], ...]  # (night, median), oldest first
    reference: float | None

    def to_json(self) -> dict[str, Any]:
        return {
            "entry": self.entry,
            "cell": self.cell,
            "metric": self.metric,
            "unit": self.unit,
            "points": [list(p) for p in self.points],
            "reference": self.reference,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Series:
        points = tuple((str(night), float(value)) for night, value in data["points"])
        return cls(data["entry"], data["cell"], data["metric"], data["unit"], points, data["reference"])


def collect_series(history: History, config: Config, hardware: str, entries: Sequence[str]) -> list[Series]:
    """Every cell of every entry: throughput (the judged metric) and, for prefill cells, time to first token."""
    found = []
    for entry_id in entries:
        thresholds = config.thresholds_for(entry_id, cpu_class())  # collected on the host that ran the entry
        for cell, reference in sorted(thresholds.cells.items()):
            metric = "pp_tps" if cell.startswith("pp") else "tg_tps"
            charts = [(metric, "t/s", reference.ref)]
            if metric == "pp_tps":
                charts.append(("e2e_ttft", "ms", None))
            for name, unit, ref in charts:
                nights = history.nights(hardware=hardware, entry=entry_id, cell=cell, metric=name)
                points = tuple((n.night, statistics.median(n.values)) for n in nights if n.values)
                found.append(Series(entry_id, cell, name, unit, points, ref))
    return found


def render_html(run: Mapping[str, Any], outcomes: Sequence[Outcome], series: Sequence[Series]) -> str:
    rows = "\n".join(
        f"<tr><td>{html.escape(o.entry)}{'' if o.required else ' (optional)'}</td>"
        f"<td style='color:{_COLOURS[o.status.value]};font-weight:bold'>{o.status.value}</td>"
        f"<td>{html.escape(o.stage)}</td><td>{html.escape(o.reason)}</td><td>{o.duration_s:.0f} s</td></tr>"
        for o in outcomes
    )
    charts = "\n".join(_figure(s, str(run["night"])) for s in series)
    title = f"spark-nightly {run['night']}: {run['verdict']}"
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:sans-serif;margin:24px}}table{{border-collapse:collapse}}td,th{{border:1px solid #d0d7de;
padding:4px 8px;text-align:left}}figure{{display:inline-block;margin:8px}}figcaption{{font-size:13px}}</style></head>
<body><h1>{html.escape(title)}</h1>
<p>Run <code>{html.escape(str(run["run_id"]))}</code> on profile <code>{html.escape(str(run["profile"]))}</code>;
{html.escape(str(run.get("publish") or "nothing published"))}.</p>
<h2>Entries</h2>
<table><tr><th>entry</th><th>status</th><th>stage</th><th>reason</th><th>duration</th></tr>
{rows}
</table>
<h2>Trends</h2>
<p>Median of each night's samples; <span style="color:{REFERENCE}">dashed: the reference</span>;
<span style="color:{CURRENT}">dot: tonight</span>.</p>
{charts}
</body></html>
"""


def _figure(series: Series, tonight: str) -> str:
    caption = html.escape(f"{series.entry} {series.cell} {series.metric} ({series.unit})")
    if not series.points:
        return f"<figure><figcaption>{caption}: no healthy night recorded yet</figcaption></figure>"
    values = [v for _, v in series.points] + ([series.reference] if series.reference else [])
    low, high = min(values), max(values)
    span = (high - low) or max(abs(high), 1.0) * 0.1
    low, high = low - span * 0.1, high + span * 0.1
    count = len(series.points)

    def x(index: int) -> float:
        return _PAD + (_W - 2 * _PAD) * (index / (count - 1) if count > 1 else 0.5)

    def y(value: float) -> float:
        return _H - _PAD + (value - low) / (high - low) * (2 * _PAD - _H)

    points = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, (_, v) in enumerate(series.points))
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{_H}" role="img" aria-label="{caption}">',
        f'<rect x="0" y="0" width="{_W}" height="{_H}" fill="#ffffff" stroke="#d0d7de"/>',
        f'<polyline points="{points}" fill="none" stroke="{LINE}" stroke-width="3"/>',
    ]
    if series.reference:
        ref_y = y(series.reference)
        parts.append(
            f'<line x1="{_PAD}" x2="{_W - _PAD}" y1="{ref_y:.1f}" y2="{ref_y:.1f}" stroke="{REFERENCE}" '
            f'stroke-width="2" stroke-dasharray="6 4"/>'
        )
    for index, (night, value) in enumerate(series.points):
        if night == tonight:
            parts.append(f'<circle cx="{x(index):.1f}" cy="{y(value):.1f}" r="6" fill="{CURRENT}"/>')
    first, last = series.points[0][0], series.points[-1][0]
    parts += [
        f'<text x="{_PAD}" y="{_H - 10}" font-size="11">{first}</text>',
        f'<text x="{_W - _PAD}" y="{_H - 10}" font-size="11" text-anchor="end">{last}</text>',
        f'<text x="4" y="{_PAD - 12}" font-size="11">{high:.1f}</text>',
        f'<text x="4" y="{_H - _PAD + 14}" font-size="11">{low:.1f}</text>',
        "</svg>",
    ]
    return f"<figure>{''.join(parts)}<figcaption>{caption}</figcaption></figure>"
