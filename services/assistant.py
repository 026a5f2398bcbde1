"""The assembled assistant: real models loaded once, a client for a running llama-server.

Commands (replay, compare, talk, serve) build one ``Assistant`` and make a
``TurnRunner`` per conversation from it. Loading happens before "ready", with progress
shown, so the first turn is not slower than the others.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal

from pipeline.audio_out import AudioSink
from pipeline.conversation import Conversation
from pipeline.events import Listener
from pipeline.llm_client import LlmClient
from pipeline.turn import TurnConfig, TurnRunner
from services import models
from services.find_server import ensure_server

if TYPE_CHECKING:
    from pipeline.asr import WhisperAsr
    from pipeline.tts import PiperTts

log = logging.getLogger(__name__)


@dataclass
class Assistant:
    asr: WhisperAsr
    tts: PiperTts
    llm: LlmClient
    llm_url: str
    config: TurnConfig = field(default_factory=TurnConfig)

    def runner(self, sink: AudioSink, conversation: Conversation | None = None,
               listeners: list[Listener] | None = None,
               config: TurnConfig | None = None) -> TurnRunner:
        return TurnRunner(self.asr, self.llm, self.tts, sink, conversation,
                          config or self.config, listeners)

    async def close(self) -> None:
        await self.llm.close()


# Piper gets one thread: in streamed mode it synthesizes the first sentence while
# llama-server (-t 2) decodes the rest on the same 2 cores. Measured with `voice-llm compare
# --tts-threads N`: streamed tts_first_ms p50 364 -> 212 ms, p95 1208 -> 287 ms (README).
DEFAULT_TTS_THREADS = 1


async def load_assistant(llm_url: str, *, language: str = "en", asr_threads: int = 2,
                         tts_threads: int | None = DEFAULT_TTS_THREADS,
                         asr_window: Literal["fitted", "full"] = "fitted",
                         config: TurnConfig | None = None) -> Assistant:
    """Find or start llama-server, then load Whisper and Piper (once, with progress)."""
    from rich.console import Console

    from pipeline.asr import WhisperAsr
    from pipeline.tts import PiperTts

    url = await asyncio.to_thread(ensure_server, llm_url)
    console = Console(stderr=True)
    with console.status("loading Whisper base (int8) ..."):
        asr = WhisperAsr(await asyncio.to_thread(models.whisper_model_dir),
                         language=language, threads=asr_threads, window=asr_window)
        await asyncio.to_thread(asr.load)
    with console.status("loading Piper voice en_US-joe-medium ..."):
        onnx, cfg = models.piper_voice()
        tts = PiperTts(onnx, cfg, threads=tts_threads)
        await asyncio.to_thread(tts.load)
    llm = LlmClient(url)
    await llm.__aenter__()
    # The splitter follows the language Whisper is told to hear ("auto": all its tables).
    config = replace(config or TurnConfig(),
                     language=None if language in ("", "auto") else language)
    return Assistant(asr, tts, llm, url, config)
