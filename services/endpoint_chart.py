"""PNG of the false-endpoint trade (scripts/bench_endpoint.py): one point per condition.

x: the wait after the last word on whole questions (the mean, ms), what every turn pays
(the mean, not the p50: these waits fall in two groups, ~600 and >= 1000 ms, and the p50
jumps between them when one question crosses);
y: false endpoints, % of the paused utterances (the assistant answering half a question).
A condition down and to the left is better on both. Points of one series (the end held
until the reply is ready N ms after the pause; the --complete-ms trade) are joined in the
order given, and the target false-endpoint rate is a horizontal line.

matplotlib is imported inside the functions (Agg backend), as in services/waterfall.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TARGET_PCT = 2.0  # the target: at most 2 % false endpoints
SERIES_COLORS = ("#d79b00", "#82b366", "#9673a6", "#b85450")


@dataclass(frozen=True)
class EndpointPoint:
    label: str  # the condition, as the report's table names it
    tag: str  # the short name written beside the point
    false_pct: float  # false endpoints, % of the paused utterances
    wait_ms: float | None  # None: no whole question ended (nothing to place on x)
    series: str | None = None  # points sharing a series are joined by a line, in order
    highlight: bool = False  # e.g. the shipped default: drawn larger


def figure(points: Sequence[EndpointPoint], title: str = "") -> Any:
    """The matplotlib Figure (caller closes it). Points with no wait are listed, not drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # (point, its x): the points with a wait; the others are listed under the axes.
    placed = [(p, p.wait_ms) for p in points if p.wait_ms is not None]
    fig, ax = plt.subplots(figsize=(10, 6.5), dpi=110)
    series = list(dict.fromkeys(p.series for p, _ in placed if p.series is not None))
    colors = {s: SERIES_COLORS[i % len(SERIES_COLORS)] for i, s in enumerate(series)}
    for s in series:
        members = [(x, p.false_pct) for p, x in placed if p.series == s]
        ax.plot([x for x, _ in members], [y for _, y in members], color=colors[s], lw=1.5,
                zorder=2, label=s)
    ax.scatter([x for _, x in placed], [p.false_pct for p, _ in placed],
               s=[90 if p.highlight else 30 for p, _ in placed],
               c=[colors[p.series] if p.series is not None
                  else "#b85450" if p.highlight else "#6c8ebf" for p, _ in placed],
               edgecolors="black", linewidths=0.5, zorder=3)
    ax.axhline(TARGET_PCT, color="red", ls="--", lw=1,
               label=f"target: at most {TARGET_PCT:g} % false endpoints")
    ax.set_xlabel("wait after the last word on whole questions (mean, ms)")
    ax.set_ylabel("false endpoints (% of the paused utterances)")
    ax.set_ylim(bottom=-1)
    ax.margins(x=0.06)
    ax.set_title(title or "False endpoints against the wait: down and left is better",
                 fontsize=10, loc="left")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper right")
    missing = [p.tag for p in points if p.wait_ms is None]
    if missing:
        fig.text(0.01, 0.005, "not drawn (no whole question ended): " + ", ".join(missing),
                 fontsize=7)
    # Conditions that land on the same spot share one label rather than overprinting.
    spots: dict[tuple[float, float], list[str]] = {}
    for p, x in placed:
        spots.setdefault((x, p.false_pct), []).append(p.tag)
    _label(fig, ax, [(x, y, ", ".join(tags)) for (x, y), tags in spots.items()])
    return fig


# Where a label may sit beside its point (offset in points, horizontal alignment), in order
# of preference: the first that overlaps no label already placed is taken.
_PLACES = [((5, 2), "left"), ((5, -9), "left"), ((-5, 2), "right"), ((-5, -9), "right"),
           ((5, 11), "left"), ((-5, 11), "right"), ((5, -18), "left"), ((-5, -18), "right"),
           ((5, 20), "left"), ((-5, 20), "right"), ((5, -27), "left"), ((-5, -27), "right")]


def _label(fig: Any, ax: Any, labels: list[tuple[float, float, str]]) -> None:
    """Annotates each point, moving a label round its point to keep clear of the others."""
    fig.tight_layout()  # the final layout, so that the extents measured below hold
    renderer = fig.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    taken: list[Any] = []
    for x, y, text in sorted(labels, key=lambda label: (-label[1], label[0])):
        best: tuple[int, Any] | None = None
        for offset, ha in _PLACES:
            note = ax.annotate(text, (x, y), xytext=offset, textcoords="offset points",
                               fontsize=7, ha=ha, va="bottom")
            box = note.get_window_extent(renderer).expanded(1.05, 1.1)
            clashes = sum(box.overlaps(other) for other in taken)
            if not (frame.x0 <= box.x0 and box.x1 <= frame.x1 and box.y1 <= frame.y1):
                clashes += len(labels)  # outside the axes: cut off, worse than overlapping
            if best is None or clashes < best[0]:
                if best is not None:
                    best[1].remove()
                best = (clashes, note)
            else:
                note.remove()
            if clashes == 0:
                break
        assert best is not None
        taken.append(best[1].get_window_extent(renderer).expanded(1.05, 1.1))


def draw(points: Sequence[EndpointPoint], path: Path, title: str = "") -> Path:
    """Writes the figure to ``path`` (a PNG)."""
    fig = figure(points, title)  # first: it selects the Agg backend
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
