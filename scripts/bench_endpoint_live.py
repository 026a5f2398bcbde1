#!/usr/bin/env python3
"""False endpoints on the live path itself: bench_endpoint's corpus spoken in real time
through ``replay --live``'s machinery, with the real LLM server, Whisper and Piper.

``scripts/bench_endpoint.py`` runs the real segmenter, Whisper, pitch cue and policy on each
utterance, but *models* when the reply is ready ("held until the reply is ready N ms after
the pause"). Here nothing is modelled: every held-out utterance (test and fresh splits) is
spoken into a ``RecordedMic`` in real time and taken by the same pieces as ``talk``
(Silero segmenter, barge-in watcher, ``LiveTurnTaker`` with speculation, the endpoint
policy, the end held until the reply is ready, the speaker's pauses learned), one
conversation per espeak-ng voice, in the order bench_endpoint's ``learns`` rows use
(``--order``). So the host's own time to a ready reply decides what the hold catches, and
the latency the policy buys comes from the same run.

A paused utterance is a **false endpoint** when a reply started playing before it was over
(``false_endpoint``): the rest of the utterance came and cut a reply that was playing, or
the reply started before the last word ended (``started_early``). A turn taken at the pause
but cut by the rest of the request before a sample of it played is not one (nothing was
heard; its words went into the next turn, which answers the whole). For the whole questions it
reports first audio from the end of speech (``first_audio_from_speech_end_ms``, the
pipeline's clocks, from Silero's last voiced window), from the last sound (the same, moved
to the utterance's last sample over 0.01: Silero often takes a quiet last consonant for
silence) and the endpoint wait. The replies play into a real-time null sink: no device.

    flock /tmp/cpu.lock .venv/bin/python scripts/bench_endpoint_live.py --llm-url URL
        [--splits test,fresh] [--order 1] [--out out/endpoint_live]
        [--learn-pauses on|off|both] [--complete-ms MS] [--voices en-029+f2,...]
        [--limit N] [--events FILE]

``--learn-pauses both`` speaks every conversation twice, learning the speaker's pauses and
not (which goes first alternates from speaker to speaker), and reports the two side by
side: what learning buys, measured in one run on the same utterances.

``--voices`` and ``--limit`` speak a part of it (one speaker, the first N of each
conversation: to reproduce one utterance's turns); ``--events`` writes every turn's events
as JSON lines (docs/events.md) to see where a turn went. ``--report-only DIR`` judges a
finished run again.

About 7 s of real time per utterance (test: 120, fresh: 80; ~25 minutes for both; twice
that with ``--learn-pauses both``).
Writes endpoint_live.json (every utterance, its turns) and endpoint_live.md, after each
conversation, so a stopped run keeps what it measured. It is a benchmark: nothing else on
the CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from bench_endpoint import (  # noqa: E402
    LEAD_S,
    Utterance,
    make_corpus,
    mid_sentence,
    speaker_orders,
)

from pipeline.audio_in import SAMPLE_RATE  # noqa: E402
from pipeline.endpoint import EndpointPolicy  # noqa: E402
from pipeline.metrics import pct  # noqa: E402
from pipeline.mic import SegmenterConfig  # noqa: E402

# A turn's audio starts this much before its first voiced window (the segmenter's pre-roll).
PRE_ROLL_S = SegmenterConfig().pre_roll_ms / 1000


@dataclass(frozen=True)
class HeardTurn:
    """What the benchmark keeps of one turn of an utterance."""

    transcript: str | None
    audio_s: float | None  # the audio the turn was taken on (asr.start)
    speech_end_ms: float  # its silence after the last voiced window
    played: bool  # a sample of its reply was played
    speculative: bool
    endpoint: dict[str, Any] | None  # speculation.endpoint's data
    from_speech_end_ms: float | None
    error: str | None
    # t = 0 (the pause, for a speculative turn) -> its first sentence synthesized: what
    # bench_endpoint models as "the reply ready N ms after the pause"
    ready_ms: float | None = None

    @property
    def voiced_s(self) -> float | None:
        """The audio up to its last voiced window (pre-roll included)."""
        if self.audio_s is None:
            return None
        return self.audio_s - self.speech_end_ms / 1000


def started_early(turn: HeardTurn, utterance_voiced_s: float) -> bool:
    """Did the turn's reply start before the utterance's last word? Its audio may stop
    short of the utterance's voice (a pause taken for the end, or a quiet last syllable
    the VAD heard as silence); the reply started that long after the turn's last voiced
    window (``from_speech_end_ms``). Unknown audio or no reply counts as no."""
    missing = unheard_ms(turn.voiced_s, utterance_voiced_s)
    if missing is None or turn.from_speech_end_ms is None:
        return False
    return turn.from_speech_end_ms < missing


def unheard_ms(turn_voiced_s: float | None, utterance_voiced_s: float) -> float | None:
    """How much of the utterance's voice comes after the turn's last voiced window: the
    rest of a paused utterance, or a quiet ending Silero took for silence ("... my wife":
    the "f"). Measured on the made audio (samples over 0.01), not on the VAD."""
    if turn_voiced_s is None:
        return None
    return (utterance_voiced_s - (turn_voiced_s - PRE_ROLL_S)) * 1000


def false_endpoint(turns: list[HeardTurn], utterance_voiced_s: float) -> bool:
    """A reply started playing before the utterance was over: one whose turn was followed
    by another of the same utterance (the rest of it came and cut the reply), or the
    first, started before the last word. (A later turn starts at the rest of the
    utterance, with the words before it carried: its audio is not the whole.)"""
    if turns and turns[0].played and started_early(turns[0], utterance_voiced_s):
        return True
    return any(t.played for t in turns[:-1])


def voiced_s(u: Utterance) -> float:
    """The utterance's voice, from its start to its last word."""
    return u.speech_end / SAMPLE_RATE - LEAD_S


