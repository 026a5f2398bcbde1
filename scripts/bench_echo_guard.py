#!/usr/bin/env python3
"""Barge-in over open speakers: does the user get through the echo guard, and how fast?

The reply is real Piper speech (the bundled voice): a few sentences synthesized one by one
and played back to back, as ``talk`` plays them, with the pauses Piper leaves between them
and, with ``--gaps``, extra silence between them (the next sentence arriving late).
The microphone hears that reply as open speakers leak it (``--echo`` gains, 40 ms later)
plus a user saying one of the sample questions at ``--levels`` dB over the samples' level,
starting at onsets spread over the reply. Every 20 ms block goes through the real pieces:
the Silero segmenter, ``EchoGuard`` and ``BargeIn.watch``, with the playback level taken
from what was played on the microphone's clock (no real-time wait: the same audio gives
the same decisions, so the conditions below are compared on identical input).

Versions of the guard, on the same audio in the same run:

- ``before``: the barge-in fired only when the speech count *crossed* the requirement
  (300 ms, 500 ms while something plays), and the echo estimate learnt from every window
  the guard rejected. Speech past 300 ms but short of 500 ms when playback paused between
  sentences (the guard lets go) was then never heard for the rest of the utterance; and
  the user's own quieter syllables, rejected, raised the echo estimate until the user was
  rejected for good;
- ``reached``: the barge-in fires once the count *meets* the requirement;
- ``shipped``: that, and the echo estimate does not learn while an utterance the guard
  let through goes on;
- ``cancelled``: the echo canceller first (``pipeline.echo_cancel``, talk's default), its
  far end the reply as played, then the guard's level test alone
  (``EchoGuard.behind_canceller``: Silero's usual 0.5, no extra 200 ms);
- ``cancelled-strict``: the canceller, then the whole guard, as ``shipped``;
- ``cancelled-s27``: ``cancelled`` as before session 28, the far end handed to the
  canceller on the microphone's clock rather than ``FAR_LEAD_S`` ahead.

The echo here is a delayed, scaled copy of the reply: a linear path, the easy case for a
canceller (a real room adds reverberation and a loudspeaker's distortion, which leave more
of the echo; the guard then learns that as the echo and asks for more again).

And the echo alone (the user says nothing): any barge-in is the assistant interrupting
itself.

The report (``echo_guard.md``, ``echo_guard.json``): for every gap, echo gain, user level
and version, the barge-ins out of the trials, those that came before the user said a word
(the echo did it), and the delay from the user's first voiced block to the barge-in
(p50/p95). And what the barging utterance holds: how often its start left out more than
100 ms of the user's voiced onset (and the p95 of what was left out), and with
``--words`` what Whisper makes of it (the kept audio up to the barge-in, then the user
alone, as after the playback stopped): the WER against samples/transcripts.json and how
often the question's first word survived, for the echo-cancelled audio alone (before
session 27) and for the turn's choice now (that and the microphone's own samples decoded,
the transcript Whisper was surer of kept, when it was not sure of the first:
``pipeline.mic_tape``). ``--backtrack-ms 0
1000`` compares the segmenter's start before session 27 (the pre-roll only) with its
reach back over the user's softer first syllables, on the same audio.

Usage: scripts/bench_echo_guard.py [--out out/echo_guard] [--step 1.0] [--versions ...]
       (three versions with the default echoes, levels and gaps: ~12 minutes on a slow
       2-core host, ~6 on a fast one; each version adds a third. The decisions do not
       depend on the machine's speed, only the run time does)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from itertools import product
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from bench_asr import wer, words  # noqa: E402

from pipeline.asr import WhisperAsr  # noqa: E402
from pipeline.audio_in import SAMPLE_RATE, load_wav  # noqa: E402
from pipeline.bargein import BargeIn, EchoGuard, SustainedSpeech  # noqa: E402
from pipeline.echo_cancel import RESYNC_S, EchoCanceller, FarEnd  # noqa: E402
from pipeline.events import EventName, EventRecorder  # noqa: E402
from pipeline.mic import MicBlock, SegmenterConfig, SileroStream, UtteranceSegmenter  # noqa: E402
from pipeline.mic_tape import recognize_over_reply  # noqa: E402
from pipeline.playback_tap import level_before, loudest_rms, played_during  # noqa: E402

BLOCK = SAMPLE_RATE // 50  # the microphone's 20 ms blocks
ECHO_DELAY_S = 0.04
# CI, session 27: the reply's echo through PulseAudio, on which the canceller's residual
# interrupted the assistant (tests/recordings/README.md)
RECORDED = ROOT / "tests" / "recordings" / "open_speakers_ci27"
REPLIES = [
    ["The sky looks blue because of the way sunlight is scattered by the air.",
     "Sunlight is made of many colours, and blue light has a shorter wavelength.",
     "Short waves are scattered much more by the molecules in the atmosphere.",
     "So when you look up, you see blue light coming from every direction."],
    ["A good cup of tea starts with fresh water that has just boiled.",
     "Warm the pot first, then add one spoon of leaves for each cup.",
     "Let it steep for three to five minutes, depending on how strong you like it.",
     "Add milk or lemon if you wish, and enjoy it while it is hot."],
]


class CrossingSpeech(SustainedSpeech):
    """The rule before: fire only when the count crosses the requirement."""

    def window(self, voiced: bool, ms: float, required: float | None = None) -> bool:
        need = self.min_ms if required is None else required
        before = self.voiced_ms
        self.account(voiced, ms)
        return before < need <= self.voiced_ms


class LearnsAlways(EchoGuard):
    """The echo estimate before: it learnt from the user's rejected syllables too."""

    def observe(self, rms: float, play_rms: float, accepted: bool, *,
                user_speaking: bool = False) -> None:
        del user_speaking
        super().observe(rms, play_rms, accepted)


