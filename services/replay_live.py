"""``voice-llm replay --live``: recorded turns through the live path, in real time.

Instead of handing each WAV over whole (its end is t = 0), the files are spoken into a
``RecordedMic`` one after another, each once the previous reply has finished, and the same
pieces as ``talk`` take the turns: the Silero segmenter, the barge-in watcher and the
``LiveTurnTaker`` (speculative start at the first pause, endpoint from the transcript;
``--no-speculate`` for the fixed end silence). So live turn-taking is measured repeatably,
on the pipeline's clocks (``first_audio_from_speech_end_ms``); ``scripts/bench_live.py``
measures the same through a real audio device path, on the audio. ``LiveConversation`` is
that machinery, shared with ``compare --live`` (speculation on vs off, services/compare_live.py).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from pipeline.endpoint import EndpointPolicy
from pipeline.pauses import PauseHabit
from services import turn_options
from services.errors import UserError

if TYPE_CHECKING:
    import numpy as np

    from pipeline.live import LiveTurn, SpeculationStats
    from pipeline.turn import TurnRunner

# A WAV that yields no turn (silence, a cough) is given up after its audio plus this.
NO_TURN_S = 3.0
# How long a turn (speculation, model, speech) may take before the replay gives up on it.
TURN_LIMIT_S = 180.0
# The user takes a breath before the next question.
BREATH_S = 0.5


@dataclass(frozen=True)
class LiveOptions:
    """How the turns are taken (the live options, docs/live.md)."""

    speculate: bool = True  # start at the first pause; False: a fixed end silence
    pause_ms: int = 200
    end_silence_ms: int = 600
    keep_warm: bool = True  # tiny engine passes while the user speaks (pipeline/warm.py)
    gap_ms: int | None = 96  # Whisper starts at this gap, before the pause (early_asr.py)
    complete_ms: int = EndpointPolicy.complete_ms  # the endpoint's wait after a whole sentence
    cut_prepared: bool = True  # voice cuts a reply still being prepared (pipeline/bargein.py)
    learn_pauses: bool = True  # the user's pauses lengthen the wait (pipeline/pauses.py)
    prime: bool = True  # prefill the next prompt's start after each turn (TurnConfig.prime_next)

    @classmethod
    def from_args(cls, args: argparse.Namespace, speculate: bool | None = None) -> LiveOptions:
        return cls(speculate=args.speculate if speculate is None else speculate,
                   pause_ms=args.pause_ms, end_silence_ms=args.end_silence_ms,
                   keep_warm=args.keep_warm, gap_ms=args.gap_ms or None,
                   complete_ms=args.complete_ms, cut_prepared=args.cut_prepared,
                   learn_pauses=args.learn_pauses, prime=args.prime)


class LiveConversation:
    """One conversation taken live from recorded turns: the one implementation behind
    ``replay --live`` and ``compare --live``.

    ``async with LiveConversation(runner, options) as live`` starts the microphone reader
    (Silero segmenter, barge-in watcher, ``LiveTurnTaker``); each ``await live.say(audio)``
    speaks one utterance into the ``RecordedMic`` in real time, after a breath if a turn
    came before, and returns the turn it started once that is over (None: nothing was
    heard as an utterance). Leaving closes a running turn as barge-in does and stops the
    reader. ``stats`` counts what speculation did in this conversation."""

    def __init__(self, runner: TurnRunner, options: LiveOptions) -> None:
        from pipeline.bargein import BargeIn
        from pipeline.live import LiveTurnTaker
        from pipeline.mic import SegmenterConfig, SileroStream, UtteranceSegmenter
        from pipeline.recorded_mic import RecordedMic
        from pipeline.tasks import TaskSet

        self.runner = runner
        runner.config = replace(runner.config, prime_next=options.prime)
        self._bargein = BargeIn(runner, cut_prepared=options.cut_prepared)
        runner.listeners.append(self._bargein.on_event)
        self._segmenter = UtteranceSegmenter(SileroStream(), SegmenterConfig(
            end_silence_ms=options.end_silence_ms,
            pause_ms=options.pause_ms if options.speculate else None,
            gap_ms=options.gap_ms if options.speculate else None))
        self._finished: asyncio.Queue[LiveTurn] = asyncio.Queue()
        self.taker = LiveTurnTaker(runner, self._segmenter, on_turn=self._finished.put_nowait,
                                   speculate=options.speculate, keep_warm=options.keep_warm,
                                   policy=EndpointPolicy(complete_ms=options.complete_ms),
                                   pauses=PauseHabit() if options.learn_pauses else None)
        self._mic = RecordedMic()
        self._tasks = TaskSet("live-conversation")
        self._turns = 0

    @property
    def stats(self) -> SpeculationStats:
        return self.taker.stats

    async def __aenter__(self) -> LiveConversation:
        from pipeline.bargein import SustainedSpeech

        self._tasks.spawn("mic", self._bargein.watch(
            self._mic, self._segmenter, self.taker.on_utterance,
            detector=SustainedSpeech(300.0),
            on_segment=self.taker.on_segment))
        return self

    async def __aexit__(self, *exc: object) -> None:
        try:
            await self.taker.close()
        finally:
            await self._tasks.cancel_all()
            await self.runner.drop_prime()

    async def say(self, audio: np.ndarray) -> LiveTurn | None:
        if self._turns:
            await asyncio.sleep(BREATH_S)
        await self._mic.say(audio).wait()
        turn = await _next_turn(self._finished, self.runner)
        self._turns += turn is not None
        return turn

    async def after(self, turn: LiveTurn) -> LiveTurn | None:
        """The next turn of the same file, once it is over: that of the voice that cut
        ``turn`` (a pause in the recording taken for the end, and the rest of it barging
        in), or of one queued behind it; None when there is none. Without it the rest
        would be cut in turn by the next file or the close."""
        if not (turn.result.interrupted or self.taker.pending
                or not self._finished.empty()):
            return None
        following = await _next_turn(self._finished, self.runner)
        self._turns += following is not None
        return following


async def replay_live(args: argparse.Namespace) -> int:
    from services.replay import _report, _save, _supervise, load_turn, make_sink
    from services.supervisor import Supervisor

    write_event = turn_options.EventWriter(args.events)
    assistant = await turn_options.assistant_for(args, args.mode)
    sink = make_sink(args.play, args.out_wav)
    turns: list[dict[str, Any]] = []
    failures = 0
    supervisor = Supervisor(args.llm_url)
    try:
        await sink.open(assistant.tts.sample_rate)
        runner = assistant.runner(sink, listeners=[write_event])
        async with LiveConversation(runner, LiveOptions.from_args(args)) as live:
            for wav in args.wavs:
                audio = await load_turn(wav)
                if audio is None:
                    failures += 1
                    continue
                turn = await live.say(audio)
                if turn is None:
                    print(f"voice-llm replay: {wav}: no utterance heard (turn skipped)",
                          file=sys.stderr)
                    failures += 1
                    continue
                while turn is not None:  # more than one when the file's pause was cut into
                    failures += _report(turn.result, str(wav), turns)
                    await _supervise(turn.result, supervisor)  # a dead server: restarted
                    _save(args.json, turns, runner, supervisor)
                    turn = await live.after(turn)
            print(f"\nspeculation: {live.stats.to_dict()}")
    finally:
        await sink.close()
        await assistant.close()
        write_event.close()
    return 1 if failures else 0


async def _next_turn(finished: asyncio.Queue[LiveTurn],
                     runner: TurnRunner) -> LiveTurn | None:
    """The turn the utterance just spoken started, once it is over; None if none started."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + NO_TURN_S
    while finished.empty() and not runner.busy:
        if loop.time() > deadline:
            return None
        await asyncio.sleep(0.02)
    try:
        return await asyncio.wait_for(finished.get(), TURN_LIMIT_S)
    except TimeoutError:
        raise UserError(f"a live turn took more than {TURN_LIMIT_S:.0f} s") from None
