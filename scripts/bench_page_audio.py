#!/usr/bin/env python3
"""The browser page's mouth to ear, measured on the audio: Chromium's own microphone and
speaker paths, through PulseAudio, speculation on vs off.

``scripts/bench_page.py`` speaks into the page through Chromium's fake file microphone and
times on the pipeline's clocks (the page's last voiced frame to the first reply sample sent
to it). Here Chromium runs with its real audio devices on a private PulseAudio daemon set
up as ``scripts/bench_live.py`` sets it up for ``talk``: each question WAV is played into a
combine sink feeding the page's microphone (``mic``) and the ``speaker`` sink at the same
moment, the page plays its reply into ``speaker``, and the gap from the question's last
voiced sample to the reply's first is read off the speaker's recording. That gap holds
everything a person at the browser waits through: the browser's capture (WebRTC audio
processing, the AudioWorklet), the page's energy VAD and endpoint, the WebSocket both
ways, the pipeline, the page's 80 ms playback lead and Chromium's audio output.

Same apps as bench_page (one assistant, ``serve`` and ``serve --no-speculate``, replies
capped at one sentence), each question asked in both, the order alternating per question
and round, each in a fresh page load. Usage:

    flock /tmp/cpu.lock scripts/bench_page_audio.py [WAV_DIR] [--llm-url URL] [--rounds 2]
                                                    [--out out/page-audio] [--gap-share]

Writes page-audio.json (every turn, its recording in --out) and page-audio.md, prints the
table. Needs PulseAudio and Chromium (scripts/setup installs both) and nothing else on
the CPU: it is a benchmark.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # the PulseAudio and DevTools helpers
sys.path.insert(0, str(ROOT / "scripts"))

from bench_live import FRAME_S, LOUD, loud_frames, p, question_then_reply  # noqa: E402
from bench_page import (  # noqa: E402
    CONDITIONS,
    GAP_SHARE,
    LOADS,
    RESULT,
    chromium_binary,
    page_apps,
)
from chromium import launch_chromium  # noqa: E402
from chromium import open_page as devtools  # noqa: E402
from pulse import add_both, add_browser_mic, private_pulse  # noqa: E402

LISTENING = ("import('/static/capture.js').then(({capture}) => "
             "capture.ctx && capture.frames >= 15)")  # 0.3 s of the microphone reached the VAD
SETTLE_S = 0.3  # the recorder running before the question starts
AFTER_RESULT_S = 0.6  # the reply's first sample is played (80 ms lead) well before this


async def audio_turn(cdp: Any, url: str, question: Path, env: dict[str, str],
                     recording: Path) -> dict[str, Any]:
    """A fresh page at ``url``, hands-free; ``question`` played into its microphone while
    the speaker is recorded to ``recording``. Returns the turn's ``turn.result`` with the
    gap measured on the recording (``mouth_to_ear_ms``, None when no reply was heard)."""
    load = f"?load={next(LOADS)}"
    await cdp.call("Page.navigate", url=url + load)
    await cdp.wait_for(f"location.search === {load!r} && window.voiceLlm && "
                       "voiceLlm.connected", 20, "the WebSocket")
    await cdp.click("#start")
    await cdp.wait_for(LISTENING, 20, "the microphone")
    recorder = await asyncio.create_subprocess_exec(
        "parecord", "--device=speaker.monitor", "--rate=16000", "--channels=1",
        "--file-format=wav", str(recording), env=env)
    try:
        await asyncio.sleep(SETTLE_S)
        player = await asyncio.create_subprocess_exec("paplay", "--device=both",
                                                      str(question), env=env)
        await asyncio.wait_for(player.wait(), 60)
        result: dict[str, Any] = await cdp.wait_for(RESULT, 120, "the turn")
        await asyncio.sleep(AFTER_RESULT_S)
    finally:
        recorder.send_signal(signal.SIGINT)
        await asyncio.wait_for(recorder.wait(), 10)
    result["last_end"] = await cdp.js("voiceLlm.lastEnd")
    result["mouth_to_ear_ms"] = gap_ms(recording, question)
    return result


def gap_ms(recording: Path, question: Path) -> float | None:
    """The question's last voiced frame to the reply's first, in ms, on the recording."""
    found = question_then_reply(loud_frames(recording), 0, question)
    if found is None or found[1] is None:
        return None
    q_end, reply = found
    return round((reply - q_end) * FRAME_S * 1000, 1)


def browser_ms(turn: dict[str, Any]) -> float | None:
    """What the pipeline's clocks leave out: the audio gap less the page's last voiced
    frame -> first reply sample sent (the browser's capture and playback, the page's VAD
    and playback lead, PulseAudio)."""
    audio = turn.get("mouth_to_ear_ms")
    pipeline = (turn.get("metrics") or {}).get("first_audio_from_speech_end_ms")
    return None if audio is None or pipeline is None else round(audio - pipeline, 1)


ROWS = [("mouth to ear (audio)", lambda t: t.get("mouth_to_ear_ms")),
        ("from the last sound (pipeline's clocks)",
         lambda t: (t.get("metrics") or {}).get("first_audio_from_speech_end_ms")),
        ("endpoint wait (page)", lambda t: (t.get("last_end") or {}).get("trailingMs")),
        ("t = 0 -> first audio", lambda t: (t.get("metrics") or {}).get("first_audio_ms")),
        ("browser + devices (audio less pipeline)", browser_ms)]


def markdown(turns: dict[str, list[dict[str, Any]]]) -> str:
    names = list(turns)

    def cell(name: str, get: Any) -> str:
        values = [float(v) for v in (get(t) for t in turns[name]) if v is not None]
        return f"{p(values, 50)} ({p(values, 95)})" if values else "-"

    rows = ["| ms, p50 (p95) | " + " | ".join(f"speculation {n}" for n in names) + " |",
            "|---|" + "---:|" * len(names)]
    rows += [f"| {label} | " + " | ".join(cell(n, get) for n in names) + " |"
             for label, get in ROWS]
    heard = {n: [float(t["mouth_to_ear_ms"]) for t in turns[n]
                 if t.get("mouth_to_ear_ms") is not None] for n in names}
    ratios = [f"{a}/off = {statistics.median(heard[a]) / statistics.median(heard['off']):.2f}"
              for a in names if a != "off" and heard.get(a) and heard.get("off")]
    unheard = sum(len(turns[n]) - len(heard[n]) for n in names)
    errors = sum(1 for n in names for t in turns[n] if t.get("error"))
    return "\n".join(rows) + (
        f"\n\nmouth to ear p50 {', '.join(ratios) or 'n/a'}; turns "
        f"{' + '.join(str(len(turns[n])) for n in names)}, no reply found on the recording "
        f"{unheard}, errors {errors}. Gap: the question's last frame over {LOUD} RMS to "
        f"the reply's first, {FRAME_S * 1000:.0f} ms frames, on one recording of the "
        "speaker sink.\n")


async def bench(args: argparse.Namespace, questions: list[Path]) -> dict[str, Any]:
    binary = chromium_binary()
    conditions = CONDITIONS + (GAP_SHARE if args.gap_share else [])
    names = [c[0] for c in conditions]
    turns: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    recordings = args.out / "recordings"
    recordings.mkdir(parents=True, exist_ok=True)
    profile = Path(tempfile.mkdtemp(prefix="bench-page-audio-"))
    try:
        with private_pulse() as env:
            add_both(env)
            add_browser_mic(env)
            async with page_apps(args.llm_url, conditions) as urls:
                with launch_chromium(binary, profile, None, env) as port:
                    async with devtools(port) as cdp:
                        for i, question in enumerate(questions):
                            for r in range(1, args.rounds + 1):
                                order = names if (i + r) % 2 else names[::-1]
                                for name in order:
                                    wav = recordings / f"{question.stem}-r{r}-{name}.wav"
                                    turn = await audio_turn(cdp, urls[name], question, env,
                                                            wav)
                                    turn["file"], turn["round"] = question.name, r
                                    turn["recording"] = str(wav)
                                    turns[name].append(turn)
                                    print(f"{question.name} r{r} speculation {name}: mouth to "
                                          f"ear {turn['mouth_to_ear_ms']} ms (pipeline "
                                          f"{turn['metrics'].get('first_audio_from_speech_end_ms')}"
                                          f" ms), {turn['transcript']!r}",
                                          file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    return {"when": time.strftime("%Y-%m-%d %H:%M"), "turns": turns}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("samples", nargs="?", type=Path, default=ROOT / "samples",
                    help="directory of question WAVs, 16 kHz (default samples/)")
    ap.add_argument("--llm-url", default=os.environ.get("VOICE_LLM_URL",
                                                        "http://127.0.0.1:8080"))
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", type=Path, default=ROOT / "out" / "page-audio")
    ap.add_argument("--gap-share", action="store_true",
                    help="a third condition, speculation on with Whisper waiting for the "
                    "pause (serve --no-early-asr): what starting it at the page's gap saves "
                    "or costs")
    ap.add_argument("--report-only", action="store_true",
                    help="write page-audio.md again from --out's page-audio.json, run nothing")
    args = ap.parse_args()
    saved = args.out / "page-audio.json"
    if args.report_only:
        if not saved.is_file():
            ap.error(f"--report-only: no {saved}")
        report = json.loads(saved.read_text())
    else:
        from pulse import pulse_missing

        if pulse_missing():
            raise SystemExit("bench_page_audio: PulseAudio is not installed "
                             "(scripts/setup installs it)")
        questions = sorted(args.samples.glob("*.wav"))
        if not questions:
            ap.error(f"no .wav in {args.samples}")
        report = asyncio.run(bench(args, questions))
        saved.write_text(json.dumps(report, indent=1, default=str))
    text = markdown(report["turns"])
    (args.out / "page-audio.md").write_text(
        f"# The page, mouth to ear on the audio (`scripts/bench_page_audio.py`), "
        f"{report.get('when', '')}\n\n{text}")
    print(text)
    print(f"report: {args.out / 'page-audio.md'} (every turn: {saved.name})")
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
