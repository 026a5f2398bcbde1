"""The page's hands-free endpointing (services/static/endpointer.js), run in node.

Frame by frame, as capture.js feeds it: when a gap (Whisper starts) and a pause (a
speculative turn starts) are reported to the server, when the voice coming back is, and
which silence ends the utterance (the server's endpoint for the current pause, or the
700 ms fallback; not before the server's speculative reply is ready while it holds the
end, up to 3 s). Pure logic, no timing: each scenario is a list of
steps, the answer the list of messages the page would send.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

ENDPOINTER = Path(__file__).resolve().parent.parent / "services" / "static" / "endpointer.js"

# Steps: ["voice", n] / ["quiet", n] frames of 20 ms, ["endpoint", pause, wait_ms],
# ["hold", pause], ["ready", pause] (the server's messages), ["speculate", bool],
# ["gap_ms", ms]. Every
# non-null answer of frame() is collected, with the result of endpoint() / hold() /
# ready() as {"endpoint": accepted} and so on.
RUNNER = """
import { Endpointer } from "./endpointer.mjs";
const steps = JSON.parse(process.argv[2]);
const ep = new Endpointer();
ep.reset(3);
const out = [];
for (const [kind, a, b] of steps) {
  if (kind === "speculate") ep.speculate = a;
  else if (kind === "gap_ms") ep.gapMs = a;
  else if (kind === "endpoint") out.push({ endpoint: ep.endpoint(a, b) });
  else if (kind === "hold") out.push({ hold: ep.hold(a) });
  else if (kind === "ready") out.push({ ready: ep.ready(a) });
  else for (let i = 0; i < a; i++) {
    const act = ep.frame(kind === "voice");
    if (act) out.push(act);
    if (act && act.type === "end") break;
  }
}
console.log(JSON.stringify(out));
"""


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    found = shutil.which("node") or shutil.which("nodejs")
    if found is None:
        pytest.skip("node is not installed (the browser test runs the same code in Chromium)")
    where = tmp_path_factory.mktemp("endpointer")
    (where / "endpointer.mjs").write_text(ENDPOINTER.read_text())  # .mjs: an ES module
    (where / "run.mjs").write_text(RUNNER)
    return found, where


def run(node: tuple[str, Path], steps: list[list[Any]]) -> list[dict[str, Any]]:
    binary, where = node
    out = subprocess.run([binary, str(where / "run.mjs"), json.dumps(steps)], cwd=where,
                         capture_output=True, text=True, timeout=30, check=True)
    result: list[dict[str, Any]] = json.loads(out.stdout)
    return result


def gap(voiced_ms: int) -> dict[str, Any]:
    """audio.gap after 100 ms of silence; ``voiced_ms``: the onset's 3 frames and the
    voice frames since."""
    return {"type": "audio.gap", "silence_ms": 100, "voiced_ms": voiced_ms}


def pause(n: int, voiced_ms: int) -> dict[str, Any]:
    return {"type": "audio.pause", "pause": n, "silence_ms": 200, "voiced_ms": voiced_ms}


def test_a_pause_is_reported_and_the_servers_endpoint_ends_the_utterance(
        node: tuple[str, Path]) -> None:
    got = run(node, [["voice", 20], ["quiet", 10], ["endpoint", 1, 500], ["quiet", 100]])
    assert got == [gap(460), pause(1, 460),
                   {"endpoint": True},
                   {"type": "end", "trailing_ms": 500, "endpoint_ms": 500}]


def test_a_longer_endpoint_holds_the_utterance_open_past_the_fallback(
        node: tuple[str, Path]) -> None:
    got = run(node, [["voice", 20], ["quiet", 10], ["endpoint", 1, 1100], ["quiet", 100]])
    assert got[-1] == {"type": "end", "trailing_ms": 1100, "endpoint_ms": 1100}


def test_the_voice_coming_back_resumes_and_the_old_endpoint_no_longer_applies(
        node: tuple[str, Path]) -> None:
    got = run(node, [["voice", 20], ["quiet", 16], ["endpoint", 1, 1100], ["voice", 10],
                     ["endpoint", 1, 300],  # late, about the words before the resume
                     ["quiet", 100]])
    assert got == [gap(460), pause(1, 460),
                   {"endpoint": True},
                   {"type": "audio.resume", "pause": 1, "silence_ms": 320},
                   {"endpoint": False},
                   gap(660), pause(2, 660),
                   {"type": "end", "trailing_ms": 700, "endpoint_ms": None}]


def test_an_endpoint_already_passed_ends_at_the_next_frame(node: tuple[str, Path]) -> None:
    got = run(node, [["voice", 20], ["quiet", 30], ["endpoint", 1, 500], ["quiet", 1]])
    assert got[-1] == {"type": "end", "trailing_ms": 620, "endpoint_ms": 500}


def test_no_pause_after_a_short_burst_or_without_speculation(node: tuple[str, Path]) -> None:
    # (nor a gap: tests below)
    burst = run(node, [["voice", 5], ["quiet", 100]])  # 160 ms of voice: a cough
    assert burst == [{"type": "end", "trailing_ms": 700, "endpoint_ms": None}]
    off = run(node, [["speculate", False], ["voice", 40], ["quiet", 100]])
    assert off == [{"type": "end", "trailing_ms": 700, "endpoint_ms": None}]


# --- the gap: Whisper starts on the words so far, before the pause ----------------------
def test_a_gap_is_reported_once_per_silence_before_its_pause(node: tuple[str, Path]) -> None:
    # one gap and one pause in a long silence, however long it lasts
    got = run(node, [["voice", 20], ["quiet", 100]])
    assert got == [gap(460), pause(1, 460),
                   {"type": "end", "trailing_ms": 700, "endpoint_ms": None}]
    # the voice coming back before the pause sends nothing (the server's voiced_ms tells
    # that the next pause is about more words); the next silence has its own gap
    got = run(node, [["voice", 20], ["quiet", 7], ["voice", 5], ["quiet", 7], ["voice", 1],
                     ["quiet", 100]])
    assert got == [gap(460), gap(560), gap(580), pause(1, 580),
                   {"type": "end", "trailing_ms": 700, "endpoint_ms": None}]


def test_no_gap_before_enough_voice_nor_without_speculation(node: tuple[str, Path]) -> None:
    # 160 ms of voice (the onset's 60 and five frames): no gap; 100 more, and there is one
    got = run(node, [["voice", 5], ["quiet", 7], ["voice", 5], ["quiet", 10]])
    assert got == [gap(260), pause(1, 260)]
    assert run(node, [["speculate", False], ["voice", 20], ["quiet", 10]]) == []
    assert run(node, [["gap_ms", 0], ["voice", 20], ["quiet", 10]]) == [pause(1, 460)]


# --- the end held until the server's speculative reply is ready -------------------------
PAUSE_1 = [gap(460), pause(1, 460)]  # after 20 voice frames


def test_a_held_end_outlasts_the_wait_and_ready_ends_it_at_the_next_frame(
        node: tuple[str, Path]) -> None:
    got = run(node, [["voice", 20], ["quiet", 10], ["hold", 1], ["endpoint", 1, 500],
                     ["quiet", 40],  # 1000 ms of silence, past the 500 ms wait: held
                     ["ready", 1], ["quiet", 100]])
    assert got == [*PAUSE_1, {"hold": True}, {"endpoint": True}, {"ready": True},
                   {"type": "end", "trailing_ms": 1020, "endpoint_ms": 500}]


def test_a_reply_ready_before_the_wait_ends_at_the_wait(node: tuple[str, Path]) -> None:
    got = run(node, [["voice", 20], ["quiet", 10], ["hold", 1], ["endpoint", 1, 500],
                     ["quiet", 5], ["ready", 1], ["quiet", 100]])
    assert got[-1] == {"type": "end", "trailing_ms": 500, "endpoint_ms": 500}
    # no endpoint yet: the fallback, the same way
    got = run(node, [["voice", 20], ["quiet", 10], ["hold", 1], ["ready", 1], ["quiet", 100]])
    assert got[-1] == {"type": "end", "trailing_ms": 700, "endpoint_ms": None}


def test_a_held_end_is_taken_after_3_s_of_silence_without_ready(
        node: tuple[str, Path]) -> None:
    got = run(node, [["voice", 20], ["quiet", 10], ["hold", 1], ["endpoint", 1, 500],
                     ["quiet", 1000]])
    assert got[-1] == {"type": "end", "trailing_ms": 3000, "endpoint_ms": 500}
    got = run(node, [["voice", 20], ["quiet", 10], ["hold", 1], ["quiet", 1000]])
    assert got[-1] == {"type": "end", "trailing_ms": 3000, "endpoint_ms": None}


def test_the_voice_coming_back_during_a_hold_resumes_and_clears_it(
        node: tuple[str, Path]) -> None:
    got = run(node, [["voice", 20], ["quiet", 10], ["hold", 1], ["endpoint", 1, 500],
                     ["quiet", 30],  # 800 ms, past the wait, still held
                     ["voice", 10], ["quiet", 100]])
    assert got == [*PAUSE_1, {"hold": True}, {"endpoint": True},
                   {"type": "audio.resume", "pause": 1, "silence_ms": 800},
                   gap(660), pause(2, 660),
                   {"type": "end", "trailing_ms": 700, "endpoint_ms": None}]


def test_hold_and_ready_for_another_pause_are_ignored(node: tuple[str, Path]) -> None:
    # before any pause, and a hold for pause 1 arriving after the voice came back
    got = run(node, [["voice", 20], ["hold", 1], ["quiet", 10], ["voice", 10], ["hold", 1],
                     ["quiet", 100]])
    assert got == [{"hold": False}, *PAUSE_1,
                   {"type": "audio.resume", "pause": 1, "silence_ms": 200}, {"hold": False},
                   gap(660), pause(2, 660),
                   {"type": "end", "trailing_ms": 700, "endpoint_ms": None}]
    # a late ready for pause 1 does not release the hold on pause 2
    got = run(node, [["voice", 20], ["quiet", 10], ["voice", 10], ["quiet", 10], ["hold", 2],
                     ["ready", 1], ["quiet", 1000]])
    assert got[-3:] == [{"hold": True}, {"ready": False},
                        {"type": "end", "trailing_ms": 3000, "endpoint_ms": None}]
