"""The public site of every published night, built from the release store alone (`spark-nightly site --out DIR`):
the nights with their verdicts and commits, each entry's verdict night by night, each cell's trend with its noise
band and the build it was last paired against marked, and a page of evidence per night. Static HTML with inline SVG:
no script, no network, ready for GitHub Pages."""

from __future__ import annotations

import hashlib
import html
import json
import shutil
import statistics
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.errors import StoreContentError
from pipeline.infra.releases import ReleaseStore
from pipeline.outcome import CellNumbers, cells_of
from pipeline.progress import Say, quiet
from pipeline.stages.release.publish import MANIFEST, MANIFEST_SCHEMA, parse_store_json, read_index
from pipeline.status import STATUS_COLOURS

COLOURS = STATUS_COLOURS
LINE, BAND, REFERENCE, A_BUILD = "#0969da", "#ddf4ff", "#8250df", "#bf3989"  # a browser test looks for these
_W, _H, _PAD = 520, 180, 36
MAD_TO_SD = 1.4826  # the MAD of a normal sample times this is its standard deviation
BAND_SDS = 3.0


@dataclass(frozen=True)
class PublishedNight:
    """One published night: its tag and the manifest its release carries (checked against the store's index)."""

    tag: str
    manifest: Mapping[str, Any]

    @property
    def entries(self) -> dict[str, Mapping[str, Any]]:
        return {str(e["id"]): e for e in self.manifest.get("entries", [])}


def read_nights(store: ReleaseStore, *, say: Say = quiet) -> list[PublishedNight]:
    """Every night the store's index lists, oldest first, each manifest's sha256 checked against the index."""
    index = read_index(store)
    releases = {r.tag: r for r in store.releases() if not r.draft}
    nights = []
    for listed in index["nights"]:
        release = releases.get(listed["tag"])
        asset = next((a for a in release.assets if a.name == MANIFEST), None) if release else None
        if release is None or asset is None:
            say(f"site: {listed['tag']} is in the index but its manifest is not in the store; left out")
            continue
        with tempfile.TemporaryDirectory(prefix="spark-nightly-site-") as scratch:
            path = Path(scratch) / MANIFEST
            store.download(release, asset, path)
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            if digest != listed["manifest_sha256"]:
                raise StoreContentError(f"{MANIFEST} of {listed['tag']} has sha256 {digest}, the index says otherwise")
            manifest = parse_store_json(path, f"{MANIFEST} of {listed['tag']}", MANIFEST_SCHEMA)
        nights.append(PublishedNight(listed["tag"], manifest))
    return nights


def build_site(
    nights: Sequence[PublishedNight], out: Path, *, release_url: Callable[[str], str] | None = None
) -> list[Path]:
    """index.html and one page per night (with its manifest beside it) in `out`; the files written."""
    out.mkdir(parents=True, exist_ok=True)
    pages = out / "nights"
    if pages.exists():
        shutil.rmtree(pages)
    pages.mkdir()
    written = []
    for night in nights:
        folder = pages / night.tag
        folder.mkdir()
        (folder / MANIFEST).write_text(json.dumps(dict(night.manifest), indent=2, sort_keys=True) + "\n")
        (folder / "index.html").write_text(_night_page(night, release_url))
        written += [folder / "index.html", folder / MANIFEST]
    (out / "index.html").write_text(_index_page(nights))
    (out / ".nojekyll").write_text("")  # GitHub Pages serves the files as they are
    return [out / "index.html", *written]


