"""The false-endpoint picture (services/endpoint_chart.py) and scripts/bench_endpoint.py's
report from a saved endpoint.json (--report-only), on hand-made figures: no models run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from script_module import load_script

from services.endpoint_chart import TARGET_PCT, EndpointPoint, draw, figure

ROOT = Path(__file__).resolve().parent.parent

HELD = "the default, end held until the reply is ready N ms"
POINTS = [
    EndpointPoint("fixed 600 ms", "fixed 600", 31.25, 600.0),
    EndpointPoint("fixed 1000 ms", "fixed 1000", 6.25, 1000.0),
    EndpointPoint("policy 500/1000/1100 (the default)", "500/1000 (default)", 8.3, 520.0,
                  highlight=True),
    EndpointPoint("policy 250/800/1100", "250/800", 8.3, 520.0),  # same spot as the default
    EndpointPoint("held 300", "held 300", 4.2, 540.0, HELD),
    EndpointPoint("held 450", "held 450", 2.1, 560.0, HELD),
    EndpointPoint("held 750", "held 750", 0.0, 600.0, HELD),
    EndpointPoint("complete 600", "complete 600", 3.1, 620.0, "--complete-ms N"),
    EndpointPoint("complete 900", "complete 900", 0.0, 920.0, "--complete-ms N"),
    EndpointPoint("everything ended early", "broken", 100.0, None),
]


def placed_points(ax: Any) -> list[tuple[float, float]]:
    return [tuple(xy) for c in ax.collections for xy in c.get_offsets()]


def test_one_point_per_condition_series_joined_and_the_target_line() -> None:
    import matplotlib.pyplot as plt

    fig = figure(POINTS)
    try:
        (ax,) = fig.axes
        points = placed_points(ax)
        assert len(points) == 9  # the one without a wait is listed below, not placed
        assert (1000.0, 6.25) in points and (920.0, 0.0) in points
        lines = {line.get_label(): line for line in ax.get_lines()}
        assert list(lines[HELD].get_xdata()) == [540.0, 560.0, 600.0]
        assert list(lines["--complete-ms N"].get_ydata()) == [3.1, 0.0]
        target = [line for line in ax.get_lines() if list(line.get_ydata()) == [TARGET_PCT] * 2]
        assert len(target) == 1
        labels = [t.get_text() for t in ax.texts]
        # Two conditions on one spot share a label; every placed condition is named once.
        assert "500/1000 (default), 250/800" in labels
        assert len(labels) == 8
        assert {"fixed 600", "held 750", "complete 900"} <= set(labels)
        footnote = " ".join(t.get_text() for t in fig.texts)
        assert "broken" in footnote
        assert ax.get_xlabel().startswith("wait after the last word")
    finally:
        plt.close(fig)


def test_draw_writes_a_png(tmp_path: Path) -> None:
    path = draw(POINTS, tmp_path / "sub" / "endpoint.png")
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


def bench_endpoint() -> ModuleType:
    """scripts/bench_endpoint.py as a module (its dataclasses want it in sys.modules)."""
    return load_script("bench_endpoint")


def test_every_condition_gets_a_short_tag_and_its_series() -> None:
    bench = bench_endpoint()
    points = [bench.point(c.label, 0.0, 500.0) for c in bench.conditions()]
    tags = [p.tag for p in points]
    assert len(set(tags)) == len(tags), tags  # no two conditions look alike on the picture
    assert all(len(t) <= 30 for t in tags), tags
    held = [p for p in points if p.series is not None and p.tag.startswith("held ")]
    complete = [p for p in points if p.tag.startswith("complete ") and p.series]
    learns = [p for p in points if p.tag.startswith("learns ") and p.series]
    assert [p.tag for p in learns] == [f"learns o1, held {ms}" for ms in bench.LEARN_READY_MS]
    pause = [p for p in points if p.tag.startswith("pause ")]
    assert [p.tag for p in held] == [f"held {ms}" for ms in bench.READY_MS]
    assert len(complete) == 4 and len({p.series for p in complete}) == 1
    assert [p.tag for p in pause] == [f"pause {ms}, ready {bench.PIPELINE_MS}"
                                      for ms in bench.PAUSES_TRIED_MS]
    assert len({p.series for p in pause}) == 1 and pause[0].series not in {
        p.series for p in held + complete}
    assert sum(p.highlight for p in points) == 1
    assert "fixed 600" in tags and "250/800 text" in tags


def result(split: str, variant: str, false: bool, wait: float | None) -> dict[str, object]:
    return {"name": "x", "split": split, "variant": variant, "text": "a | b",
            "pause_ms": 500, "false_endpoint": false, "endpoint_wait_ms": wait,
            "judged": []}


def test_report_only_redraws_from_endpoint_json(tmp_path: Path) -> None:
    rows = [result("test", "separate", True, 100.0), result("test", "ssml", False, 700.0),
            result("test", "separate", False, 650.0), result("test", "ssml", False, 640.0),
            result("test", "whole", False, 600.0), result("test", "whole", False, 800.0),
            result("tune", "whole", False, 300.0)]
    saved = {"corpus": {s: {"separate": 2, "ssml": 2, "whole": 2} for s in ("tune", "test")},
             "results": {"fixed 600 ms": rows,
                         "the default, held until the reply is ready 350 ms after the pause":
                         rows}}
    (tmp_path / "endpoint.json").write_text(json.dumps(saved))
    bench = bench_endpoint()
    (fixed, held) = bench.summary(saved["results"], "test")
    assert (fixed.tag, fixed.false_pct, fixed.wait_ms) == ("fixed 600", 25.0, 700.0)
    assert held.series is not None and held.tag == "held 350"

    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_endpoint.py"),
                          "--report-only", str(tmp_path)], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    md = (tmp_path / "endpoint.md").read_text()
    assert "](endpoint.png)" in md and "| fixed 600 ms | 1/2 (50 %)" in md
    assert (tmp_path / "endpoint.png").read_bytes()[:4] == b"\x89PNG"
    missing = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_endpoint.py"),
                              "--report-only", str(tmp_path / "nope")],
                             capture_output=True, text=True, timeout=120)
    assert missing.returncode == 2 and "no " in missing.stderr
