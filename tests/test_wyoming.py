"""The Wyoming engines without the real servers: engine URLs, the options on the commands,
and the clients against a scripted Wyoming server on a real loopback socket (what it
receives, what the client makes of its answers, barge-in while it is silent, one-line
errors). tests/test_wyoming_integration.py runs the real servers."""

from __future__ import annotations

import argparse
import asyncio
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import numpy as np
import pytest
from wyoming.asr import Transcribe, Transcript
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.event import Event, async_read_event, async_write_event
from wyoming.info import AsrModel, AsrProgram, Attribution, Describe, Info, TtsProgram
from wyoming.tts import Synthesize

from pipeline.tts import SynthesisAborted
from pipeline.wyoming_asr import WyomingAsr
from pipeline.wyoming_tts import WyomingTts
from pipeline.wyoming_wire import WyomingError
from services.engines import Engine, parse_engine
from services.errors import UserError

ATTR = Attribution(name="test", url="")
ASR_INFO = Info(asr=[AsrProgram(name="fake-asr", description="", attribution=ATTR,
                                installed=True, version="1",
                                models=[AsrModel(name="m", description="", attribution=ATTR,
                                                 installed=True, languages=["en"],
                                                 version="1")])])
TTS_INFO = Info(tts=[TtsProgram(name="fake-tts", description="", attribution=ATTR,
                                installed=True, version="1", voices=[])])
Handler = Callable[[Event, asyncio.StreamWriter], Awaitable[bool]]


