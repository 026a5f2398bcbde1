"""``voice-llm compare --live``: speculation on vs off through the live path.

Unit: the report, the option checks, and the whole command with a fake llama-server (real
HTTP), fake ASR/TTS, the real Silero segmenter and a real sample spoken in real time. Then
one run on the real server, Whisper and Piper.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fake_llm import FakeLlm, Reply
from test_turn import SENTENCES, FakeAsr, FakeTts, tokens

from pipeline.endpoint import EndpointPolicy
from pipeline.live import SpeculationStats
from pipeline.llm_client import LlmClient
from services import compare, compare_live
from services.assistant import Assistant
from services.cli import build_parser
from services.errors import UserError

ROOT = Path(__file__).resolve().parent.parent
SKY = ROOT / "samples" / "03_sky_blue.wav"
TEA = ROOT / "samples" / "04_cup_of_tea.wav"


def live_turn(cond: str, file: str, run: int, from_end: float, endpoint: float,
              speculative: bool) -> dict[str, Any]:
    return {"mode": "streamed", "speculation": cond, "file": file, "run": run,
            "first_audio_from_speech_end_ms": from_end, "endpoint_ms": endpoint,
            "speech_end_ms": 200.0 if speculative else endpoint, "first_audio_ms": 300.0,
            "asr_ms": 100.0, "speculative": speculative, "transcript": "q", "reply": "a.",
            "error": None}


def parse(*argv: str) -> Any:
    return build_parser("compare").parse_args(["compare", *argv])


def test_live_report_per_condition_ratio_and_speculation_counts() -> None:
    turns = [live_turn("on", "a.wav", 1, 600, 250, True),
             live_turn("on", "b.wav", 1, 800, 250, True),
             live_turn("off", "a.wav", 1, 1200, 600, False),
             live_turn("off", "b.wav", 1, 1400, 600, False),
             {**live_turn("off", "c.wav", 1, 1.0, 1.0, False), "error": "no utterance heard"}]
    spec = {("on", 1): SpeculationStats(started=3, confirmed=2, cancelled=1,
                                        cancelled_idle_confirmed=1, saved_ms=[300, 500],
                                        wasted_tokens=12),
            ("on", 2): SpeculationStats(started=1, confirmed=1, saved_ms=[400]),
            ("off", 1): SpeculationStats()}
    report = compare_live.build_live_report(turns, spec, {"pause_ms": 200, "end_silence_ms": 600})
    s = report["summary"]
    assert s["on"]["first_audio_from_speech_end_ms"]["p50"] == 700
    assert s["off"]["first_audio_from_speech_end_ms"]["n"] == 2  # the failed turn left out
    assert s["first_audio_from_speech_end_ratio"] == round(700 / 1300, 3)
    on = s["speculation"]["on"]
    assert (on["started"], on["confirmed"], on["cancelled"], on["cancelled_idle_confirmed"],
            on["wasted_tokens"], on["saved_ms_p50"]) == (4, 3, 1, 1, 12, 400)
    assert s["speculation"]["off"]["started"] == 0
    md = compare_live.live_markdown(report)
    assert "| first_audio_from_speech_end_ms | 700 |" in md
    assert "| cancelled_idle_confirmed | 1 | 0 |" in md
    assert "no utterance heard" in md and "at the pause" in md
    line = compare_live.live_line(turns[0])
    assert "600 ms from speech end" in line and "speculative" in line
    assert line.endswith("tts -")  # not measured: a dash, not "None"
    long_name = {**turns[2], "file": "samples/06_learn_language.wav", "first_sentence_ms": 217.6}
    lines = compare_live.live_line(long_name).splitlines()
    assert len(lines) == 2 and len("[12/12] " + lines[0]) <= 80 and len(lines[1]) <= 80, lines
    assert "1st sentence 218" in lines[1] and lines[0].endswith("at the endpoint")


def test_the_live_waterfall_counts_from_the_end_of_speech() -> None:
    from pipeline.events import Event, EventName

    evs = [Event(1, 0.0, EventName.TURN_START), Event(1, 0.4, EventName.PLAYBACK_START)]
    shifted = compare_live._from_speech_end(evs, 250.0)
    assert [e.t for e in shifted] == [0.25, 0.65] and evs[1].t == 0.4


@pytest.mark.parametrize(("argv", "message"), [
    (("--live", "--no-speculate"), "runs speculation on and off"),
    (("--no-speculate",), "runs speculation on and off"),
    (("--pause-ms", "300"), "--pause-ms only with --live"),
    (("--live", "--pause-ms", "10"), "--pause-ms >= 64"),
    (("--live", "--gap-ms", "200"), "--gap-ms must be 0 .off. or from 32 to under --pause-ms"),
    (("--live", "--gap-ms", "10"), "--gap-ms must be 0"),
    (("--gap-ms", "64"), "--gap-ms only with --live"),
    (("--live", "--complete-ms", "0"), "--complete-ms must be from 1 to 1000"),
    (("--complete-ms", "800"), "--complete-ms only with --live"),
])
def test_options_that_make_no_sense_are_one_clear_error(argv: tuple[str, ...],
                                                         message: str) -> None:
    with pytest.raises(UserError, match=message):
        compare.check_options(parse(str(SKY), *argv))
    compare.check_options(parse(str(SKY), "--live", "--pause-ms", "300"))  # fine
    compare.check_options(parse(str(SKY), "--live", "--gap-ms", "0"))  # off: fine
    compare.check_options(parse(str(SKY)))


@pytest.fixture
async def fake_assistant(monkeypatch: pytest.MonkeyPatch):
    async with FakeLlm(Reply(tokens=tokens(*SENTENCES), token_delay=0.01)) as fake:
        assistant = Assistant(asr=FakeAsr("Why is the sky blue?"), tts=FakeTts(),
                              llm=LlmClient(fake.url), llm_url=fake.url)

        async def assistant_for(args: Any, mode: str = "streamed") -> Assistant:
            return assistant

        monkeypatch.setattr(compare, "assistant_for", assistant_for)
        yield fake


async def test_compare_live_runs_both_conditions_through_the_live_path(
        fake_assistant: FakeLlm, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cmp"
    args = parse(str(SKY), "--live", "--runs", "1", "--max-sentences", "1", "--out", str(out))
    assert await compare._compare(args, [SKY]) == 0
    report = json.loads((out / "compare.json").read_text())
    assert report["live"] == {"pause_ms": 200, "gap_ms": 96, "end_silence_ms": 600,
                              "complete_ms": EndpointPolicy.complete_ms, "learn_pauses": True,
                              "prime": True}
    on, off = report["turns"]  # run 1: speculation on first
    assert (on["speculation"], off["speculation"]) == ("on", "off")
    assert on["speculative"] is True and on["speculation_confirmed_ms"] is not None
    assert off["speculative"] is False and off["speculation_confirmed_ms"] is None
    # Without speculation the endpoint is the fixed end silence; with it, the policy's
    # short wait after a complete question.
    assert off["endpoint_ms"] >= 600 > on["endpoint_ms"]
    for t in (on, off):
        assert t["error"] is None and t["mode"] == "streamed"
        assert t["first_audio_from_speech_end_ms"] > t["first_audio_ms"]
    s = report["summary"]
    assert s["speculation"]["on"]["started"] == s["speculation"]["on"]["confirmed"] == 1
    assert s["speculation"]["off"]["started"] == 0
    assert s["first_audio_from_speech_end_ratio"] is not None
    lines = [json.loads(x) for x in (out / "events.jsonl").read_text().splitlines()]
    assert {x["speculation"] for x in lines} == {"on", "off"}
    assert ("speculation", "confirmed") in {(x["stage"], x["event"]) for x in lines
                                            if x["speculation"] == "on"}
    assert "Live turn-taking" in (out / "compare.md").read_text()
    assert (out / "waterfall.png").stat().st_size > 1000
    err = capsys.readouterr().err
    assert "[1/2] run 1 · speculation on" in err and "[2/2] run 1 · speculation off" in err
    # 2 conversations of one turn each, plus the unmeasured warm-up turn; after a kept
    # turn the next prompt's start may be prefilled (max_tokens 1) before the end
    turns = [r for r in fake_assistant.requests if r.body.get("max_tokens") != 1]
    assert len(turns) == 3


async def test_compare_live_stopped_by_sigterm_saves_what_was_measured(
        fake_assistant: FakeLlm, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cmp"
    args = parse(str(SKY), "--live", "--runs", "2", "--max-sentences", "1", "--out", str(out))
    task = asyncio.create_task(compare._compare(args, [SKY]))
    while not (out / "compare.json").exists():  # written after the first turn
        assert not task.done()
        await asyncio.sleep(0.05)
    os.kill(os.getpid(), signal.SIGTERM)
    assert await asyncio.wait_for(task, 30) == 128 + signal.SIGTERM
    report = json.loads((out / "compare.json").read_text())
    assert 1 <= len(report["turns"]) < 4 and report["turns"][0]["speculation"] == "on"
    assert (out / "compare.md").exists()
    assert "stopped by SIGTERM" in capsys.readouterr().err


@pytest.mark.integration
def test_compare_live_on_the_real_server(llama_server, tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    done = subprocess.run(
        [sys.executable, "-m", "services.cli", "compare", "--live", str(SKY), str(TEA),
         "--runs", "1", "--max-sentences", "1", "--llm-url", llama_server.url,
         "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "VOICE_LLM_STATE": str(tmp_path / "state")})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    report = json.loads((out / "compare.json").read_text())
    assert [(t["speculation"], Path(t["file"]).name) for t in report["turns"]] == [
        ("on", SKY.name), ("on", TEA.name), ("off", SKY.name), ("off", TEA.name)]
    assert all(t["error"] is None for t in report["turns"])
    s = report["summary"]
    for cond in ("on", "off"):
        for key in ("first_audio_from_speech_end_ms", "endpoint_ms", "asr_ms",
                    "first_sentence_ms", "tts_first_ms"):
            assert s[cond][key]["n"] == 2, (cond, key)
    spec = s["speculation"]
    assert spec["on"]["started"] >= 2 and spec["on"]["confirmed"] == 2
    assert spec["on"]["started"] == spec["on"]["confirmed"] + spec["on"]["cancelled"]
    assert spec["off"]["started"] == 0
    assert s["first_audio_from_speech_end_ratio"] is not None
    assert "on/off first_audio_from_speech_end p50 ratio" in done.stdout


async def test_complete_ms_is_the_wait_after_a_finished_question(
        fake_assistant: FakeLlm, tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    args = parse(str(SKY), "--live", "--runs", "1", "--max-sentences", "1", "--out", str(out),
                 "--complete-ms", "800")
    assert await compare._compare(args, [SKY]) == 0
    report = json.loads((out / "compare.json").read_text())
    assert report["live"]["complete_ms"] == 800
    on = next(t for t in report["turns"] if t["speculation"] == "on")
    # "Why is the sky blue?" is a finished question: the end waits --complete-ms of silence.
    assert on["endpoint_ms"] >= 800