def heard(turn: Any) -> HeardTurn:
    """A LiveTurn (pipeline/live.py) as the benchmark keeps it."""
    events = turn.result.events
    asr = next((e for e in events if e.name == "asr.start"), None)
    endpoint = next((e for e in events if e.name == "speculation.endpoint"), None)
    ready = next((e for e in events if e.name == "tts.end"), None)
    return HeardTurn(turn.result.transcript, asr.data.get("audio_s") if asr else None,
                     turn.speech_end_ms, any(e.name == "playback.start" for e in events),
                     turn.speculative, dict(endpoint.data) if endpoint else None,
                     turn.first_audio_from_speech_end_ms, turn.result.error,
                     round(ready.t * 1000) if ready else None)


async def speak_conversation(assistant: Any, utterances: list[Utterance], options: Any,
                             listeners: list[Any] | None = None) -> list[dict[str, Any]]:
    """One speaker's utterances, in order, as one live conversation."""
    from pipeline.audio_out import RealtimeNullSink
    from pipeline.conversation import Conversation
    from services.replay_live import LiveConversation

    sink = RealtimeNullSink()
    await sink.open(assistant.tts.sample_rate)
    rows = []
    try:
        runner = assistant.runner(sink, Conversation(), listeners=listeners)
        async with LiveConversation(runner, options) as live:
            for u in utterances:
                turns = []
                turn = await live.say(u.audio)
                while turn is not None:
                    turns.append(heard(turn))
                    turn = await live.after(turn)
                rows.append(row(u, turns))
                print(progress(rows[-1]), flush=True)
    finally:
        await sink.close()
    return rows


def row(u: Utterance, turns: list[HeardTurn]) -> dict[str, Any]:
    answer = turns[-1] if turns else None
    return {"name": u.name, "split": u.split, "variant": u.variant, "text": u.text,
            "voice": u.voice, "pause_ms": u.pause_ms, "voiced_s": round(voiced_s(u), 3),
            "false_endpoint": false_endpoint(turns, voiced_s(u)),
            "turns": [t.__dict__ | {"voiced_s": t.voiced_s} for t in turns],
            "from_speech_end_ms": answer.from_speech_end_ms if answer else None,
            "error": None if turns else "no turn"}