class ArrivalCanceller(EchoCanceller):
    """The far end before session 26: set again from a block's arrival time whenever it
    was more than ``RESYNC_S`` off the sample count, so a late callback's burst moved it
    ahead and back."""

    def _span(self, t: float, seconds: float) -> tuple[float, float]:
        start = t - seconds
        if abs(self._cursor - start) > RESYNC_S:
            self._cursor = start
        span = (self._cursor, self._cursor + seconds)
        self._cursor += seconds
        return span


class NoLeadCanceller(EchoCanceller):
    """The canceller before session 28: the far end on the microphone's own clock, not
    ``FAR_LEAD_S`` ahead of it."""

    def __init__(self, far: FarEnd, *,
                 user_speaking: Callable[[], bool] = lambda: False) -> None:
        super().__init__(far, user_speaking=user_speaking, lead_s=0.0)


# name: (barge-in detector, echo guard, echo canceller first or None)
VERSIONS: dict[str, tuple[type[SustainedSpeech], Callable[[], EchoGuard],
                          type[EchoCanceller] | None]] = {
    "before": (CrossingSpeech, LearnsAlways, None),
    "reached": (SustainedSpeech, LearnsAlways, None),
    "shipped": (SustainedSpeech, EchoGuard, None),
    "cancelled": (SustainedSpeech, EchoGuard.behind_canceller, EchoCanceller),
    "cancelled-s27": (SustainedSpeech, EchoGuard.behind_canceller, NoLeadCanceller),
    "cancelled-strict": (SustainedSpeech, EchoGuard, EchoCanceller),
    "cancelled-arrival": (SustainedSpeech, EchoGuard.behind_canceller, ArrivalCanceller),
}


def arrival(t: float, late_s: float, every_s: float) -> float:
    """When a block captured up to ``t`` reaches the program if, every ``every_s``
    (from 0.7 s on), the microphone's callback is ``late_s`` late: the blocks due in
    the meantime arrive together when it runs (both cores busy with Piper and
    llama-server: 127 ms seen in talk's log on the real echo path)."""
    if late_s <= 0:
        return t
    since = (t - 0.7) % every_s
    return t - since + late_s if t >= 0.7 and since < late_s else t


class KnownPlayback:
    """``PlaybackTap.level`` over a signal played from t = 0 on the microphone's clock."""

    def __init__(self, played: np.ndarray, span_s: float = 0.3) -> None:
        self.played, self.span_s = played, span_s

    def level(self, t: float) -> float:
        return level_before(self.played, SAMPLE_RATE, 0.0, t, self.span_s)

    def played_between(self, t0: float, t1: float, rate: int) -> np.ndarray:
        return played_during(self.played, SAMPLE_RATE, 0.0, t0, t1, rate)


