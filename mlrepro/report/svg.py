"""Inline SVG line charts: the report must open offline, so no plotting library or CDN."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from markupsafe import Markup, escape

PALETTE = ("#2458b3", "#c62828", "#1a7f37", "#b26a00", "#6a3d9a", "#00838f", "#ad1457", "#5d4037",
           "#455a64", "#7cb342")

Point = tuple[float, float]


def _ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / n
    step = 10 ** math.floor(math.log10(raw))
    step *= next(m for m in (1, 2, 5, 10) if step * m >= raw)
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(int((hi - first) / step + 1e-9) + 1)]


def _fmt(v: float) -> str:
    return f"{v:.4g}"


def line_chart(
    series: Mapping[str, Sequence[Point]],
    *,
    title: str,
    x_label: str,
    y_label: str,
    hlines: Sequence[tuple[float, str]] = (),
    vlines: Sequence[tuple[float, str]] = (),
    width: int = 640,
    height: int = 300,
    markers: bool = True,
) -> Markup:
    """A chart of ``series`` (label -> points) with optional horizontal/vertical reference lines."""
    points = [p for pts in series.values() for p in pts if p[1] is not None and math.isfinite(p[1])]
    legend = 1 < len(series) <= 12
    left, right, top, bottom = 56, 12 + (170 if legend else 0), 26, 40
    pw, ph = width - left - right, height - top - bottom
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title)}">',
             f'<text x="{left}" y="16" font-weight="600">{escape(title)}</text>']
    if not points:
        parts.append(f'<text x="{left}" y="{top + ph / 2}">no data</text></svg>')
        return Markup("".join(parts))
    xs = [p[0] for p in points] + [v for v, _ in vlines]
    ys = [p[1] for p in points] + [v for v, _ in hlines]
    x0, x1, y0, y1 = min(xs), max(xs), min(ys), max(ys)
    if x1 == x0:
        x0, x1 = x0 - 1, x1 + 1
    if y1 == y0:
        y0, y1 = y0 - 0.5, y1 + 0.5
    pad = (y1 - y0) * 0.05
    y0, y1 = y0 - pad, y1 + pad

    def sx(x: float) -> float:
        return left + (x - x0) / (x1 - x0) * pw

    def sy(y: float) -> float:
        return top + ph - (y - y0) / (y1 - y0) * ph

    for t in _ticks(y0, y1):
        parts.append(f'<line x1="{left}" x2="{left + pw}" y1="{sy(t):.1f}" y2="{sy(t):.1f}" stroke="#eceff4"/>'
                     f'<text x="{left - 6}" y="{sy(t) + 4:.1f}" text-anchor="end">{_fmt(t)}</text>')
    for t in _ticks(x0, x1):
        parts.append(f'<text x="{sx(t):.1f}" y="{top + ph + 16}" text-anchor="middle">{_fmt(t)}</text>')
    parts.append(f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#c0c6d0"/>')
    parts.append(f'<text x="{left + pw / 2}" y="{height - 6}" text-anchor="middle">{escape(x_label)}</text>')
    parts.append(f'<text transform="translate(14 {top + ph / 2}) rotate(-90)" text-anchor="middle">'
                 f'{escape(y_label)}</text>')
    for value, label in hlines:
        parts.append(f'<line x1="{left}" x2="{left + pw}" y1="{sy(value):.1f}" y2="{sy(value):.1f}" '
                     f'stroke="#888" stroke-dasharray="5 4"><title>{escape(label)}</title></line>'
                     f'<text x="{left + pw - 4}" y="{sy(value) - 4:.1f}" text-anchor="end" fill="#666">'
                     f'{escape(label)}</text>')
    for value, label in vlines:
        parts.append(f'<line x1="{sx(value):.1f}" x2="{sx(value):.1f}" y1="{top}" y2="{top + ph}" '
                     f'stroke="#999" stroke-dasharray="2 3"><title>{escape(label)}</title></line>')
    for i, (label, pts) in enumerate(series.items()):
        color = PALETTE[i % len(PALETTE)]
        good = [(x, y) for x, y in pts if y is not None and math.isfinite(y)]
        if not good:
            continue
        path = " ".join(f"{'M' if j == 0 else 'L'}{sx(x):.1f},{sy(y):.1f}" for j, (x, y) in enumerate(good))
        parts.append(f'<path d="{path}" fill="none" stroke="{color}" stroke-width="1.5">'
                     f'<title>{escape(label)}</title></path>')
        if markers and len(good) <= 60:
            parts.extend(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="2.5" fill="{color}">'
                         f'<title>{escape(label)}: {_fmt(x)}, {_fmt(y)}</title></circle>' for x, y in good)
    if legend:
        for i, label in enumerate(series):
            x, y = left + pw + 10, top + 8 + i * 14
            parts.append(f'<rect x="{x}" y="{y - 5}" width="12" height="3" fill="{PALETTE[i % len(PALETTE)]}"/>'
                         f'<text x="{x + 16}" y="{y}" font-size="10">{escape(label)}</text>')
    parts.append("</svg>")
    return Markup("".join(parts))
