"""Figures for the lab report (matplotlib, Agg backend: no display on these machines).

matplotlib is imported inside each function: it takes ~0.5 s to import and only the
commands that draw need it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def prefill(section: dict[str, Any], path: Path) -> Path:
    """Cold TTFT against prompt tokens, every run as a point, with the least-squares line."""
    plt = _pyplot()
    points = [p for p in section["points"] if p["prompt_n"] is not None and p["ttft_ms"]]
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=110)
    for docs in sorted({p["docs"] for p in points}):
        group = [p for p in points if p["docs"] == docs]
        ax.scatter([p["prompt_n"] for p in group], [p["ttft_ms"] for p in group],
                   label=f"{docs} documents", zorder=3)
    if section.get("ms_per_token") is not None and points:
        xs = [0, max(p["prompt_n"] for p in points) * 1.05]
        ys = [section["intercept_ms"] + section["ms_per_token"] * x for x in xs]
        ax.plot(xs, ys, color="grey", linestyle="--",
                label=f"fit on the fastest run per length: {section['ms_per_token']:.2f} "
                f"ms/token, r² {section['r2']:.3f}")
    ax.set_xlabel("prompt tokens (prompt_n)")
    ax.set_ylabel("time to first token (ms)")
    ax.set_title("Cold TTFT grows with prompt length")
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend()
    return _save(plt, fig, path)


def first_sentence(section: dict[str, Any], path: Path) -> Path:
    """First sentence, TTFT and total against max_tokens (medians, runs as faint points)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=110)
    summary = section["by_max_tokens"]
    xs = [s["max_tokens"] for s in summary]
    for key, label in (("total_ms", "whole reply"), ("first_sentence_ms", "first sentence"),
                       ("ttft_ms", "first token")):
        ax.plot(xs, [s[key] for s in summary], marker="o", label=label)
        runs = [r for r in section["runs"] if r[key] is not None]
        ax.scatter([r["max_tokens"] for r in runs], [r[key] for r in runs], alpha=0.25, s=12)
    ax.set_xscale("log", base=2)
    ax.set_xticks(xs, [str(x) for x in xs])
    ax.set_xlabel("max_tokens")
    ax.set_ylabel("ms since request")
    ax.set_title("The first sentence does not wait for max_tokens; the reply does")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend()
    return _save(plt, fig, path)


def barge_in(section: dict[str, Any], path: Path) -> Path:
    """Two timelines: hang up (slot freed at once) vs stop reading (slot busy to the end)."""
    plt = _pyplot()
    close, hold = section["close"], section["hold"]
    fig, ax = plt.subplots(figsize=(7.0, 2.6), dpi=110)
    rows = [
        ("close", close.get("closed_at_ms"), close.get("slot_idle_ms"), "tab:green"),
        ("hold", hold.get("stopped_reading_ms"), hold.get("slot_idle_ms"), "tab:red"),
    ]
    for y, (name, stop_ms, idle_ms, colour) in enumerate(rows):
        if stop_ms is None or idle_ms is None:
            continue
        ax.barh(y, stop_ms, color="tab:blue", alpha=0.6,
                label="client reading" if y == 0 else None)
        ax.barh(y, max(idle_ms - stop_ms, 1.0), left=stop_ms, color=colour,
                label=f"{name}: server still busy")
        ax.annotate(f"{idle_ms - stop_ms:.0f} ms", (idle_ms, y), xytext=(4, -4),
                    textcoords="offset points")
    ax.set_yticks([0, 1], ["close", "hold"])
    ax.set_xlabel("ms since request")
    ax.set_title("Barge-in: hanging up frees the slot; not reading does not")
    ax.grid(axis="x", alpha=0.3)
    ax.legend(loc="lower right", fontsize="small")
    return _save(plt, fig, path)


def _save(plt: Any, fig: Any, path: Path) -> Path:
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