@asynccontextmanager
async def fake_server(info: Info, handle: Handler,
                      received: list[Event] | None = None) -> AsyncIterator[int]:
    """A Wyoming server on a free loopback port: answers describe with ``info``, passes
    every other event to ``handle`` (False closes the connection)."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while (event := await async_read_event(reader)) is not None:
                if received is not None:
                    received.append(event)
                if Describe.is_type(event.type):
                    await async_write_event(info.event(), writer)
                elif not await handle(event, writer):
                    break
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()


async def speak(writer: asyncio.StreamWriter, samples: np.ndarray, rate: int = 22050) -> None:
    fmt = {"rate": rate, "width": 2, "channels": 1}
    await async_write_event(AudioStart(**fmt).event(), writer)
    for part in np.array_split(samples.astype("<i2"), 2):
        await async_write_event(AudioChunk(audio=part.tobytes(), **fmt).event(), writer)
    await async_write_event(AudioStop().event(), writer)


# --- engine URLs and options -------------------------------------------------------------


def test_engine_urls() -> None:
    assert parse_engine("local").local and parse_engine("").local
    engine = parse_engine("wyoming://10.1.2.3:10300")
    assert engine == Engine("10.1.2.3", 10300) and str(engine) == "wyoming://10.1.2.3:10300"
    assert str(parse_engine("wyoming://[::1]:10200")) == "wyoming://::1:10200"
    for bad in ("http://host:10300", "wyoming://host", "wyoming://:10300",
                "wyoming://host:10300/x", "wyoming://host:port", "tcp://host:1"):
        with pytest.raises(UserError) as err:
            parse_engine(bad, "--tts")
        assert str(err.value).startswith("--tts: ") and "\n" not in str(err.value)


@pytest.mark.parametrize("command", ["replay", "compare", "talk"])
def test_commands_take_the_engine_options(command: str) -> None:
    import importlib

    module = importlib.import_module(f"services.{command}")
    p = argparse.ArgumentParser()
    module.add_arguments(p, command)
    wav = [] if command == "talk" else ["x.wav"]
    args = p.parse_args([*wav, "--asr", "wyoming://h:1", "--tts", "wyoming://h:2"])
    assert (args.asr, args.tts) == ("wyoming://h:1", "wyoming://h:2")
    assert p.parse_args(wav).asr == "local"


# --- ASR client --------------------------------------------------------------------------


async def test_asr_sends_the_utterance_as_16_bit_chunks_and_reads_the_transcript() -> None:
    received: list[Event] = []

    async def handle(event: Event, writer: asyncio.StreamWriter) -> bool:
        if AudioStop.is_type(event.type):
            await async_write_event(Transcript(text=" Why is the sky blue? ").event(), writer)
            return False  # like wyoming-faster-whisper: one utterance per connection
        return True

    async with fake_server(ASR_INFO, handle, received) as port:
        asr = WyomingAsr("127.0.0.1", port, language="en", gate=False)
        await asyncio.to_thread(asr.load)
        assert asr.server.startswith("fake-asr") and asr.engine.endswith(f":{port}")
        received.clear()
        audio = np.linspace(-0.5, 0.5, 16000 * 2 + 123, dtype=np.float32)
        text = await asyncio.to_thread(asr.transcribe, audio)
    assert text == "Why is the sky blue?"
    types = [e.type for e in received]
    assert types[0] == "transcribe" and types[1] == "audio-start" and types[-1] == "audio-stop"
    assert Transcribe.from_event(received[0]).language == "en"
    start = AudioStart.from_event(received[1])
    assert (start.rate, start.width, start.channels) == (16000, 2, 1)
    pcm = b"".join(e.payload or b"" for e in received if e.type == "audio-chunk")
    sent = np.frombuffer(pcm, dtype="<i2")
    assert len(sent) == len(audio)
    assert sent[0] == -16383 and sent[-1] == 16383
    assert asr.last_call.reply_ms >= 0


async def test_asr_on_a_tts_server_or_a_closed_port_says_so_in_one_line() -> None:
    async def nothing(event: Event, writer: asyncio.StreamWriter) -> bool:
        return True

    async with fake_server(TTS_INFO, nothing) as port:
        with pytest.raises(WyomingError, match="offers no speech recognition"):
            await asyncio.to_thread(WyomingAsr("127.0.0.1", port, gate=False).load)
    # the port is closed now
    from services.assistant import make_asr

    with pytest.raises(UserError) as err:
        await asyncio.to_thread(make_asr, parse_engine(f"wyoming://127.0.0.1:{port}"),
                                language="en", threads=1, window="fitted")
    assert str(err.value).startswith(f"--asr wyoming://127.0.0.1:{port}: cannot connect")
    assert "\n" not in str(err.value)


# --- TTS client --------------------------------------------------------------------------


async def test_tts_returns_the_sentence_audio_at_the_rate_the_server_said() -> None:
    texts: list[str] = []
    voice = (np.arange(4410) % 200 - 100).astype(np.int16)

    async def handle(event: Event, writer: asyncio.StreamWriter) -> bool:
        if Synthesize.is_type(event.type):
            texts.append(Synthesize.from_event(event).text)
            await speak(writer, voice)
        return True

    async with fake_server(TTS_INFO, handle) as port:
        tts = WyomingTts("127.0.0.1", port)
        assert not tts.loaded
        await asyncio.to_thread(tts.load)
        assert tts.sample_rate == 22050
        audio = await asyncio.to_thread(tts.synthesize, "**Boil** the water.")
        empty = await asyncio.to_thread(tts.synthesize, "* --- *")
    assert np.array_equal(audio, voice)
    assert texts == ["Hello.", "Boil the water."]  # warm-up, then the speakable text
    assert empty.size == 0  # nothing speakable: no request at all


async def test_abort_stops_a_synthesis_the_server_is_still_working_on() -> None:
    started = asyncio.Event()
    loop = asyncio.get_running_loop()

    async def handle(event: Event, writer: asyncio.StreamWriter) -> bool:
        if Synthesize.is_type(event.type):
            text = Synthesize.from_event(event).text
            if text == "Hello.":
                await speak(writer, np.ones(100, dtype=np.int16))
            else:  # a long sentence: audio-start, then silence for a long while
                await async_write_event(AudioStart(rate=22050, width=2, channels=1).event(),
                                        writer)
                loop.call_soon_threadsafe(started.set)
                await asyncio.sleep(30)
        return True

    async with fake_server(TTS_INFO, handle) as port:
        tts = WyomingTts("127.0.0.1", port, timeout=60)
        await asyncio.to_thread(tts.load)
        worker: dict[str, int] = {}

        def synthesize() -> np.ndarray:
            worker["id"] = threading.get_ident()
            return tts.synthesize("A long sentence that takes the server a while.")

        call = asyncio.create_task(asyncio.to_thread(synthesize))
        await started.wait()
        t0 = time.monotonic()
        tts.abort(worker["id"] + 1)  # another thread's: ours goes on
        await asyncio.sleep(0.05)
        assert not call.done()
        tts.abort(worker["id"])
        with pytest.raises(SynthesisAborted):
            await asyncio.wait_for(call, 10)  # 10 s: a hang fails, not a slow machine
        assert time.monotonic() - t0 < 10
        # the client is usable again for the next sentence
        again = await asyncio.to_thread(tts.synthesize, "Hello.")
        assert again.size == 100


async def test_a_server_error_event_is_the_sentence_error() -> None:
    from wyoming.error import Error

    async def handle(event: Event, writer: asyncio.StreamWriter) -> bool:
        if Synthesize.is_type(event.type):
            if Synthesize.from_event(event).text == "Hello.":
                await speak(writer, np.ones(10, dtype=np.int16))
            else:
                await async_write_event(Error(text="voice exploded").event(), writer)
        return True

    async with fake_server(TTS_INFO, handle) as port:
        tts = WyomingTts("127.0.0.1", port)
        await asyncio.to_thread(tts.load)
        with pytest.raises(WyomingError, match="voice exploded"):
            await asyncio.to_thread(tts.synthesize, "Say this.")


def test_a_wrong_engine_url_is_one_line_before_anything_starts(tmp_path) -> None:
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    proc = subprocess.run(
        [sys.executable, "-m", "services.cli", "replay", str(root / "samples/03_sky_blue.wav"),
         "--tts", "tcp://127.0.0.1:10200", "--llm-url", "http://127.0.0.1:9"],
        cwd=root, env={**os.environ, "VOICE_LLM_STATE": str(tmp_path / "state")},
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert proc.stderr.strip() == ("voice-llm replay: --tts: 'tcp://127.0.0.1:10200' is not "
                                   "an engine; use 'local' or 'wyoming://HOST:PORT'")
    assert not (tmp_path / "state").exists()  # no llama-server was started for it
