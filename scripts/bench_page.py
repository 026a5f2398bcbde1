#!/usr/bin/env python3
"""The browser page hands-free, speculation on vs off (``serve`` vs ``serve --no-speculate``).

Headless Chromium's fake microphone speaks each sample question into the real page
(services/static), which cuts the utterance itself (energy VAD, endpointer.js) and talks to
the real service: llama-server, Whisper, Piper. Two apps share one assistant, one with
speculation and one without; every question is asked in both, the order alternating per
question and round, each time in a fresh conversation (a new page load). Replies are capped
at one sentence: only the time to the first audio is compared.

Reported per condition, p50 (p95), on the pipeline's clocks: ``from last sound`` (the
page's last voiced frame to the first reply sample sent to the page:
``first_audio_from_speech_end_ms``), the page's endpoint wait (its silence when it ended
the utterance), t = 0 -> first audio, and what speculation did. The page's own playback
buffer (80 ms lead) and the browser's audio path are the same in both and not included.

``--paused N`` also speaks N questions with a 600 ms pause mid-sentence (espeak-ng, made by
scripts/bench_live.py's ``make_paused``: "Can you tell me about the ... history of
bicycles?") into the page each round, in both conditions. They are counted, not timed (not
in the p50s): speculations started, cancelled (and of those, the slot confirmed idle),
dropped, the server's ``hold`` / ``ready`` messages, and false endpoints: the page answered a
turn on part of the question. That is judged on the audio, not the words: an answered turn's
audio as the server got it (``asr.start`` ``audio_s``) less its silence after the last voice
(``turn.start`` ``speech_end_ms``) must reach the question's voiced span
(``covers_question``).

``--gap-share`` adds a third app, speculation on with Whisper waiting for the pause rather
than starting at the page's 100 ms gap (``serve --no-early-asr``): the gap's share.

    flock /tmp/cpu.lock scripts/bench_page.py [--llm-url URL] [--rounds 2] [--out out/page]
                                              [--paused N] [--gap-share]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import shutil
import statistics
import sys
import tempfile
import wave
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # the DevTools client the browser tests use
sys.path.insert(0, str(ROOT / "scripts"))  # bench_live's paused questions

from bench_live import PAUSE_MS, PAUSED, make_paused, voiced_span  # noqa: E402
from chromium import Cdp, find_chromium, free_port, launch_chromium  # noqa: E402
from chromium import open_page as devtools  # noqa: E402

from pipeline.metrics import pct  # noqa: E402

RESULT = ("voiceLlm.log.filter(m => m.type === 'turn.result' && !(m.speculation && "
          "['cancelled', 'dropped'].includes(m.speculation.state)))[0]")


@contextlib.contextmanager
def chromium(binary: str, wav: Path) -> Iterator[int]:
    """Chromium (tests/chromium.py) in a throwaway profile; yields its DevTools port."""
    profile = Path(tempfile.mkdtemp(prefix="bench-page-"))
    try:
        with launch_chromium(binary, profile, wav) as port:
            yield port
    finally:
        shutil.rmtree(profile, ignore_errors=True)


LOADS = itertools.count(1)


async def one_turn(cdp: Cdp, url: str) -> dict[str, Any]:
    """A fresh page (a new conversation) at ``url``; the microphone speaks the WAV once."""
    load = f"?load={next(LOADS)}"  # tells the new page from the one still showing
    await cdp.call("Page.navigate", url=url + load)
    await cdp.wait_for(f"location.search === {load!r} && window.voiceLlm && "
                       "voiceLlm.connected", 20, "the WebSocket")
    await cdp.click("#start")
    result: dict[str, Any] = await cdp.wait_for(RESULT, 120, "the turn")
    result["last_end"] = await cdp.js("voiceLlm.lastEnd")
    result["endpoint_messages"] = await cdp.js(
        "voiceLlm.log.filter(m => m.type === 'endpoint').length")
    await cdp.click("#start")  # mute: the fake device starts the WAV again when reopened
    return result


# A paused question is over when the page has heard all of its WAV (and a little silence),
# is not in an utterance, every utterance it sent was answered (or failed), and every turn
# that started (abandoned speculations included) has its turn.result, so the hang-ups'
# slot checks are in the log too.
PAUSED_DONE = """import('/static/capture.js').then(({capture}) => {
  const log = voiceLlm.log, sent = voiceLlm.stats.utterancesSent;
  const started = log.filter(m => m.type === 'event' && m.event.stage === 'turn'
                                  && m.event.event === 'start').map(m => m.event.turn);
  const results = log.filter(m => m.type === 'turn.result');
  const done = new Set(results.map(m => m.turn));
  const answered = results.filter(m => !(m.speculation && ['cancelled', 'dropped']
                                         .includes(m.speculation.state))).length;
  const errors = log.filter(m => m.type === 'error').length;
  return capture.frames * 0.02 >= %(heard_s)s && !capture.recording && sent > 0
    && answered + errors >= sent && started.every(t => done.has(t));
})"""
COVER_SLACK_S = 0.3  # the page's VAD may call a word's quiet tail silence before ours does
# (name, speculate, early_asr): the two apps every run compares, and --gap-share's third.
CONDITIONS = [("on", True, True), ("off", False, True)]
GAP_SHARE = [("on, no gap", True, False)]


async def paused_turn(cdp: Cdp, url: str, wav_s: float) -> list[dict[str, Any]]:
    """A fresh page at ``url``; the microphone speaks a paused question (``wav_s`` long)
    once. Returns every message the server sent the page meanwhile (``voiceLlm.log``)."""
    load = f"?load={next(LOADS)}"
    await cdp.call("Page.navigate", url=url + load)
    await cdp.wait_for(f"location.search === {load!r} && window.voiceLlm && "
                       "voiceLlm.connected", 20, "the WebSocket")
    await cdp.click("#start")
    await cdp.wait_for(PAUSED_DONE % {"heard_s": round(wav_s + 0.3, 2)}, 120,
                       "the paused question's turns")
    log: list[dict[str, Any]] = await cdp.js("voiceLlm.log")
    await cdp.click("#start")
    return log


def covered_s(log: list[dict[str, Any]], turn: int) -> float | None:
    """How much of the utterance up to its last voiced frame turn ``turn`` ran on, in s:
    the audio the server got (``asr.start`` ``audio_s``, the page's pre-roll included)
    less the silence after the voice (``turn.start`` ``speech_end_ms``: the pause a
    speculation started on, or the trailing silence that ended the utterance). A turn that
    took a transcription started at an earlier gap (``asr.start`` ``early_ms`` before t = 0)
    ran on the audio up to that gap: that much less silence."""
    events = [m["event"] for m in log if m.get("type") == "event" and m["event"]["turn"] == turn]
    asr = next((e for e in events if e["stage"] == "asr" and e["event"] == "start"), None)
    if asr is None or asr.get("audio_s") is None:
        return None
    start = next((e for e in events if e["stage"] == "turn" and e["event"] == "start"), {})
    silence_ms = max(0.0, float(start.get("speech_end_ms") or 0)
                     - float(asr.get("early_ms") or 0))
    return round(float(asr["audio_s"]) - silence_ms / 1000, 3)


def covers_question(covered: float | None, span_s: float) -> bool | None:
    """Whether an answered turn ran on the whole question (None: no audio to tell by).
    ``span_s``: the question's first to last voiced sample. A turn on the words before the
    pause runs on at most the page's 0.3 s pre-roll + that part; one on the whole question
    on its span at least (the pre-roll making up for the page's onset)."""
    if covered is None:
        return None
    return covered >= span_s - COVER_SLACK_S


def paused_counts(log: list[dict[str, Any]], span_s: float) -> dict[str, Any]:
    """What happened to one paused question on the page, from the messages it got."""
    results = [m for m in log if m.get("type") == "turn.result"]
    events = [m["event"] for m in log if m.get("type") == "event"]

    def names(turn: int) -> set[str]:
        return {f"{e['stage']}.{e['event']}" for e in events if e["turn"] == turn}

    answered = []
    for r in results:
        state = (r.get("speculation") or {}).get("state")
        if state in ("cancelled", "dropped"):
            continue
        covered = covered_s(log, r["turn"])
        answered.append({"turn": r["turn"], "state": state, "covered_s": covered,
                         "whole": covers_question(covered, span_s),
                         "transcript": r.get("transcript"), "error": r.get("error"),
                         "interrupted": r.get("interrupted"),
                         "from_last_sound_ms": (r.get("metrics") or {}).get(
                             "first_audio_from_speech_end_ms")})
    turns = sorted({e["turn"] for e in events})
    cancelled = [t for t in turns if "speculation.cancelled" in names(t)]
    idle = {e["turn"] for e in events if e["stage"] == "server"
            and e["event"] == "slot_idle" and e.get("confirmed")}
    readies: dict[str, int] = {}
    for m in log:
        if m.get("type") == "ready":
            readies[str(m.get("reason"))] = readies.get(str(m.get("reason")), 0) + 1
    return {
        "span_s": round(span_s, 3), "answered": answered,
        # answered on part of the question (its first words, or the rest after them)
        "false_endpoint": any(a["whole"] is False for a in answered),
        "unjudged": sum(1 for a in answered if a["whole"] is None),
        "started": sum(1 for t in turns if "speculation.start" in names(t)),
        "confirmed": sum(1 for t in turns if "speculation.confirmed" in names(t)),
        "cancelled": len(cancelled),
        "cancelled_idle": sum(1 for t in cancelled if t in idle),
        "cancelled_unasked": sum(1 for t in cancelled if "llm.request" not in names(t)),
        "dropped": sum(1 for r in results
                       if (r.get("speculation") or {}).get("state") == "dropped"),
        "holds": sum(1 for m in log if m.get("type") == "hold"),
        "readies": readies,
        # the server's endpoint for each pause: why the page did (not) end there
        "endpoints": [[m.get("pause"), m.get("wait_ms"), m.get("reason")]
                      for m in log if m.get("type") == "endpoint"],
        "errors": sum(1 for m in log if m.get("type") == "error")
        + sum(1 for a in answered if a["error"]),
        "log_full": len(log) >= 500,  # the page keeps its last 500 messages
    }


def paused_summary(questions: list[dict[str, Any]]) -> dict[str, Any]:
    """One condition's paused questions, added up."""
    readies: dict[str, int] = {}
    for q in questions:
        for reason, n in q["readies"].items():
            readies[reason] = readies.get(reason, 0) + n
    keys = ("started", "confirmed", "cancelled", "cancelled_idle", "cancelled_unasked",
            "dropped", "holds", "errors", "unjudged")
    return {"questions": len(questions),
            "answered_turns": sum(len(q["answered"]) for q in questions),
            "false_endpoints": sum(1 for q in questions if q["false_endpoint"]),
            **{k: sum(q[k] for q in questions) for k in keys},
            "readies": readies, "log_full": sum(1 for q in questions if q["log_full"])}


def summary(turns: list[dict[str, Any]]) -> dict[str, Any]:
    def stat(key: str) -> dict[str, float | None]:
        values = [float(v) for v in (key_of(t, key) for t in turns) if v is not None]
        return {"p50": round(statistics.median(values)) if values else None,
                "p95": pct(values, 0.95)}

    specs = [t["speculation"] or {} for t in turns]
    return {"turns": len(turns), "errors": sum(1 for t in turns if t["error"]),
            "from_last_sound_ms": stat("first_audio_from_speech_end_ms"),
            "endpoint_wait_ms": stat("trailing"),
            "first_audio_ms": stat("first_audio_ms"), "asr_ms": stat("asr_ms"),
            "confirmed": sum(1 for s in specs if s.get("state") == "confirmed"),
            "started": sum(s.get("started", 0) for s in specs),
            "cancelled": sum(s.get("cancelled", 0) for s in specs),
            "ended_at_server_endpoint": sum(1 for t in turns
                                            if (t["last_end"] or {}).get("endpointMs"))}


def key_of(turn: dict[str, Any], key: str) -> Any:
    if key == "trailing":
        return (turn["last_end"] or {}).get("trailingMs")
    return turn["metrics"].get(key)


def chromium_binary() -> str:
    binary = find_chromium()
    if binary is None:
        raise SystemExit("bench_page: chromium is not installed (scripts/setup installs it)")
    return binary


@contextlib.asynccontextmanager
async def page_apps(llm_url: str, conditions: list[tuple[str, bool, bool]]
                    ) -> AsyncIterator[dict[str, str]]:
    """One assistant (replies capped at one sentence), one ``serve`` app per condition on
    a free port; yields each condition's page URL."""
    from aiohttp import web

    from services.assistant import load_assistant
    from services.web import create_app

    assistant = await load_assistant(llm_url)
    assistant.config = replace(assistant.config, max_sentences=1)
    urls: dict[str, str] = {}
    runners: list[web.AppRunner] = []
    try:
        for name, speculate, early_asr in conditions:
            runner = web.AppRunner(create_app(assistant, speculate=speculate,
                                              early_asr=early_asr))
            runners.append(runner)
            await runner.setup()
            port = free_port()
            await web.TCPSite(runner, "127.0.0.1", port).start()
            urls[name] = f"http://127.0.0.1:{port}/"
        yield urls
    finally:
        for runner in runners:
            await runner.cleanup()
        await assistant.close()


async def bench(args: argparse.Namespace, wavs: list[Path],
                paused: list[Path]) -> dict[str, Any]:
    binary = chromium_binary()
    conditions = CONDITIONS + (GAP_SHARE if args.gap_share else [])
    names = [c[0] for c in conditions]
    turns: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    asked: dict[str, list[dict[str, Any]]] = {name: [] for name in names}  # paused ones
    async with page_apps(args.llm_url, conditions) as urls:
        for i, wav in enumerate(wavs + paused):
            with chromium(binary, wav) as port:
                async with devtools(port) as cdp:
                    for r in range(args.rounds):
                        order = names if (i + r) % 2 == 0 else names[::-1]
                        for name in order:
                            if wav in paused:
                                asked[name].append(await ask_paused(cdp, urls[name], wav,
                                                                    name, r + 1))
                                continue
                            turn = await one_turn(cdp, urls[name])
                            turn["file"], turn["round"] = wav.name, r + 1
                            turns[name].append(turn)
                            m = turn["metrics"]
                            print(f"{wav.name} r{r + 1} speculation {name}: from last sound "
                                  f"{m['first_audio_from_speech_end_ms']} ms, endpoint "
                                  f"{(turn['last_end'] or {}).get('trailingMs')} ms, "
                                  f"{turn['speculation']}", file=sys.stderr, flush=True)
    report = {"conditions": {k: summary(v) for k, v in turns.items()}, "turns": turns}
    if (gain := paired_gain(turns, "on", GAP_SHARE[0][0])) is not None:
        report["gap_gain"] = gain
    if paused:
        report["paused"] = {"conditions": {k: paused_summary(v) for k, v in asked.items()},
                            "questions": asked}
    return report


async def ask_paused(cdp: Cdp, url: str, wav: Path, name: str, round_: int) -> dict[str, Any]:
    with wave.open(str(wav)) as w:
        wav_s = w.getnframes() / w.getframerate()
    first, last = voiced_span(wav)
    log = await paused_turn(cdp, url, wav_s)
    q = {"file": wav.name, "round": round_, **paused_counts(log, last - first)}
    print(f"{wav.name} r{round_} speculation {name}: answered "
          f"{[(a['covered_s'], a['transcript']) for a in q['answered']]} (span "
          f"{q['span_s']} s), false endpoint {q['false_endpoint']}, speculations "
          f"{q['started']} started / {q['cancelled']} cancelled, holds {q['holds']}, "
          f"ready {q['readies']}", file=sys.stderr, flush=True)
    return q


def paired_gain(turns: dict[str, list[dict[str, Any]]], a: str, b: str
                ) -> dict[str, Any] | None:
    """From the last sound, condition a less condition b, per question and round, where
    the endpoint policy judged the same wait in both: the p50s also move with the policy's
    verdicts (a 1000 ms "unsure" in one condition and not the other), which this leaves
    out. None if either condition is missing."""
    if a not in turns or b not in turns:
        return None
    theirs = {(t["file"], t["round"]): t for t in turns[b]}
    diffs = []
    for t in turns[a]:
        u = theirs.get((t["file"], t["round"]))
        if u is None:
            continue
        x = t["metrics"].get("first_audio_from_speech_end_ms")
        y = u["metrics"].get("first_audio_from_speech_end_ms")
        same = (t["speculation"] or {}).get("wait_ms") == (u["speculation"] or {}).get("wait_ms")
        if same and x is not None and y is not None:
            diffs.append(float(x) - float(y))
    return {"pairs": len(diffs), "of": len(turns[a]),
            "median_ms": round(statistics.median(diffs)) if diffs else None}


def ratio(c: dict[str, Any], a: str, b: str) -> str:
    """p50 from the last sound, condition a over condition b."""
    x, y = c[a]["from_last_sound_ms"]["p50"], c[b]["from_last_sound_ms"]["p50"]
    return f"{x / y:.2f}" if x and y else "n/a"


def markdown(report: dict[str, Any]) -> str:
    c = report["conditions"]
    names = list(c)

    def cell(name: str, key: str) -> str:
        s = c[name][key]
        return f"{s['p50']} ({s['p95']})"

    rows = ["| ms, p50 (p95) | " + " | ".join(f"speculation {n}" for n in names) + " |",
            "|---|" + "---:|" * len(names)]
    for label, key in [("from the last sound", "from_last_sound_ms"),
                       ("endpoint wait (page)", "endpoint_wait_ms"),
                       ("t = 0 -> first audio", "first_audio_ms"), ("asr", "asr_ms")]:
        rows.append(f"| {label} | " + " | ".join(cell(n, key) for n in names) + " |")
    no_gap = GAP_SHARE[0][0]
    gap = (f"; on / {no_gap} = {ratio(c, 'on', no_gap)} (what Whisper from the page's gap "
           f"saves), {no_gap} / off = {ratio(c, no_gap, 'off')}" if no_gap in c else "")
    if (gain := report.get("gap_gain")) and gain["median_ms"] is not None:
        gap += (f"; paired, the same question and round where the policy judged the same "
                f"wait in both ({gain['pairs']} of {gain['of']}): on less {no_gap} "
                f"{gain['median_ms']:+d} ms (median)")
    return "\n".join(rows) + (
        f"\n\nfrom-last-sound p50 on/off = {ratio(c, 'on', 'off')}{gap}; turns "
        f"{c['on']['turns']} + "
        f"{c['off']['turns']}, errors {c['on']['errors']} + {c['off']['errors']}; "
        f"speculation: {c['on']['confirmed']} confirmed, {c['on']['started']} started, "
        f"{c['on']['cancelled']} cancelled; the page ended at the server's endpoint "
        f"{c['on']['ended_at_server_endpoint']} of {c['on']['turns']} times (else its "
        "700 ms fallback, the endpoint not there yet)\n") + paused_markdown(report)


def paused_markdown(report: dict[str, Any]) -> str:
    if "paused" not in report:
        return ""
    c = report["paused"]["conditions"]

    def readies(name: str) -> str:
        r = c[name]["readies"]
        reasons = ", ".join(f"{k} {v}" for k, v in sorted(r.items()))
        return f"{sum(r.values())} ({reasons})" if r else "0"

    names = list(c)
    rows = [f"\nPaused questions ({' + '.join(str(c[n]['questions']) for n in names)}: "
            f"espeak-ng, a {PAUSE_MS} ms pause mid-sentence; counted, not in the table "
            "above):\n",
            "| paused questions | " + " | ".join(f"speculation {n}" for n in names) + " |",
            "|---|" + "---:|" * len(names)]
    for label, key in [("false endpoints (a turn answered on part of the question)",
                        "false_endpoints"), ("answered turns", "answered_turns"),
                       ("speculations started", "started"), ("confirmed", "confirmed"),
                       ("cancelled", "cancelled"),
                       ("cancelled, slot confirmed idle", "cancelled_idle"),
                       ("cancelled before the LLM request", "cancelled_unasked"),
                       ("dropped", "dropped"), ("hold", "holds")]:
        rows.append(f"| {label} | " + " | ".join(str(c[n][key]) for n in names) + " |")
    rows.append("| ready (reason) | " + " | ".join(readies(n) for n in names) + " |")
    rows.append("| errors | " + " | ".join(str(c[n]["errors"]) for n in names) + " |")
    notes = ["\nFalse endpoints are judged on the audio, not the words: an answered turn's "
             "audio up to its last voiced frame (`asr.start` audio_s less the silence after "
             "the voice: `turn.start` speech_end_ms, less `early_ms` when Whisper started at "
             f"a gap) shorter than the question's voiced span less {COVER_SLACK_S} s."]
    unjudged = sum(c[n]["unjudged"] for n in names)
    if unjudged:
        notes.append(f" {unjudged} answered turns had no audio length to judge by.")
    full = sum(c[n]["log_full"] for n in names)
    if full:
        notes.append(f" {full} questions filled the page's 500-message log: counts may "
                     "be short.")
    return "\n".join(rows) + "\n" + "".join(notes) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("samples", nargs="?", default=str(ROOT / "samples"),
                   help="directory of question WAVs (default samples/)")
    p.add_argument("--llm-url", default=os.environ.get("VOICE_LLM_URL",
                                                       "http://127.0.0.1:8080"))
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--out", default="out/page")
    p.add_argument("--paused", type=int, default=0, metavar="N",
                   help=f"also ask N (at most {len(PAUSED)}) espeak-ng questions with a "
                   f"{PAUSE_MS} ms pause mid-sentence each round, per condition: counted "
                   "(speculations cancelled, hold / ready, false endpoints), not timed")
    p.add_argument("--gap-share", action="store_true",
                   help="a third condition, speculation on with Whisper waiting for the "
                   "pause (serve --no-early-asr): what starting it at the page's gap saves")
    p.add_argument("--report-only", type=Path, metavar="DIR",
                   help="write page.md again from DIR/page.json (a finished run), run nothing")
    args = p.parse_args()
    if args.report_only is not None:
        saved = args.report_only / "page.json"
        if not saved.is_file():
            p.error(f"--report-only: no {saved}")
        report = json.loads(saved.read_text())
        if (gain := paired_gain(report["turns"], "on", GAP_SHARE[0][0])) is not None:
            report["gap_gain"] = gain
        (args.report_only / "page.md").write_text(markdown(report))
        print(markdown(report))
        return 0
    if not 0 <= args.paused <= len(PAUSED):
        p.error(f"--paused takes 0 to {len(PAUSED)}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    paused = make_paused(args.paused, out / "paused") if args.paused else []
    report = asyncio.run(bench(args, sorted(Path(args.samples).glob("*.wav")), paused))
    (out / "page.json").write_text(json.dumps(report, indent=1, default=str))
    (out / "page.md").write_text(markdown(report))
    print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
