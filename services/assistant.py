"""The assembled assistant: real models loaded once, a client for a running llama-server.

Commands (replay, compare, talk, serve) build one ``Assistant`` and make a
``TurnRunner`` per conversation from it. Loading happens before "ready", with progress
shown, so the first turn is not slower than the others. ASR and TTS are each either
in-process (Whisper, Piper: the default) or a Wyoming server (``--asr`` / ``--tts``
``wyoming://HOST:PORT``, services/engines.py); the turn runner cannot tell them apart.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field, replace
from typing import Literal

from pipeline.audio_out import AudioSink
from pipeline.conversation import Conversation
from pipeline.events import Listener
from pipeline.llm_client import LlmClient
from pipeline.stages import AsrEngine, TtsEngine
from pipeline.turn import AsrClock, TurnConfig, TurnRunner
from services import models
from services.engines import Engine, parse_engine
from services.errors import UserError
from services.find_server import ensure_server

log = logging.getLogger(__name__)


@dataclass
class Assistant:
    asr: AsrEngine
    tts: TtsEngine
    llm: LlmClient
    llm_url: str
    config: TurnConfig = field(default_factory=TurnConfig)
    asr_clock: AsrClock = field(default_factory=AsrClock)  # every conversation's Whisper

    def runner(self, sink: AudioSink, conversation: Conversation | None = None,
               listeners: list[Listener] | None = None,
               config: TurnConfig | None = None) -> TurnRunner:
        return TurnRunner(self.asr, self.llm, self.tts, sink, conversation,
                          config or self.config, listeners, self.asr_clock)

    async def close(self) -> None:
        await self.llm.close()


# Piper gets both cores. It synthesizes the first sentence while llama-server decodes the
# rest of the reply on the same cores; at equal priority one Piper thread was the least bad
# (streamed tts_first_ms p50 364 -> 212 ms), but the managed server now runs at nice 19
# (ServerOptions.nice), and then two threads synthesize a first chunk under decode in 96 ms
# against 105 with one thread and 145 for one thread at equal priority (70 ms with the
# server idle; `scripts/bench_cpu_share.py`, docs/results.md "The CPU split").
DEFAULT_TTS_THREADS = 2


async def load_assistant(llm_url: str, *, language: str = "en", asr_threads: int = 2,
                         tts_threads: int | None = DEFAULT_TTS_THREADS,
                         asr_window: Literal["fitted", "full"] = "fitted",
                         config: TurnConfig | None = None, asr: str = "local",
                         tts: str = "local") -> Assistant:
    """Find or start llama-server, then load (or reach) the ASR and TTS engines once, with
    progress. ``asr`` / ``tts``: ``local`` or ``wyoming://HOST:PORT``."""
    from rich.console import Console

    asr_at, tts_at = parse_engine(asr, "--asr"), parse_engine(tts, "--tts")
    url = await asyncio.to_thread(ensure_server, llm_url)
    console = Console(stderr=True)
    with console.status("loading Whisper base (int8) ..." if asr_at.local
                        else f"connecting to the Wyoming ASR server {asr_at} ..."):
        recognizer = await asyncio.to_thread(
            make_asr, asr_at, language=language, threads=asr_threads, window=asr_window)
    with console.status("loading Piper voice en_US-joe-medium ..." if tts_at.local
                        else f"connecting to the Wyoming TTS server {tts_at} ..."):
        synthesizer = await asyncio.to_thread(make_tts, tts_at, threads=tts_threads)
    llm = LlmClient(url)
    await llm.__aenter__()
    # The splitter follows the language Whisper is told to hear ("auto": all its tables).
    config = replace(config or TurnConfig(),
                     language=None if language in ("", "auto") else language)
    return Assistant(recognizer, synthesizer, llm, url, config)


def make_asr(engine: Engine, *, language: str, threads: int,
             window: Literal["fitted", "full"]) -> AsrEngine:
    """The loaded ASR engine (blocking: Whisper loads, or the server is asked and warmed)."""
    recognizer: AsrEngine
    if engine.local:
        from pipeline.asr import WhisperAsr

        recognizer = WhisperAsr(models.whisper_model_dir(), language=language,
                                threads=threads, window=window)
    else:
        from pipeline.wyoming_asr import WyomingAsr

        recognizer = WyomingAsr(engine.host, engine.port,
                                language=None if language in ("", "auto") else language)
    _load(recognizer, "--asr")
    return recognizer


def make_tts(engine: Engine, *, threads: int | None) -> TtsEngine:
    """The loaded TTS engine (blocking: Piper loads, or the server is asked and warmed)."""
    synthesizer: TtsEngine
    if engine.local:
        from pipeline.tts import PiperTts

        onnx, cfg = models.piper_voice()
        synthesizer = PiperTts(onnx, cfg, threads=threads)
    else:
        from pipeline.wyoming_tts import WyomingTts

        synthesizer = WyomingTts(engine.host, engine.port)
    _load(synthesizer, "--tts")
    return synthesizer


def _load(stage: AsrEngine | TtsEngine, option: str) -> None:
    from pipeline.wyoming_wire import WyomingError

    try:
        stage.load()
    except WyomingError as e:  # a server that is down or is the wrong kind: one line
        raise UserError(f"{option} {e}") from e