class Trigger:
    """The ``Interruptible`` the barge-in task drives: remembers when it first fired."""

    def __init__(self, segmenter: UtteranceSegmenter) -> None:
        self.now = 0.0  # the microphone's clock: end of the block being decided
        self.at: float | None = None
        self.segmenter = segmenter
        self.first: int | None = None  # the barging utterance's first sample (pre-roll too)

    def interrupt(self, source: str = "user") -> bool:
        del source
        if self.at is not None:
            return False
        self.at, self.first = self.now, self.segmenter.first_sample
        return True


@dataclass
class Decision:
    """When the barge-in fired (s into the microphone's track) and what the utterance
    holds at that moment: the audio the segmenter saw from its first sample on."""

    at: float | None
    heard: np.ndarray = field(repr=False)
    own: np.ndarray = field(repr=False)  # the same before the canceller (the microphone's)


async def barge_in_at(vad: SileroStream, mic: np.ndarray, played: np.ndarray,
                      version: str, late_s: float = 0.0,
                      every_s: float = 2.0) -> float | None:
    """Seconds into ``mic`` at which the barge-in fired, or None (``barge_in``)."""
    return (await barge_in(vad, mic, played, version, late_s, every_s)).at


async def barge_in(vad: SileroStream, mic: np.ndarray, played: np.ndarray,
                   version: str, late_s: float = 0.0, every_s: float = 2.0,
                   backtrack_ms: int = 1000) -> Decision:
    """When the barge-in fired in ``mic``, if it did. With ``late_s`` the blocks arrive
    as from a late callback every ``every_s`` (``arrival``). ``backtrack_ms``: the
    segmenter's ``onset_backtrack_ms`` (0: the start before session 27)."""
    segmenter = UtteranceSegmenter(vad, SegmenterConfig(onset_backtrack_ms=backtrack_ms))
    trigger = Trigger(segmenter)
    seen: list[np.ndarray] = []
    own: list[np.ndarray] = []
    bargein = BargeIn(trigger)
    recorder = EventRecorder(1)
    recorder.listeners.append(bargein.on_event)
    recorder.emit(EventName.TURN_START)
    recorder.emit(EventName.PLAYBACK_START, index=0)

    async def blocks() -> AsyncIterator[MicBlock]:
        for i in range(0, mic.size - BLOCK + 1, BLOCK):
            if trigger.at is not None:
                return
            trigger.now = (i + BLOCK) / SAMPLE_RATE
            yield MicBlock(mic[i:i + BLOCK], arrival(trigger.now, late_s, every_s))

    async def recorded(source: AsyncIterator[MicBlock]) -> AsyncIterator[MicBlock]:
        async for block in source:
            seen.append(block.samples)
            own.append(block.samples if block.uncancelled is None else block.uncancelled)
            yield block

    detector, guard, canceller = VERSIONS[version]
    vad.reset()
    tap = KnownPlayback(played)
    mic_blocks = (canceller(tap, user_speaking=lambda: segmenter.in_speech
                            ).cancel(blocks()) if canceller else blocks())
    await bargein.watch(recorded(mic_blocks), segmenter, lambda u, p: None,
                        detector=detector(300.0), tap=tap, guard=guard())
    if trigger.at is None or trigger.first is None:
        return Decision(None, np.zeros(0, np.float32), np.zeros(0, np.float32))
    return Decision(trigger.at, np.concatenate(seen)[trigger.first:],
                    np.concatenate(own)[trigger.first:])


def to_mic_rate(audio: np.ndarray, rate: int) -> np.ndarray:
    """Linear resampling to 16 kHz: enough for levels and Silero (PulseAudio does this)."""
    if rate == SAMPLE_RATE:
        return np.asarray(audio, dtype=np.float32)
    n = int(audio.size * SAMPLE_RATE / rate)
    x = np.arange(n) * (rate / SAMPLE_RATE)
    out: np.ndarray = np.interp(x, np.arange(audio.size), audio).astype(np.float32)
    return out


def synthesize_replies() -> list[list[np.ndarray]]:
    """Each reply as its sentences, at the microphone's rate (the first one trimmed of its
    leading silence, as the turn does)."""
    from pipeline.tts import PiperTts, trim_leading_silence
    from services import models

    onnx, config = models.piper_voice()
    tts = PiperTts(onnx, config)
    tts.load()
    replies = []
    for sentences in REPLIES:
        parts = [tts.synthesize(s) for s in sentences]
        parts[0] = trim_leading_silence(parts[0], tts.sample_rate)
        replies.append([to_mic_rate(part.astype(np.float32) / 32768.0, tts.sample_rate)
                        for part in parts])
    return replies