def progress(r: dict[str, Any]) -> str:
    mark = "FALSE ENDPOINT" if r["false_endpoint"] else r["error"] or "ok"
    said = r["text"] if len(r["text"]) <= 44 else r["text"][:41] + "..."
    ms = r["from_speech_end_ms"]
    return f"  {r['name']:<22} {said:<44} {mark}" + (f" {ms:.0f} ms" if ms and not
                                                     r["false_endpoint"] else "")


def condition(r: dict[str, Any], settings: dict[str, Any]) -> str:
    """"learning" or "no learning": the row's own (a paired run), else the run's setting."""
    learn = r.get("learn_pauses", settings.get("learn_pauses", True))
    return "learning" if learn in (True, "on") else "no learning"


def counts(rs: list[dict[str, Any]]) -> list[tuple[int, int]]:
    """(false endpoints, utterances): separate, ssml, both, mid-sentence."""
    paused = [r for r in rs if r["variant"] in ("separate", "ssml")]
    groups = ([r for r in rs if r["variant"] == "separate"],
              [r for r in rs if r["variant"] == "ssml"], paused,
              [r for r in paused if mid_sentence(r)])
    return [(sum(r["false_endpoint"] for r in vs), len(vs)) for vs in groups]


def of_condition(rows: list[dict[str, Any]], split: str, cond: str,
                 settings: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in rows if r["split"] == split and condition(r, settings) == cond]