def _page(title: str, body: str) -> str:
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{html.escape(title)}</title>
<style>body{{font-family:sans-serif;margin:24px;color:#1f2328}}table{{border-collapse:collapse;margin-bottom:16px}}
td,th{{border:1px solid #d0d7de;padding:4px 8px;text-align:left;font-size:14px}}
figure{{display:inline-block;margin:8px}}figcaption{{font-size:13px}}.s{{color:#fff;font-weight:bold;text-align:center}}code{{font-size:13px}}</style></head>
<body>{body}</body></html>
"""


def _index_page(nights: Sequence[PublishedNight]) -> str:
    newest = list(reversed(nights))
    if not nights:
        return _page("spark-nightly", "<h1>spark-nightly</h1><p>No night has been published yet.</p>")
    rows = "\n".join(_night_row(n) for n in newest)
    body = f"""<h1>spark-nightly: every published night</h1>
<p>{_count_of(len(nights), "night")}, newest first: {html.escape(newest[0].tag)} is the latest. Each links to its
evidence.</p>
<h2>Nights</h2>
<table id="nights"><tr><th>night</th><th>verdict</th><th>commits</th><th>entries</th></tr>
{rows}
</table>
<h2>Each entry, night by night</h2>
{_grid(newest)}
<h2>Trends</h2>
<p>Each cell's tokens/s night by night; <span style="background:{BAND}">band: the nights' median &plusmn; 3 noise
SDs (1.4826 &times; MAD)</span>; <span style="color:{REFERENCE}">dashed: the reference</span>;
<span style="color:{A_BUILD}">diamond: the build the latest night was paired against (A)</span>.</p>
{"".join(_trends(nights))}"""
    return _page("spark-nightly: every published night", body)


def _count_of(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def _night_row(night: PublishedNight) -> str:
    manifest = night.manifest
    commits = ", ".join(
        f"{html.escape(s['name'])} <code>{html.escape(str(s.get('main_commit', s['commit']))[:12])}</code>"
        for s in (manifest.get("plan") or {}).get("sources", [])
    )
    counts: dict[str, int] = {}
    for entry in manifest.get("entries", []):
        counts[entry["status"]] = counts.get(entry["status"], 0) + 1
    summary = ", ".join(f"{count} {status}" for status, count in sorted(counts.items()))
    verdict = str(manifest.get("verdict", "PASS"))
    link = f'<a href="nights/{html.escape(night.tag)}/">{html.escape(night.tag)}</a>'
    return (
        f"<tr><td>{link}</td>{_status_cell(verdict)}"
        f"<td>{commits or 'from pip'}</td><td>{html.escape(summary)}</td></tr>"
    )


def _grid(newest: Sequence[PublishedNight]) -> str:
    ids = sorted({entry for night in newest for entry in night.entries})
    head = "".join(f"<th>{html.escape(n.tag.removeprefix('nightly-'))}</th>" for n in newest)
    rows = []
    for entry_id in ids:
        cells = []
        for night in newest:
            entry = night.entries.get(entry_id)
            if entry is None:
                cells.append("<td></td>")
                continue
            status = str(entry["status"])
            cells.append(_status_cell(status, title=str(entry.get("reason", ""))))
        rows.append(f"<tr><td>{html.escape(entry_id)}</td>{''.join(cells)}</tr>")
    return f'<table id="grid"><tr><th>entry</th>{head}</tr>\n' + "\n".join(rows) + "\n</table>"


def _trends(nights: Sequence[PublishedNight]) -> list[str]:
    series: dict[tuple[str, str], list[tuple[str, CellNumbers]]] = {}
    for night in nights:
        for entry_id, entry in night.entries.items():
            for cell, found in cells_of(entry.get("numbers") or {}).items():
                if found.deciding is not None:
                    series.setdefault((entry_id, cell), []).append((str(night.manifest["night"]), found))
    return [_chart(entry_id, cell, points) for (entry_id, cell), points in sorted(series.items())]


def _chart(entry_id: str, cell: str, points: Sequence[tuple[str, CellNumbers]]) -> str:
    """One cell's values, the noise band around their median, the latest reference, the A build's night marked."""
    caption = html.escape(f"{entry_id} {cell} (tokens/s)")
    values = [value for _, found in points if (value := found.deciding) is not None]
    centre = statistics.median(values)
    sd = MAD_TO_SD * statistics.median(abs(v - centre) for v in values) if len(values) > 2 else 0.0
    band = (centre - BAND_SDS * sd, centre + BAND_SDS * sd)
    latest = points[-1][1]
    reference = latest.ref
    span_values = [*values, *band, *([reference] if reference else [])]
    low, high = min(span_values), max(span_values)
    pad = ((high - low) or max(abs(high), 1.0) * 0.1) * 0.1
    low, high = low - pad, high + pad
    count = len(points)

    def x(index: int) -> float:
        return _PAD + (_W - 2 * _PAD) * (index / (count - 1) if count > 1 else 0.5)

    def y(value: float) -> float:
        return _H - _PAD + (value - low) / (high - low) * (2 * _PAD - _H)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{_H}" role="img" aria-label="{caption}">',
        f'<rect x="0" y="0" width="{_W}" height="{_H}" fill="#ffffff" stroke="#d0d7de"/>',
        f'<rect x="{_PAD}" y="{y(band[1]):.1f}" width="{_W - 2 * _PAD}" height="{max(y(band[0]) - y(band[1]), 1):.1f}"'
        f' fill="{BAND}"/>',
        f'<polyline points="{" ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(values))}" fill="none" '
        f'stroke="{LINE}" stroke-width="3"/>',
        # a point per night: a line needs two, and a store's first night must show its value too
        *(f'<circle cx="{x(i):.1f}" cy="{y(v):.1f}" r="5" fill="{LINE}"/>' for i, v in enumerate(values)),
    ]
    if reference:
        parts.append(
            f'<line x1="{_PAD}" x2="{_W - _PAD}" y1="{y(reference):.1f}" y2="{y(reference):.1f}" '
            f'stroke="{REFERENCE}" stroke-width="2" stroke-dasharray="6 4"/>'
        )
    a_night = latest.a_night
    for index, (night, _) in enumerate(points):
        if night == a_night:
            cx, cy = x(index), y(values[index])
            parts.append(
                f'<polygon points="{cx:.1f},{cy - 9:.1f} {cx + 9:.1f},{cy:.1f} {cx:.1f},{cy + 9:.1f} '
                f'{cx - 9:.1f},{cy:.1f}" fill="{A_BUILD}"><title>A: the build of {html.escape(night)}</title></polygon>'
            )
    parts += [
        f'<text x="{_PAD}" y="{_H - 10}" font-size="11">{html.escape(points[0][0])}</text>',
        f'<text x="{_W - _PAD}" y="{_H - 10}" font-size="11" text-anchor="end">{html.escape(points[-1][0])}</text>',
        f'<text x="4" y="{_PAD - 12}" font-size="11">{high:.1f}</text>',
        f'<text x="4" y="{_H - _PAD + 14}" font-size="11">{low:.1f}</text>',
        "</svg>",
    ]
    return f"<figure>{''.join(parts)}<figcaption>{caption}</figcaption></figure>"


def _night_page(night: PublishedNight, release_url: Callable[[str], str] | None) -> str:
    manifest = night.manifest
    rows = "\n".join(
        f"<tr><td>{html.escape(str(e['id']))}</td>{_status_cell(str(e['status']))}"
        f"<td>{html.escape(str(e.get('stage', '')))}</td><td>{html.escape(str(e.get('reason', '')))}</td></tr>"
        for e in manifest.get("entries", [])
    )
    wheels = "\n".join(
        f"<tr><td><code>{html.escape(w['name'])}</code></td><td><code>{html.escape(w['sha256'])}</code></td></tr>"
        for w in manifest.get("wheels", [])
    )
    sources = "\n".join(
        f"<tr><td>{html.escape(s['name'])}</td>"
        f"<td><code>{html.escape(str(s.get('main_commit', s['commit'])))}</code></td>"
        f"<td><code>{html.escape(s['commit'])}</code></td></tr>"
        for s in (manifest.get("plan") or {}).get("sources", [])
    )
    release = (
        f'<a href="{html.escape(release_url(night.tag), quote=True)}">the release</a> (wheels, lock, evidence), '
        if release_url
        else ""
    )
    body = f"""<p><a href="../../">all nights</a></p>
<h1>spark-nightly {html.escape(night.tag)}: {html.escape(str(manifest.get("verdict", "PASS")))}</h1>
<p>Night {html.escape(str(manifest["night"]))}, run <code>{html.escape(str(manifest["run_id"]))}</code>, profile
<code>{html.escape(str(manifest["profile"]))}</code>. Evidence: {release}<a href="{MANIFEST}">{MANIFEST}</a>.</p>
<h2>Entries</h2>
<table><tr><th>entry</th><th>verdict</th><th>stage</th><th>reason</th></tr>
{rows}
</table>
<h2>Sources</h2>
<table><tr><th>source</th><th>main</th><th>built</th></tr>
{sources or "<tr><td colspan='3'>installed from pip: nothing built</td></tr>"}
</table>
<h2>Wheels</h2>
<table><tr><th>wheel</th><th>sha256</th></tr>
{wheels}
</table>
<p>Install it: <code>spark-nightly fetch --night {html.escape(night.tag)} --dest nights</code>, then
<code>spark-nightly install --from nights/{html.escape(night.tag)} --venv .venv-vllm</code>.</p>"""
    return _page(f"spark-nightly {night.tag}", body)


def _status_cell(status: str, *, title: str = "") -> str:
    """A table cell of a status in its colour; `title` (an entry's reason) shows on hover."""
    hover = f" title='{html.escape(title, quote=True)}'" if title else ""
    return f"<td class='s'{hover} style='background:{COLOURS.get(status, '#6e7781')}'>{html.escape(status)}</td>"