def played(sentences: list[np.ndarray], gap_ms: float) -> np.ndarray:
    """The sentences back to back, ``gap_ms`` of silence between them (the next sentence
    late: an LLM or a Piper slower than playback)."""
    gap = np.zeros(int(gap_ms * SAMPLE_RATE / 1000), np.float32)
    parts: list[np.ndarray] = []
    for i, sentence in enumerate(sentences):
        parts.extend([gap, sentence] if i else [sentence])
    return np.concatenate(parts)


def onset_s(user: np.ndarray) -> float:
    """The user's first voiced 20 ms block (RMS > 0.02) in their own track."""
    for i in range(0, user.size - BLOCK + 1, BLOCK):
        if loudest_rms(user[i:i + BLOCK], SAMPLE_RATE) > 0.02:
            return i / SAMPLE_RATE
    return 0.0


def mix(reply: np.ndarray, echo: float, user: np.ndarray | None, at_s: float) -> np.ndarray:
    end = reply.size + SAMPLE_RATE
    if user is not None:
        end = max(end, int(at_s * SAMPLE_RATE) + user.size + SAMPLE_RATE // 2)
    mic = np.zeros(end, np.float32)
    delay = int(ECHO_DELAY_S * SAMPLE_RATE)
    mic[delay:delay + reply.size] += echo * reply
    if user is not None:
        a = int(at_s * SAMPLE_RATE)
        mic[a:a + user.size] += user
    return np.clip(mic, -1.0, 1.0)


def pct(values: list[float], q: float) -> float | None:
    return round(float(np.percentile(values, q)) * 1000) if values else None


def words_heard(asr: WhisperAsr | None, decision: Decision, user: np.ndarray,
                at_s: float) -> tuple[str, str] | None:
    """What Whisper makes of the barging utterance as the turn hands it over: what the
    segmenter kept up to the barge-in, then the user alone (playback stops at the
    barge-in). (The echo-cancelled audio alone, as before session 27; and the turn's
    choice now, ``recognize_over_reply``.)"""
    if asr is None or decision.at is None:
        return None
    rest = user[max(0, int((decision.at - at_s) * SAMPLE_RATE)):]
    cancelled = np.concatenate([decision.heard, rest])
    before = asr.recognize(cancelled)
    own = (None if np.array_equal(decision.own, decision.heard)
           else np.concatenate([decision.own, rest]))
    now, _ = recognize_over_reply(lambda audio: before if audio is cancelled
                                  else asr.recognize(audio), cancelled, own)
    return before.text, now.text


async def run(args: argparse.Namespace) -> dict[str, object]:
    vad = SileroStream()
    sentences = synthesize_replies()
    paths = sorted((ROOT / "samples").glob("*.wav"))
    users = [load_wav(p) for p in paths]
    transcripts = json.loads((ROOT / "samples" / "transcripts.json").read_text())
    references = [transcripts[p.name] for p in paths]
    asr = None
    if args.words:
        from services import models

        asr = WhisperAsr(models.whisper_model_dir())
        asr.load()
    rows: list[dict[str, object]] = []
    per_gap = {gap: [played(s, gap) for s in sentences] for gap in args.gaps}
    trials = {gap: [(r, u, at) for r, reply in enumerate(replies) for u in range(len(users))
                    for at in np.arange(0.5, reply.size / SAMPLE_RATE - 1.0, args.step)]
              for gap, replies in per_gap.items()}
    total = (len(args.late_ms) * len(args.echo) * len(args.versions) * len(args.backtrack_ms)
             * sum(len(per_gap[g]) + len(args.levels) * len(trials[g]) for g in args.gaps))
    done, started = 0, time.monotonic()

    def progress() -> None:
        print(f"\r{done}/{total} runs, {time.monotonic() - started:.0f} s", end="",
              file=sys.stderr, flush=True)

    for gap, replies in per_gap.items():
        for echo, late_ms, version, back in product(args.echo, args.late_ms, args.versions,
                                                    args.backtrack_ms):
            late = (late_ms / 1000, args.late_every_s)
            condition = {"gap_ms": gap, "echo": echo, "late_ms": late_ms,
                         "version": version, "backtrack_ms": back}
            alone = []
            for reply in replies:
                alone.append((await barge_in(vad, mix(reply, echo, None, 0.0), reply,
                                             version, *late, back)).at)
                done += 1
                progress()
            rows.append({**condition, "level_db": None, "trials": len(alone),
                         "barge_ins": sum(a is not None for a in alone), "early": 0,
                         "delay_p50_ms": None, "delay_p95_ms": None})
            for db in args.levels:
                said = [user * 10 ** (db / 20) for user in users]
                onsets = [onset_s(user) for user in said]
                delays, clipped, early = [], [], 0
                before: list[tuple[str, str]] = []  # (reference, cancelled audio's words)
                pairs: list[tuple[str, str]] = []  # (reference, the turn's choice)
                for r, u, at in trials[gap]:
                    decision = await barge_in(vad, mix(replies[r], echo, said[u], float(at)),
                                              replies[r], version, *late, back)
                    done += 1
                    progress()
                    if decision.at is None:
                        continue
                    delay = decision.at - at - onsets[u]
                    if delay < 0:  # before the user said a word: the echo did it
                        early += 1
                        continue
                    delays.append(delay)
                    # the user's voiced onset left out of the utterance
                    first_s = decision.at - decision.heard.size / SAMPLE_RATE
                    clipped.append(max(0.0, float(first_s - at - onsets[u])))
                    heard = words_heard(asr, decision, said[u], float(at))
                    if heard is not None:
                        before.append((references[u], heard[0]))
                        pairs.append((references[u], heard[1]))
                rows.append({**condition, "level_db": db, "trials": len(trials[gap]),
                             "barge_ins": len(delays), "early": early,
                             "delay_p50_ms": pct(delays, 50),
                             "delay_p95_ms": pct(delays, 95),
                             "clipped_100ms": int(sum(c > 0.1 for c in clipped)),
                             "clipped_p95_ms": pct(clipped, 95),
                             "wer_cancelled": round(wer(before)[0], 3) if before else None,
                             "wer": round(wer(pairs)[0], 3) if pairs else None,
                             "first_word": (int(sum(first_word_kept(r, h) for r, h in pairs))
                                            if pairs else None)})
    print(file=sys.stderr)
    return {"replies_s": [round(r.size / SAMPLE_RATE, 2) for r in per_gap[args.gaps[0]]],
            "users": len(users), "step_s": args.step, "rows": rows}


async def recorded_echo(vad: SileroStream, folder: Path, versions: list[str],
                        shifts_ms: list[int]) -> list[dict[str, object]]:
    """A real echo path: ``speaker.wav`` (what the sink played) and ``mic.wav`` (what the
    microphone heard, the assistant alone) recorded side by side, replayed with the far
    end shifted by each of ``shifts_ms`` (the two recordings' alignment, like the device
    latency the product measures, is known only to some tens of ms, and AEC3's residual
    depends on it). Any barge-in is the assistant interrupting itself."""
    speaker, mic = load_wav(folder / "speaker.wav"), load_wav(folder / "mic.wav")
    loud = np.flatnonzero(np.abs(speaker) > 0.02)
    start = max(0, int(loud[0]) - SAMPLE_RATE // 10) if loud.size else 0
    speaker, mic = speaker[start:], mic[start:]
    rows: list[dict[str, object]] = []
    for version in versions:
        fired = []
        for shift in shifts_ms:
            far = np.concatenate([np.zeros(shift * SAMPLE_RATE // 1000, np.float32), speaker])
            at = (await barge_in(vad, mic, far, version)).at
            fired.append(None if at is None else round(at, 2))
        rows.append({"recording": folder.name, "version": version, "shifts_ms": shifts_ms,
                     "fired_s": fired, "self_barge_ins": sum(f is not None for f in fired)})
    return rows


def recorded_report(rows: list[dict[str, object]]) -> str:
    lines = ["", "Recorded echo (the assistant alone; any barge-in interrupts itself), far "
             "end shifted by each of the shifts:", "",
             "| recording | version | self barge-ins | at s (per shift, - none) |",
             "|---|---|---:|---|"]
    for row in rows:
        fired = row["fired_s"]
        assert isinstance(fired, list)
        cells = " ".join("-" if f is None else f"{f:g}" for f in fired)
        lines.append(f"| {row['recording']} | {row['version']} | {row['self_barge_ins']}/"
                     f"{len(fired)} | {cells} |")
    return "\n".join(lines) + "\n"


def first_word_kept(reference: str, transcript: str) -> bool:
    """The question's first word among the transcript's first three."""
    return words(reference)[0] in words(transcript)[:3]


def report(result: dict[str, object]) -> str:
    rows = result["rows"]
    assert isinstance(rows, list)
    lines = [f"Replies {result['replies_s']} s of Piper speech; {result['users']} sample "
             f"questions, onsets every {result['step_s']} s.", "",
             "| gap ms | echo | late callbacks ms | user | version | backtrack ms "
             "| barge-ins | before the user spoke | delay p50 ms | p95 "
             "| onset cut > 100 ms | cut p95 ms | WER cancelled only | WER both "
             "| first word (both) |",
             "|---:|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for row in rows:
        user = "silent" if row["level_db"] is None else f"{row['level_db']:+g} dB"
        delay = row["delay_p50_ms"] if row["delay_p50_ms"] is not None else "-"
        p95 = row["delay_p95_ms"] if row["delay_p95_ms"] is not None else "-"
        late = row.get("late_ms", 0)  # runs before session 26 had no late callbacks
        heard = [row.get(k) for k in ("clipped_100ms", "clipped_p95_ms", "wer_cancelled",
                                      "wer")]
        first = row.get("first_word")
        heard.append(f"{first}/{row['barge_ins']}" if first is not None else None)
        cells = " | ".join("-" if v is None else str(v) for v in heard)
        lines.append(f"| {row['gap_ms']:g} | {row['echo']} | {late:g} | {user} | "
                     f"{row['version']} | {row.get('backtrack_ms', 0)} | "
                     f"{row['barge_ins']}/{row['trials']} | {row['early']} | {delay} | {p95} "
                     f"| {cells} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "out" / "echo_guard",
                    help="where echo_guard.md and echo_guard.json go")
    ap.add_argument("--step", type=float, default=1.0,
                    help="seconds between the user's onsets over each reply (default 1)")
    ap.add_argument("--echo", type=float, nargs="+", default=[0.25, 0.5],
                    help="echo path gains, speaker to microphone (default 0.25 0.5)")
    ap.add_argument("--gaps", type=float, nargs="+", default=[0.0, 500.0],
                    help="extra silence between the reply's sentences, ms (default 0 500)")
    ap.add_argument("--levels", type=float, nargs="+", default=[6.0, 12.0],
                    help="the user's level in dB over the samples (default 6 12)")
    ap.add_argument("--late-ms", type=float, nargs="+", default=[0.0],
                    help="the microphone's callback this late every --late-every-s, its "
                         "blocks then arriving together (default 0: never)")
    ap.add_argument("--late-every-s", type=float, default=2.0,
                    help="how often a callback is late (default 2 s)")
    ap.add_argument("--backtrack-ms", type=int, nargs="+", default=[1000],
                    help="the segmenter's onset_backtrack_ms: how far an utterance that "
                         "starts under the guard reaches back (default 1000; 0: before "
                         "session 27)")
    ap.add_argument("--words", action="store_true",
                    help="also transcribe each barging utterance with Whisper (WER, "
                         "whether the question's first word was kept)")
    ap.add_argument("--versions", nargs="+", choices=list(VERSIONS), default=list(VERSIONS),
                    help="which versions to run, on the same audio (default all)")
    ap.add_argument("--recorded", type=Path, nargs="*", default=[RECORDED],
                    help="folders with speaker.wav and mic.wav of a real echo path (the "
                         "assistant alone) to replay through each version (default: "
                         "the CI run in tests/recordings/; none: skip)")
    ap.add_argument("--shifts-ms", type=int, nargs="+", default=list(range(0, 130, 10)),
                    help="far-end shifts for --recorded, ms (default 0 to 120 by 10)")
    ap.add_argument("--recorded-only", action="store_true",
                    help="only the --recorded replays (a minute, not the whole bench)")
    args = ap.parse_args()
    result: dict[str, object] = {"rows": []} if args.recorded_only else asyncio.run(run(args))
    vad = SileroStream()
    result["recorded"] = [row for folder in args.recorded for row in asyncio.run(
        recorded_echo(vad, folder, args.versions, args.shifts_ms))]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "echo_guard.json").write_text(json.dumps(result, indent=1))
    recorded = result["recorded"]
    assert isinstance(recorded, list)
    text = ("" if args.recorded_only else report(result)) + recorded_report(recorded)
    (args.out / "echo_guard.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