def answered_whole(rs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The whole questions whose reply played (first audio timed)."""
    return [r for r in rs if r["variant"] == "whole" and r["from_speech_end_ms"]]


def whole_from_speech_end(rs: list[dict[str, Any]]) -> list[float]:
    return [r["from_speech_end_ms"] for r in answered_whole(rs)]


def whole_from_last_sound(rs: list[dict[str, Any]]) -> list[float]:
    """First audio of the whole questions' replies from their last loud sample (the
    pipeline's speech end is Silero's last voiced window, which can come earlier)."""
    out = []
    for r in answered_whole(rs):
        if not r["turns"]:
            continue
        unheard = unheard_ms(r["turns"][-1]["voiced_s"], r["voiced_s"])
        if unheard is not None:
            out.append(r["from_speech_end_ms"] - unheard)
    return out


def split_line(label: str, rs: list[dict[str, Any]]) -> str:
    cells = [f"{n}/{of} ({100 * n / of:.0f} %)" if of else "-" for n, of in counts(rs)]
    fa = whole_from_speech_end(rs)
    waits = [t["endpoint"]["wait_ms"] for r in answered_whole(rs) for t in r["turns"][-1:]
             if t["endpoint"]]
    fa_cell = (f"{statistics.median(fa):.0f} / {statistics.fmean(fa):.0f} / "
               f"{pct(fa, 0.95):.0f}" if fa else "-")
    sound = whole_from_last_sound(rs)
    sound_cell = (f"{statistics.median(sound):.0f} / {statistics.fmean(sound):.0f}"
                  if sound else "-")
    wait_cell = f"{statistics.median(waits):.0f}" if waits else "-"
    ready = [t["ready_ms"] for r in rs for t in r["turns"][:1]
             if t["speculative"] and t.get("ready_ms") is not None]
    ready_cell = f"{statistics.median(ready):.0f}" if ready else "-"
    caught = sum(len(r["turns"]) > 1 and not r["turns"][0]["played"] for r in rs)
    return (f"| {label} | {' | '.join(cells)} | {fa_cell} | {sound_cell} | {wait_cell} | "
            f"{ready_cell} | "
            f"{caught} | {sum(r['error'] is not None for r in rs)} |")


def paired(rows: list[dict[str, Any]], settings: dict[str, Any]) -> list[str]:
    """Learning on vs off, the same utterances in the same run, side by side."""
    lines = ["", "## Learning the speaker's pauses vs not, same run", "",
             "| split | false, all paused: learning / not | false, mid-sentence: learning "
             "/ not | whole questions from the last sound p50: learning / not (ratio) |",
             "|---|---:|---:|---:|"]
    for split in dict.fromkeys(r["split"] for r in rows):
        on = of_condition(rows, split, "learning", settings)
        off = of_condition(rows, split, "no learning", settings)
        (_, _, all_on, mid_on), (_, _, all_off, mid_off) = counts(on), counts(off)
        fa_on, fa_off = whole_from_last_sound(on), whole_from_last_sound(off)
        p50 = "-"
        if fa_on and fa_off:
            a, b = statistics.median(fa_on), statistics.median(fa_off)
            p50 = f"{a:.0f} / {b:.0f} ({a / b:.2f}x)"
        lines.append(f"| {split} | {all_on[0]}/{all_on[1]} / {all_off[0]}/{all_off[1]} | "
                     f"{mid_on[0]}/{mid_on[1]} / {mid_off[0]}/{mid_off[1]} | {p50} |")
    return lines


def report(rows: list[dict[str, Any]], settings: dict[str, Any]) -> str:
    lines = ["# False endpoints on the live path (scripts/bench_endpoint_live.py)", "",
             f"Settings: {json.dumps(settings)}. A false endpoint: a reply started playing "
             "before the utterance was over (the rest of it cut the reply, or the reply "
             "started before the last word ended). Mid-sentence: bench_endpoint's column of "
             "that name, every ssml utterance and the separate ones whose first part could "
             "not end a request; the rest are two sentences, each said as finished.", "",
             "| split | false: separate | false: ssml | false: both | false: mid-sentence "
             "| whole questions: "
             "from speech end p50 / mean / p95 ms | from the last sound p50 / mean ms | "
             "endpoint p50 ms | reply ready after "
             "the pause p50 ms | ended at the pause, cut before it played | no turn |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    both = len({condition(r, settings) for r in rows}) > 1
    for split in dict.fromkeys(r["split"] for r in rows):
        for cond in ("learning", "no learning"):
            rs = of_condition(rows, split, cond, settings)
            if rs:
                lines.append(split_line(f"{split}, {cond}" if both else split, rs))
    if both:
        lines += paired(rows, settings)
    lines += ["", "## The false endpoints", ""]
    for r in rows:
        if r["false_endpoint"]:
            said = " → ".join(repr(t["transcript"]) for t in r["turns"])
            why = [f"{t['endpoint']['reason']} {t['endpoint']['wait_ms']}"
                   for t in r["turns"] if t["endpoint"]]
            cond = f", {condition(r, settings)}" if both else ""
            lines.append(f"- {r['name']} ({r['voice']}, pause {r['pause_ms']} ms{cond}): "
                         f"{said}; endpoint {', '.join(why) or '-'}")
    return "\n".join(lines) + "\n"


def conversations(corpus: list[Utterance], splits: list[str],
                  order: int) -> list[list[Utterance]]:
    """One per (split, voice) of ``splits``, shuffled as bench_endpoint's ``learns`` rows."""
    return [talk for talk in speaker_orders(corpus, order) if talk[0].split in splits]


def learning_order(learn_pauses: str, speaker: int) -> list[bool]:
    """The conditions a speaker's conversation is spoken in: "both" alternates which
    goes first from speaker to speaker, so drift in the host falls on each alike."""
    if learn_pauses != "both":
        return [learn_pauses == "on"]
    return [True, False] if speaker % 2 else [False, True]


