"""``voice-llm replay --live``: recorded turns through the live path, in real time.

Instead of handing each WAV over whole (its end is t = 0), the files are spoken into a
``RecordedMic`` one after another, each once the previous reply has finished, and the same
pieces as ``talk`` take the turns: the Silero segmenter, the barge-in watcher and the
``LiveTurnTaker`` (speculative start at the first pause, endpoint from the transcript;
``--no-speculate`` for the fixed end silence). So live turn-taking is measured repeatably,
on the pipeline's clocks (``first_audio_from_speech_end_ms``); ``scripts/bench_live.py``
measures the same through a real audio device path, on the audio.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import TYPE_CHECKING, Any

from services import turn_options
from services.errors import UserError

if TYPE_CHECKING:
    from pipeline.live import LiveTurn
    from pipeline.turn import TurnRunner

# A WAV that yields no turn (silence, a cough) is given up after its audio plus this.
NO_TURN_S = 3.0
# How long a turn (speculation, model, speech) may take before the replay gives up on it.
TURN_LIMIT_S = 180.0


async def replay_live(args: argparse.Namespace) -> int:
    from pipeline.bargein import BargeIn, SustainedSpeech
    from pipeline.live import LiveTurnTaker
    from pipeline.mic import SegmenterConfig, SileroStream, UtteranceEnd, UtteranceSegmenter
    from pipeline.recorded_mic import RecordedMic
    from pipeline.tasks import TaskSet
    from services.replay import _report, _save, _supervise, load_turn, make_sink
    from services.supervisor import Supervisor

    write_event = turn_options.EventWriter(args.events)
    assistant = await turn_options.assistant_for(args, args.mode)
    sink = make_sink(args.play, args.out_wav)
    tasks = TaskSet("replay-live")
    turns: list[dict[str, Any]] = []
    failures = 0
    supervisor = Supervisor(args.llm_url)
    try:
        await sink.open(assistant.tts.sample_rate)
        runner = assistant.runner(sink, listeners=[write_event])
        bargein = BargeIn(runner)
        runner.listeners.append(bargein.on_event)
        segmenter = UtteranceSegmenter(SileroStream(), SegmenterConfig(
            end_silence_ms=args.end_silence_ms,
            pause_ms=args.pause_ms if args.speculate else None))
        finished: asyncio.Queue[LiveTurn] = asyncio.Queue()
        live = LiveTurnTaker(runner, segmenter, on_turn=finished.put_nowait,
                             speculate=args.speculate)

        def on_utterance(u: UtteranceEnd, during_playback: bool) -> None:
            if not during_playback:
                live.on_utterance(u)

        mic = RecordedMic()
        tasks.spawn("mic", bargein.watch(mic, segmenter, on_utterance,
                                         detector=SustainedSpeech(300.0),
                                         on_segment=live.on_segment))
        for wav in args.wavs:
            audio = await load_turn(wav)
            if audio is None:
                failures += 1
                continue
            await mic.say(audio).wait()
            turn = await _next_turn(finished, runner)
            if turn is None:
                print(f"voice-llm replay: {wav}: no utterance heard (turn skipped)",
                      file=sys.stderr)
                failures += 1
                continue
            failures += _report(turn.result, str(wav), turns)
            await _supervise(turn.result, supervisor)  # a dead server: named, restarted
            _save(args.json, turns, runner, supervisor)
            await asyncio.sleep(0.5)  # the user takes a breath before the next question
        print(f"\nspeculation: {live.stats.to_dict()}")
        await live.close()
    finally:
        await tasks.cancel_all()
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
