"""PNG waterfall: one representative turn per mode, stages as bars on a shared time axis."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pipeline.events import Event
from services.timeline import marks, stage_spans, work_end

COLORS = {"asr": "#6c8ebf", "llm": "#d79b00", "tts": "#82b366", "playback": "#b85450"}


def draw(turns: Sequence[tuple[str, Sequence[Event], float | None]], path: Path) -> Path:
    """``turns``: (title, events, first_audio_ms) per row group; writes ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(turns), 1, figsize=(10, 1.6 + 1.5 * len(turns)),
                             sharex=True, squeeze=False)
    all_spans = [stage_spans(events) for _, events, _ in turns]
    # The axis ends a little after the last model work; playback's end is written.
    ends = [end for spans in all_spans if (end := work_end(spans)) is not None]
    x_max = max(ends, default=1.0) * 1.3 + 0.2
    for ax, spans, (title, events, first_audio_ms) in zip(axes[:, 0], all_spans, turns,
                                                          strict=True):
        stages = list(spans)
        marked = marks(events)
        for y, stage in enumerate(stages):
            bars = [(a, b - a) for a, b in spans[stage]]
            ax.broken_barh(bars, (y - 0.35, 0.7), facecolors=COLORS[stage])
        for t in marked["sentence"]:
            ax.plot([t, t], [stages.index("llm") - 0.4, stages.index("llm") + 0.4],
                    color="black", lw=1)
        for t in marked["barge-in"]:
            ax.axvline(t, color="red", ls=":", lw=1.5)
        if first_audio_ms is not None:
            ax.axvline(first_audio_ms / 1000, color="black", ls="--", lw=1)
            ax.annotate(f"first audio {first_audio_ms:.0f} ms",
                        (first_audio_ms / 1000, len(stages) - 0.5),
                        xytext=(4, 0), textcoords="offset points", fontsize=9)
        for _, b in spans["playback"]:
            if b > x_max:
                ax.annotate(f"playing until {b:.1f} s →", (x_max, stages.index("playback")),
                            xytext=(-4, 0), textcoords="offset points", ha="right",
                            va="center", fontsize=9, color="white")
        ax.set_xlim(-0.05, x_max)
        ax.set_yticks(range(len(stages)), stages)
        ax.set_ylim(-0.6, len(stages) - 0.2)
        ax.invert_yaxis()
        ax.set_title(title, fontsize=10, loc="left")
        ax.grid(axis="x", alpha=0.3)
    axes[-1, 0].set_xlabel("seconds since the user stopped speaking "
                           "(ticks on llm = sentences released)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