async def run(args: argparse.Namespace) -> int:
    from pipeline.turn import TurnConfig
    from services.assistant import load_assistant
    from services.replay_live import LiveOptions
    from services.turn_options import EventWriter

    print("making the corpus with espeak-ng ...", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        corpus = make_corpus(Path(tmp))
    talks = [t[:args.limit] for t in conversations(corpus, args.splits, args.order)
             if not args.voices or t[0].voice in args.voices]
    if not talks:
        print("bench_endpoint_live: no conversation left: --voices names none of "
              f"{sorted({u.voice for u in corpus})}", file=sys.stderr)
        return 2
    settings = {"order": args.order, "complete_ms": args.complete_ms,
                "learn_pauses": args.learn_pauses, "max_sentences": args.max_sentences}
    assistant = await load_assistant(args.llm_url, config=TurnConfig(
        max_sentences=args.max_sentences))
    rows: list[dict[str, Any]] = []
    args.out.mkdir(parents=True, exist_ok=True)
    write_event = EventWriter(args.events)
    try:
        for i, talk in enumerate(talks, 1):
            for learn in learning_order(args.learn_pauses, i):
                print(f"[{i}/{len(talks)}] {talk[0].split}, voice {talk[0].voice}: "
                      f"{len(talk)} utterances, {'' if learn else 'not '}learning "
                      "their pauses", flush=True)
                options = LiveOptions(complete_ms=args.complete_ms, learn_pauses=learn)
                said = await speak_conversation(assistant, talk, options, [write_event])
                rows += [r | {"learn_pauses": learn} for r in said]
            (args.out / "endpoint_live.json").write_text(json.dumps(
                {"settings": settings, "utterances": rows}, indent=1, default=str) + "\n")
            (args.out / "endpoint_live.md").write_text(report(rows, settings))
    finally:
        await assistant.close()
        write_event.close()
    print(report(rows, settings))
    print(f"report: {args.out / 'endpoint_live.md'} (every utterance: endpoint_live.json)")
    return 0


def report_again(out: Path) -> int:
    """--report-only: judge a finished run's turns again and rewrite its report."""
    data = json.loads((out / "endpoint_live.json").read_text())
    for r in data["utterances"]:
        turns = [HeardTurn(**{k: v for k, v in t.items() if k != "voiced_s"})
                 for t in r["turns"]]
        r["false_endpoint"] = false_endpoint(turns, r["voiced_s"])
    (out / "endpoint_live.json").write_text(json.dumps(data, indent=1) + "\n")
    text = report(data["utterances"], data["settings"])
    (out / "endpoint_live.md").write_text(text)
    print(text)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--llm-url", default="http://127.0.0.1:8080")
    ap.add_argument("--splits", default="test,fresh",
                    type=lambda s: [x.strip() for x in s.split(",") if x.strip()],
                    help="bench_endpoint's splits to speak (default test,fresh)")
    ap.add_argument("--order", type=int, default=1,
                    help="the shuffle of each speaker's utterances (bench_endpoint's seeds)")
    ap.add_argument("--complete-ms", type=int, default=EndpointPolicy.complete_ms)
    ap.add_argument("--learn-pauses", choices=("on", "off", "both"), default="on",
                    help="learn each speaker's pauses (talk's default), not, or both: "
                    "every conversation spoken twice, the two side by side in one report")
    ap.add_argument("--no-learn-pauses", dest="learn_pauses", action="store_const",
                    const="off", help="the same as --learn-pauses off")
    ap.add_argument("--max-sentences", type=int, default=1,
                    help="replies capped at N sentences (default 1: only their start counts)")
    ap.add_argument("--limit", type=int, default=None,
                    help="only the first N utterances of each conversation (a quick look)")
    ap.add_argument("--voices", default="",
                    type=lambda s: {x.strip() for x in s.split(",") if x.strip()},
                    help="only these espeak-ng voices' conversations, e.g. en-029+f2")
    ap.add_argument("--events", type=Path, default=None, metavar="FILE",
                    help="every turn's events as JSON lines (docs/events.md), to see "
                    "where a turn went")
    ap.add_argument("--out", type=Path, default=ROOT / "out" / "endpoint_live")
    ap.add_argument("--report-only", type=Path, metavar="DIR",
                    help="judge DIR/endpoint_live.json (a finished run) again and rewrite "
                    "its report; run nothing")
    args = ap.parse_args()
    if args.report_only is not None:
        return report_again(args.report_only)
    return asyncio.run(run(args))


if __name__ == "__main__":
    sys.exit(main())
