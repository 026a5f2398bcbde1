"""The web service with aiohttp's test client: fake ASR/TTS, the fake llama-server (real HTTP).

Covers the page and health routes, POST /api/turn (raw and multipart WAV, size limits,
broken WAVs, the conversation surviving errors), the WebSocket protocol (text and audio
turns, malformed messages, the interrupt message, a new utterance barging in, session
cleanup) and the WebSocket sink's pacing / stop contract.
"""

from __future__ import annotations

import asyncio
import io
import json
import time
import wave
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import numpy as np
import pytest
from aiohttp.test_utils import TestClient, TestServer
from fake_llm import FakeLlm, Reply

from pipeline.endpoint import EndpointPolicy
from pipeline.llm_client import LlmClient
from pipeline.turn import AsrClock
from services.assistant import Assistant
from services.web import STATE, create_app
from services.web_live import GAP_ASR_MAX_MS
from services.ws_sink import Outbox, WebSocketSink

COMPLETE = EndpointPolicy.complete_ms  # the wait after a whole question or sentence

TTS_RATE = 22050
SENTENCES = ["Sleep at the same time every day.", " Keep your bedroom cool and dark.",
             " Avoid screens an hour before bed.", " A warm bath can help too."]
REPLY = "".join(SENTENCES)
UPLOAD_LIMIT = 64 * 1024


def tokens(text: str) -> list[str]:
    words = text.split(" ")
    return [(" " if i else "") + w for i, w in enumerate(words)]


class FakeAsr:
    text = "How do I sleep better?"

    def __init__(self) -> None:
        self.heard: list[int] = []  # samples of every utterance it was given
        self.seconds = 0.0  # how long each transcription takes (blocking, in its thread)

    def transcribe(self, audio: np.ndarray) -> str:
        self.heard.append(len(audio))
        time.sleep(self.seconds)
        return self.text if np.any(audio) else ""  # silence: nothing heard


class FakeTts:
    """``seconds_per_sentence`` of audio per call, produced instantly."""

    sample_rate = TTS_RATE

    def __init__(self, seconds_per_sentence: float = 0.15) -> None:
        self.seconds = seconds_per_sentence
        self.samples = 0

    def synthesize(self, text: str) -> np.ndarray:
        n = int(self.seconds * TTS_RATE)
        self.samples += n
        return np.full(n, 1000, dtype=np.int16)

    def abort(self, thread_id: int | None = None) -> None:
        """Instant synthesis: nothing is ever running to abort."""


def wav_bytes(seconds: float = 0.5, rate: int = 16000) -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        t = np.arange(int(seconds * rate)) / rate
        w.writeframes((np.sin(2 * np.pi * 220 * t) * 8000).astype("<i2").tobytes())
    return buf.getvalue()


@dataclass
class Web:
    client: TestClient[Any, Any]
    fake: FakeLlm
    tts: FakeTts
    asr: FakeAsr
    clock: AsrClock  # the assistant's: how long its last recognition took

    @property
    def state(self) -> Any:
        return self.client.server.app[STATE]


@pytest.fixture
def speculate() -> bool:
    return True  # serve's default; --no-speculate tests override this fixture


@pytest.fixture
def early_asr() -> bool:
    return True  # serve's default; --no-early-asr tests override this fixture


@pytest.fixture
async def web_app(speculate: bool, early_asr: bool) -> AsyncIterator[Web]:
    tts, asr = FakeTts(), FakeAsr()
    async with FakeLlm(Reply(tokens=tokens(REPLY), token_delay=0.005)) as fake:
        llm = LlmClient(fake.url)
        await llm.__aenter__()
        assistant = Assistant(asr, tts, llm, fake.url)  # type: ignore[arg-type]
        app = create_app(assistant, max_upload_bytes=UPLOAD_LIMIT, max_utterance_s=2.0,
                         speculate=speculate, early_asr=early_asr)
        try:
            async with TestClient(TestServer(app)) as client:
                yield Web(client, fake, tts, asr, assistant.asr_clock)
        finally:
            await llm.close()


# --- page and health -------------------------------------------------------------------
async def test_page_and_static_files_are_served(web_app: Web) -> None:
    page = await web_app.client.get("/")
    assert page.status == 200
    html = await page.text()
    assert "/static/app.js" in html and "/static/style.css" in html
    for name in ("app.js", "style.css"):
        assert (await web_app.client.get(f"/static/{name}")).status == 200
    health = await web_app.client.get("/health")
    assert (await health.json())["status"] == "ok"


# --- POST /api/turn --------------------------------------------------------------------
async def test_api_turn_with_a_raw_wav_body(web_app: Web) -> None:
    resp = await web_app.client.post("/api/turn", data=wav_bytes(),
                                     headers={"Content-Type": "audio/wav"})
    assert resp.status == 200, await resp.text()
    body = await resp.json()
    assert body["transcript"] == FakeAsr.text
    assert body["reply"] == REPLY
    assert body["error"] is None
    assert body["audio_s"] == pytest.approx(4 * 0.15, abs=0.01)
    m = body["metrics"]
    assert m["mode"] == "streamed" and m["first_audio_ms"] is not None
    assert m["asr_ms"] is not None and m["reply_sentences"] == 4


async def test_api_turn_with_multipart_and_serial_mode(web_app: Web) -> None:
    form = aiohttp.FormData()
    form.add_field("audio", wav_bytes(), filename="question.wav", content_type="audio/wav")
    resp = await web_app.client.post("/api/turn?mode=serial", data=form)
    assert resp.status == 200, await resp.text()
    body = await resp.json()
    assert body["metrics"]["mode"] == "serial" and body["reply"] == REPLY


async def test_oversized_uploads_get_413_and_the_conversation_survives(web_app: Web) -> None:
    big = wav_bytes(seconds=3.0)  # 96 kB > 64 kB
    resp = await web_app.client.post("/api/turn", data=big)
    assert resp.status == 413
    error = (await resp.json())["error"]
    assert "too large" in error and "\n" not in error

    async def chunked() -> AsyncIterator[bytes]:  # no Content-Length: counted while read
        for i in range(0, len(big), 8192):
            yield big[i:i + 8192]

    resp = await web_app.client.post("/api/turn", data=chunked())
    assert resp.status == 413

    form = aiohttp.FormData()
    form.add_field("audio", big, filename="big.wav")
    assert (await web_app.client.post("/api/turn", data=form)).status == 413

    ok = await web_app.client.post("/api/turn", data=wav_bytes())
    assert ok.status == 200
    assert len(web_app.state.api.runner.conversation.history) == 2


async def test_broken_wav_gets_400_with_one_line_and_the_conversation_survives(
        web_app: Web) -> None:
    first = await web_app.client.post("/api/turn", data=wav_bytes())
    assert first.status == 200
    broken = wav_bytes()[:30]  # RIFF header, fmt chunk cut off
    resp = await web_app.client.post("/api/turn", data=broken)
    assert resp.status == 400
    error = (await resp.json())["error"]
    assert error.startswith("upload.wav: truncated") and "\n" not in error
    resp = await web_app.client.post("/api/turn", data=b"hello, not audio at all")
    assert (await resp.json())["error"] == "upload.wav: not a WAV file (RIFF header missing)"
    form = aiohttp.FormData()
    form.add_field("audio", broken, filename="mine.wav")
    resp = await web_app.client.post("/api/turn", data=form)
    assert (await resp.json())["error"].startswith("mine.wav: ")

    again = await web_app.client.post("/api/turn", data=wav_bytes())
    assert again.status == 200
    history = web_app.state.api.runner.conversation.history
    assert [m["role"] for m in history] == ["user", "assistant"] * 2


async def test_api_rejects_empty_bodies_and_bad_modes(web_app: Web) -> None:
    resp = await web_app.client.post("/api/turn", data=b"")
    assert resp.status == 400 and "empty body" in (await resp.json())["error"]
    resp = await web_app.client.post("/api/turn?mode=fast", data=wav_bytes())
    assert resp.status == 400 and "mode" in (await resp.json())["error"]
    resp = await web_app.client.post("/api/turn", data=_silent_wav())
    assert resp.status == 422  # the turn ran; nothing was heard
    assert "no speech" in (await resp.json())["error"]


def _silent_wav() -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(b"\0\0" * 1600)
    return buf.getvalue()


async def test_api_reset_forgets_the_conversation(web_app: Web) -> None:
    await web_app.client.post("/api/turn", data=wav_bytes())
    assert (await web_app.client.post("/api/reset")).status == 200
    assert web_app.state.api.runner.conversation.history == []


# --- WebSocket -------------------------------------------------------------------------
@dataclass
class Received:
    messages: list[dict[str, Any]] = field(default_factory=list)
    frames: list[bytes] = field(default_factory=list)
    order: list[str] = field(default_factory=list)  # message types and "audio"

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [m for m in self.messages if m["type"] == kind]

    def events(self) -> list[str]:
        return [f"{m['event']['stage']}.{m['event']['event']}" for m in self.of("event")]

    @property
    def audio_samples(self) -> int:
        return sum(len(f) for f in self.frames) // 2


async def receive_until(ws: aiohttp.ClientWebSocketResponse, done: Any,
                        into: Received | None = None, limit_s: float = 10.0,
                        on_audio: Any = None) -> Received:
    got = into or Received()
    async with asyncio.timeout(limit_s):
        while True:
            msg = await ws.receive()
            if msg.type == aiohttp.WSMsgType.BINARY:
                got.frames.append(msg.data)
                got.order.append("audio")
                if on_audio is not None:
                    await on_audio(got)
                continue
            assert msg.type == aiohttp.WSMsgType.TEXT, msg
            data = json.loads(msg.data)
            got.messages.append(data)
            got.order.append(data["type"])
            if done(data):
                return got


def is_result(m: dict[str, Any]) -> bool:
    return bool(m["type"] == "turn.result")


def is_error(m: dict[str, Any]) -> bool:
    return bool(m["type"] == "error")


async def open_ws(web_app: Web) -> aiohttp.ClientWebSocketResponse:
    ws = await web_app.client.ws_connect("/ws")
    hello = await receive_until(ws, lambda m: m["type"] == "hello")
    fmt = hello.of("audio.format")[0]
    assert fmt["sample_rate"] == TTS_RATE and fmt["encoding"] == "s16le"
    assert hello.of("hello")[0]["input"]["sample_rate"] == 16000
    return ws


async def test_ws_text_turn_streams_events_sentences_audio_and_a_result(web_app: Web) -> None:
    ws = await open_ws(web_app)
    await ws.send_json({"type": "text", "text": "How do I sleep better?"})
    got = await receive_until(ws, is_result)
    names = got.events()
    for a, b in [("turn.start", "llm.request"), ("llm.first_token", "splitter.sentence"),
                 ("tts.end", "playback.start"), ("playback.start", "playback.end"),
                 ("playback.end", "turn.end")]:
        assert names.index(a) < names.index(b), (a, b, names)
    assert [s["text"] for s in got.of("sentence")] == [s.strip() for s in SENTENCES]
    result = got.of("turn.result")[0]
    assert result["reply"] == REPLY and not result["interrupted"]
    assert result["metrics"]["first_audio_ms"] is not None
    assert set(result["timeline"]["spans"]) == {"asr", "llm", "tts", "playback"}
    assert result["timeline"]["spans"]["playback"]
    # Every synthesized sample reached the browser, after playback.start and in order.
    assert got.audio_samples == web_app.tts.samples
    first_audio = got.order.index("audio")
    assert got.order.index("event") < first_audio < got.order.index("turn.result")
    event_dicts = [m["event"] for m in got.of("event")]
    assert all({"turn", "t", "stage", "event"} <= set(e) for e in event_dicts)
    await ws.close()


async def test_ws_audio_turn_gives_a_transcript(web_app: Web) -> None:
    ws = await open_ws(web_app)
    pcm = (np.sin(np.arange(8000) / 5) * 8000).astype("<i2").tobytes()
    await ws.send_json({"type": "audio.begin", "sample_rate": 16000})
    for i in range(0, len(pcm), 640):
        await ws.send_bytes(pcm[i:i + 640])
    await ws.send_json({"type": "audio.end", "trailing_silence_ms": 700})
    got = await receive_until(ws, is_result)
    assert got.of("transcript")[0]["text"] == FakeAsr.text
    result = got.of("turn.result")[0]
    assert result["transcript"] == FakeAsr.text
    assert "asr.start" in got.events() and "asr.end" in got.events()
    # The page's endpoint wait: in turn.start, the metrics, and a span before t = 0.
    start = next(m["event"] for m in got.of("event") if m["event"]["event"] == "start"
                 and m["event"]["stage"] == "turn")
    assert start["speech_end_ms"] == 700
    assert result["timeline"]["spans"]["endpoint"] == [[-0.7, 0.0]]
    assert result["timeline"]["start"] == -0.7
    m = result["metrics"]
    assert m["first_audio_from_speech_end_ms"] == pytest.approx(m["first_audio_ms"] + 700,
                                                                abs=0.2)

    # Another rate is resampled by PyAV on the server; a whole WAV works as one message.
    await ws.send_json({"type": "audio.begin", "sample_rate": 48000})
    await ws.send_bytes(pcm * 3)
    await ws.send_json({"type": "audio.end"})
    got = await receive_until(ws, is_result)
    assert got.of("turn.result")[0]["transcript"] == FakeAsr.text
    await ws.send_bytes(wav_bytes())
    got = await receive_until(ws, is_result)
    assert got.of("turn.result")[0]["error"] is None
    await ws.close()


@pytest.mark.parametrize("message, expected", [
    ("not json", "malformed message (not JSON)"),
    ("[1, 2]", "malformed message: expected a JSON object"),
    ('{"type": 3}', "malformed message: expected a JSON object"),
    ('{"type": "dance"}', "unknown message type 'dance'"),
    ('{"type": "audio.end"}', "audio.end without audio.begin"),
    ('{"type": "audio.pause", "pause": 1}', "audio.pause without audio.begin"),
    ('{"type": "audio.gap", "voiced_ms": 300}', "audio.gap without audio.begin"),
    ('{"type": "audio.resume"}', "audio.resume without audio.begin"),
    ('{"type": "audio.begin", "sample_rate": "fast"}', "audio.begin: sample_rate must be"),
    ('{"type": "text", "text": "   "}', "text: \"text\" must be a non-empty string"),
    ('{"type": "text", "text": "' + "x" * 2001 + '"}', "text: longer than 2000"),
    (b"\x00\x01\x02\x03", "binary message outside audio.begin/audio.end"),
    (b"RIFF" + b"\0" * 40, "uploaded WAV: "),
])
async def test_ws_malformed_messages_get_one_line_and_the_session_survives(
        web_app: Web, message: str | bytes, expected: str) -> None:
    ws = await open_ws(web_app)
    if isinstance(message, bytes):
        await ws.send_bytes(message)
    else:
        await ws.send_str(message)
    got = await receive_until(ws, is_error)
    error = got.of("error")[0]["message"]
    assert error.startswith(expected), error
    assert "\n" not in error
    await ws.send_json({"type": "text", "text": "still there?"})
    got = await receive_until(ws, is_result)
    assert got.of("turn.result")[0]["reply"] == REPLY
    assert not got.of("error")
    await ws.close()


@pytest.mark.parametrize("trailing", [-5, "long", True, 10**9])
async def test_ws_a_bad_endpoint_wait_gets_one_line_and_no_turn(web_app: Web,
                                                                trailing: Any) -> None:
    ws = await open_ws(web_app)
    await ws.send_json({"type": "audio.begin", "sample_rate": 16000, "input_id": "c1"})
    await ws.send_bytes(b"\1\0" * 1600)
    await ws.send_json({"type": "audio.end", "trailing_silence_ms": trailing})
    error = (await receive_until(ws, is_error)).of("error")[0]
    assert error["message"].startswith("audio.end: trailing_silence_ms must be a number")
    assert error["input_id"] == "c1"
    await ws.send_json({"type": "text", "text": "still there?"})
    assert (await receive_until(ws, is_result)).of("turn.result")[0]["turn"] == 1
    await ws.close()


async def test_ws_broken_wav_then_good_turn_keeps_the_history(web_app: Web) -> None:
    ws = await open_ws(web_app)
    await ws.send_json({"type": "text", "text": "first"})
    await receive_until(ws, is_result)
    await ws.send_bytes(wav_bytes()[:40])
    got = await receive_until(ws, is_error)
    assert got.of("error")[0]["message"].startswith("uploaded WAV: truncated")
    await ws.send_json({"type": "text", "text": "second"})
    got = await receive_until(ws, is_result)
    assert got.of("turn.result")[0]["turn"] == 2  # the broken upload never became a turn
    (session,) = web_app.state.sessions  # one browser session, its own history
    await ws.close()
    assert session


async def test_ws_wav_message_over_the_upload_limit_gets_one_line(web_app: Web) -> None:
    ws = await open_ws(web_app)
    await ws.send_bytes(wav_bytes(seconds=3.0))  # 96 kB > 64 kB
    got = await receive_until(ws, is_error)
    assert got.of("error")[0]["message"] == f"WAV message larger than {UPLOAD_LIMIT} bytes"
    await ws.send_bytes(wav_bytes())
    got = await receive_until(ws, is_result)
    assert got.of("turn.result")[0]["turn"] == 1
    await ws.close()


async def test_server_shutdown_closes_every_session(web_app: Web) -> None:
    from services.web import close_sessions

    sockets = [await open_ws(web_app) for _ in range(2)]
    assert len(web_app.state.sessions) == 2
    await close_sessions(web_app.client.server.app)
    for ws in sockets:
        msg = await ws.receive()
        assert msg.type == aiohttp.WSMsgType.CLOSE
        assert msg.data == aiohttp.WSCloseCode.GOING_AWAY
    await asyncio.sleep(0)
    assert not web_app.state.sessions


async def test_ws_utterance_over_the_limit_is_dropped_with_one_error(web_app: Web) -> None:
    ws = await open_ws(web_app)
    await ws.send_json({"type": "audio.begin", "sample_rate": 16000})
    second = b"\0\1" * 16000
    for _ in range(4):  # 4 s > the 2 s limit of this app
        await ws.send_bytes(second)
    await ws.send_json({"type": "audio.end"})
    await ws.send_json({"type": "text", "text": "after"})
    got = await receive_until(ws, is_result)
    errors = got.of("error")
    assert len(errors) == 1 and errors[0]["message"] == "utterance longer than 2 s: dropped"
    assert got.of("turn.result")[0]["turn"] == 1
    await ws.close()


async def test_ws_input_ids_name_the_turn_and_the_error(web_app: Web) -> None:
    ws = await open_ws(web_app)
    await ws.send_json({"type": "audio.begin", "sample_rate": 16000, "input_id": "c1"})
    for _ in range(3):  # 3 s > the 2 s limit of this app
        await ws.send_bytes(b"\0\1" * 16000)
    await ws.send_json({"type": "audio.end"})
    await ws.send_json({"type": "text", "text": "after", "input_id": "c2"})
    got = await receive_until(ws, is_result)
    assert [e["input_id"] for e in got.of("error")] == ["c1"]
    assert {m["input_id"] for m in got.of("event")} == {"c2"}
    assert got.of("turn.result")[0]["input_id"] == "c2"
    await ws.send_json({"type": "text", "text": "x", "input_id": 7})
    got = await receive_until(ws, is_error)
    assert got.of("error")[0]["message"].startswith("text: \"input_id\" must be a string")
    await ws.close()


async def test_ws_interrupt_stops_audio_hangs_up_and_keeps_what_was_heard(
        web_app: Web) -> None:
    web_app.tts.seconds = 1.0
    web_app.fake.reply = Reply(tokens=tokens(REPLY), token_delay=0.05)
    ws = await open_ws(web_app)
    await ws.send_json({"type": "text", "text": "How do I sleep better?"})
    sent_interrupt = False

    async def interrupt_after_some_audio(got: Received) -> None:
        nonlocal sent_interrupt
        if not sent_interrupt and got.audio_samples >= TTS_RATE // 4:
            sent_interrupt = True
            await ws.send_json({"type": "interrupt"})

    got = await receive_until(ws, is_result, on_audio=interrupt_after_some_audio)
    names = got.events()
    detected = next(m["event"] for m in got.of("event")
                    if m["event"]["event"] == "detected")
    assert detected["source"] == "browser" and detected["playing"] is True
    assert "llm.closed" in names and names.index("bargein.detected") < names.index("llm.closed")
    stop_at = got.order.index("audio.stop")
    assert "audio" not in got.order[stop_at:]  # nothing audible after the stop message
    stopped = next(m["event"] for m in got.of("event") if m["event"]["event"] == "stopped")
    # The count is the schedule's: no more than was sent, short of the whole sentence.
    assert 0 < stopped["played_samples"] <= got.audio_samples < TTS_RATE
    result = got.of("turn.result")[0]
    assert result["interrupted"] and len(result["heard"]) < len(REPLY)
    assert result["timeline"]["marks"]["barge-in"]
    record = await web_app.fake.wait_disconnect()
    assert record.outcome == "client_gone"

    web_app.tts.seconds = 0.1
    await ws.send_json({"type": "interrupt"})  # nothing running: ignored, no error
    await ws.send_json({"type": "text", "text": "and then?"})
    got = await receive_until(ws, is_result)
    assert not got.of("error") and not got.of("turn.result")[0]["interrupted"]
    await ws.close()


async def test_ws_new_utterance_while_speaking_barges_in(web_app: Web) -> None:
    web_app.tts.seconds = 1.0
    ws = await open_ws(web_app)
    await ws.send_json({"type": "text", "text": "tell me a lot"})
    first = await receive_until(ws, lambda m: m["type"] == "event"
                                and m["event"]["event"] == "start"
                                and m["event"]["stage"] == "playback")
    web_app.tts.seconds = 0.1
    await ws.send_json({"type": "text", "text": "stop, something else"})
    got = await receive_until(ws, is_result, into=first)
    interrupted = got.of("turn.result")[0]
    assert interrupted["turn"] == 1 and interrupted["interrupted"]
    detected = [m["event"] for m in got.of("event") if m["event"]["event"] == "detected"]
    assert detected[0]["source"] == "new-utterance"
    got = await receive_until(ws, is_result)
    assert got.of("turn.result")[0]["turn"] == 2
    assert not got.of("turn.result")[0]["interrupted"]
    await ws.close()


async def test_closing_the_page_mid_turn_hangs_up_and_forgets_the_session(
        web_app: Web) -> None:
    web_app.tts.seconds = 1.0
    web_app.fake.reply = Reply(tokens=tokens(REPLY), token_delay=0.1)
    ws = await open_ws(web_app)
    assert len(web_app.state.sessions) == 1
    assert (await (await web_app.client.get("/health")).json())["sessions"] == 1
    await ws.send_json({"type": "text", "text": "a long answer please"})
    await receive_until(ws, lambda m: m["type"] == "sentence")
    await ws.close()
    record = await web_app.fake.wait_disconnect()
    assert record.outcome == "client_gone"  # the LLM stream was closed, not left running
    if sessions := list(web_app.state.sessions.values()):
        await asyncio.wait(sessions, timeout=5)
    await asyncio.sleep(0)  # done-callbacks run on the next loop iteration
    assert not web_app.state.sessions


# --- hands-free: speculation at a pause, the listening endpoint (services/web_live.py) ---
VOICE = (np.sin(np.arange(16000) / 5) * 8000).astype("<i2").tobytes()  # 1 s of "speech"
HALF = VOICE[:8000]  # 0.25 s: 4000 samples
SILENCE = b"\0\0" * 3200  # 200 ms


async def send_pcm(ws: aiohttp.ClientWebSocketResponse, pcm: bytes) -> None:
    for i in range(0, len(pcm), 640):  # the page's 20 ms frames
        await ws.send_bytes(pcm[i:i + 640])


def is_endpoint(m: dict[str, Any]) -> bool:
    return bool(m["type"] == "endpoint")


def event_named(name: str) -> Any:
    stage, event = name.split(".")
    return lambda m: (m["type"] == "event" and m["event"]["stage"] == stage
                      and m["event"]["event"] == event)


def holds(got: Received) -> list[tuple[str, int, str | None]]:
    """The hold / ready messages: (type, pause, reason)."""
    return [(m["type"], m["pause"], m.get("reason")) for m in got.messages
            if m["type"] in ("hold", "ready")]


async def test_ws_a_pause_speculates_gated_and_the_end_confirms_it(web_app: Web) -> None:
    ws = await open_ws(web_app)
    assert web_app.state.speculate
    await ws.send_json({"type": "audio.begin", "sample_rate": 16000, "input_id": "c1"})
    await send_pcm(ws, VOICE[:16000] + SILENCE)
    await ws.send_json({"type": "audio.pause", "pause": 1, "silence_ms": 200})
    got = await receive_until(ws, is_endpoint)
    endpoint = got.of("endpoint")[0]
    # the policy on the speculative transcript: a question of 5 words
    assert endpoint == {"type": "endpoint", "input_id": "c1", "pause": 1, "turn": 1,
                        "wait_ms": COMPLETE, "reason": "question", "learned": False,
                        "pitch_fall_st": endpoint["pitch_fall_st"]}
    await ws.send_json({"type": "interrupt"})  # nothing audible yet: no barge-in
    await receive_until(ws, event_named("tts.end"), into=got)
    # Ready to play, but nothing reached the page, and all it saw is marked speculative.
    assert not got.frames
    assert got.events()[:2] == ["turn.start", "speculation.start"]
    assert "speculation.endpoint" in got.events()
    assert all(m.get("speculative") for m in got.messages
               if m["type"] in ("event", "transcript", "sentence"))
    await send_pcm(ws, SILENCE + SILENCE[:1600])  # the page's silence up to the endpoint
    await ws.send_json({"type": "audio.end", "trailing_silence_ms": 500})
    got = await receive_until(ws, is_result, into=got)
    names = got.events()
    assert "bargein.detected" not in names
    assert names.index("speculation.confirmed") < names.index("playback.start")
    assert got.audio_samples == web_app.tts.samples > 0  # the whole reply, after the end
    confirmed = next(m for m in got.messages if event_named("speculation.confirmed")(m))
    assert "speculative" not in confirmed and confirmed["event"]["endpoint_ms"] == 500
    result = got.of("turn.result")[0]
    assert result["turn"] == 1 and result["reply"] == REPLY and not result["abandoned"]
    assert result["speculation"] == {"pauses": 1, "started": 1, "cancelled": 0,
                                     "gaps": 0, "early_asr_started": 0, "early_asr_used": 0,
                                     "early_asr_slow": 0,
                                     "state": "confirmed", "wait_ms": COMPLETE,
                                     "reason": "question", "learned": False,
                                     "endpoint_ms": 500.0}
    # t = 0 is the pause: the endpoint span runs from the last voiced sound to the
    # confirmation, across t = 0.
    (a, b), = result["timeline"]["spans"]["endpoint"]
    assert a == -0.2 and b == pytest.approx(confirmed["event"]["t"], abs=1e-3) and b > 0
    m = result["metrics"]
    assert m["speech_end_ms"] == 200 and m["speculation_confirmed_ms"] is not None
    assert m["overhead_ms"] is not None
    assert len(web_app.fake.requests) == 1
    await ws.close()


async def test_ws_a_speculated_pause_holds_the_pages_end_until_its_first_audio(
        web_app: Web) -> None:
    ws = await open_ws(web_app)
    await ws.send_json({"type": "audio.begin", "sample_rate": 16000, "input_id": "c1"})
    await send_pcm(ws, VOICE[:16000] + SILENCE)
    await ws.send_json({"type": "audio.pause", "pause": 1, "silence_ms": 200})
    got = await receive_until(ws, lambda m: m["type"] == "ready")
    assert got.of("hold") == [{"type": "hold", "input_id": "c1", "pause": 1}]
    assert got.of("ready") == [{"type": "ready", "input_id": "c1", "pause": 1,
                                "reason": "audio"}]
    # The hold comes as the speculative turn starts, the ready with its first synthesized
    # sentence (the first tts.end), not before.
    seq = [f"{m['event']['stage']}.{m['event']['event']}" if m["type"] == "event"
           else m["type"] for m in got.messages]
    assert seq.index("hold") < seq.index("turn.start")
    assert seq.count("tts.end") == 1 and seq[-2:] == ["tts.end", "ready"]
    assert not got.frames
    await ws.send_json({"type": "audio.end", "trailing_silence_ms": 900})
    got = await receive_until(ws, is_result, into=got)
    result = got.of("turn.result")[0]
    assert result["speculation"]["state"] == "confirmed" and result["reply"] == REPLY
    assert result["speculation"]["endpoint_ms"] == 900  # held past the complete wait
    assert holds(got) == [("hold", 1, None), ("ready", 1, "audio")]  # once each
    await ws.close()


async def test_ws_speech_resuming_abandons_and_the_next_pause_speculates_again(
        web_app: Web) -> None:
    web_app.fake.reply = Reply(tokens=tokens(REPLY), token_delay=0.05)  # still streaming
    ws = await open_ws(web_app)
    await ws.send_json({"type": "audio.begin", "sample_rate": 16000, "input_id": "c1"})
    await send_pcm(ws, HALF + SILENCE)
    await ws.send_json({"type": "audio.pause", "pause": 1, "silence_ms": 200})
    got = await receive_until(ws, event_named("llm.first_token"))
    await ws.send_json({"type": "audio.resume", "pause": 1, "silence_ms": 320})
    got = await receive_until(ws, is_result, into=got)
    abandoned = got.of("turn.result")[0]
    assert abandoned["turn"] == 1 and abandoned["abandoned"]
    assert abandoned["speculation"]["state"] == "cancelled"
    assert holds(got) == [("hold", 1, None), ("ready", 1, "cancelled")]
    names = got.events()
    assert "playback.start" not in names and not got.frames  # nothing reached the page
    cancelled = next(m["event"] for m in got.messages
                     if event_named("speculation.cancelled")(m))
    assert cancelled["reason"] == "speech resumed after 320 ms"
    closed = next(m["event"] for m in got.messages if event_named("llm.closed")(m))
    assert closed["reason"] == "speculation"
    idle = next(m["event"] for m in got.messages if event_named("server.slot_idle")(m))
    assert idle["confirmed"] is True  # the verified hang-up
    assert (await web_app.fake.wait_disconnect()).outcome == "client_gone"

    web_app.fake.reply = Reply(tokens=tokens(REPLY), token_delay=0.005)
    await send_pcm(ws, HALF + SILENCE)  # the rest of the sentence, a pause again
    await ws.send_json({"type": "audio.pause", "pause": 2, "silence_ms": 200})
    got = await receive_until(ws, is_endpoint)
    assert got.of("endpoint")[0]["pause"] == 2 and got.of("endpoint")[0]["turn"] == 2
    await ws.send_json({"type": "audio.end", "trailing_silence_ms": 500})
    got = await receive_until(ws, is_result, into=got)
    result = got.of("turn.result")[0]
    assert result["turn"] == 2 and result["reply"] == REPLY
    assert result["speculation"]["pauses"] == 2 and result["speculation"]["started"] == 2
    assert result["speculation"]["cancelled"] == 1
    assert result["speculation"]["state"] == "confirmed"
    # the second speculation had the longer audio: both halves and both pauses
    assert web_app.asr.heard == [4000 + 3200, 2 * (4000 + 3200)]
    # The abandoned speculation left nothing in the history: the next request holds one
    # exchange before the new question.
    await ws.send_json({"type": "text", "text": "and then?"})
    await receive_until(ws, is_result)
    roles = [m["role"] for m in web_app.fake.requests[-1].body["messages"]]
    assert roles == ["system", "user", "assistant", "user"]
    await ws.close()
    scraped = await (await web_app.client.get("/metrics")).text()
    assert 'voice_llm_speculations_total{outcome="cancelled"} 1.0' in scraped
    assert 'voice_llm_speculations_total{outcome="confirmed"} 1.0' in scraped


async def paused_once(ws: aiohttp.ClientWebSocketResponse, given: str) -> Received:
    """A streamed utterance, half a question and its first pause: the messages up to the
    endpoint the server sends back for it."""
    await ws.send_json({"type": "audio.begin", "sample_rate": 16000, "input_id": given})
    await send_pcm(ws, HALF + SILENCE)
    await ws.send_json({"type": "audio.pause", "pause": 1, "silence_ms": 200})
    return await receive_until(ws, is_endpoint)


async def test_ws_going_on_after_a_finished_looking_pause_lengthens_the_next_wait(
        web_app: Web) -> None:
    ws = await open_ws(web_app)
    got = await paused_once(ws, "c1")
    assert got.of("endpoint")[0]["wait_ms"] == COMPLETE  # a question: the short wait...
    await ws.send_json({"type": "audio.resume", "pause": 1, "silence_ms": 700})  # ...not done
    got = await receive_until(ws, is_result, into=got)
    await send_pcm(ws, HALF + SILENCE)
    await ws.send_json({"type": "audio.pause", "pause": 2, "silence_ms": 200})
    got = await receive_until(ws, lambda m: is_endpoint(m) and m["pause"] == 2, into=got)
    second = got.of("endpoint")[-1]
    assert (second["wait_ms"], second["reason"]) == (850, "question")  # 700 + the margin
    assert (got.of("endpoint")[0]["learned"], second["learned"]) == (False, True)
    await ws.send_json({"type": "audio.end", "trailing_silence_ms": 850})
    got = await receive_until(ws, lambda m: is_result(m) and not m["abandoned"], into=got)
    endpoint = [m["event"] for m in got.messages if event_named("speculation.endpoint")(m)]
    assert [(e["complete_ms"], e["learned"]) for e in endpoint] == [
        (COMPLETE, False), (850, True)]
    answered = next(m for m in got.messages if is_result(m) and not m["abandoned"])
    assert answered["speculation"]["learned"] is True  # the page's chip says "from your pauses"
    await ws.close()


async def test_ws_an_end_after_speech_resumed_is_a_fresh_turn_on_the_whole_audio(
        web_app: Web) -> None:
    ws = await open_ws(web_app)
    got = await paused_once(ws, "c1")
    await ws.send_json({"type": "audio.resume", "pause": 1, "silence_ms": 250})
    await send_pcm(ws, HALF)
    await ws.send_json({"type": "audio.end", "trailing_silence_ms": 150})  # no pause since
    got = await receive_until(ws, lambda m: is_result(m) and not m["abandoned"], into=got)
    first, fresh = got.of("turn.result")
    assert first["speculation"]["state"] == "cancelled"
    assert fresh["turn"] == 2 and fresh["reply"] == REPLY and fresh["input_id"] == "c1"
    assert fresh["speculation"] == {"pauses": 1, "started": 1, "cancelled": 1,
                                    "gaps": 0, "early_asr_started": 0, "early_asr_used": 0,
                                    "early_asr_slow": 0,
                                    "state": None, "wait_ms": COMPLETE, "reason": "question",
                                    "learned": False, "endpoint_ms": None}
    assert web_app.asr.heard[-1] == 4000 + 3200 + 4000
    start = next(m for m in got.messages if event_named("turn.start")(m)
                 and m["event"]["turn"] == 2)
    assert "speculative" not in start and start["event"]["speech_end_ms"] == 150
    await ws.close()


async def test_ws_a_speculation_that_hears_nothing_is_dropped_unseen(web_app: Web) -> None:
    ws = await open_ws(web_app)
    await ws.send_json({"type": "audio.begin", "sample_rate": 16000, "input_id": "c1"})
    await send_pcm(ws, SILENCE * 3)  # noise the page took for a voice: Whisper hears nothing
    await ws.send_json({"type": "audio.pause", "pause": 1, "silence_ms": 200})
    got = await receive_until(ws, is_result)
    dropped = got.of("turn.result")[0]
    assert dropped["speculation"]["state"] == "dropped" and dropped["error"]
    # no audio will come of it: the page's end is released at once
    assert holds(got) == [("hold", 1, None), ("ready", 1, "dropped")]
    assert all(m.get("speculative") for m in got.of("event"))  # the page never shows it
    await send_pcm(ws, HALF)
    await ws.send_json({"type": "audio.end", "trailing_silence_ms": 700})
    got = await receive_until(ws, is_result)
    result = got.of("turn.result")[0]
    assert result["turn"] == 2 and result["error"] is None and result["reply"] == REPLY
    assert result["speculation"]["state"] is None
    await ws.close()


async def test_ws_no_pause_speculates_while_another_turn_runs(web_app: Web) -> None:
    web_app.tts.seconds = 1.0
    ws = await open_ws(web_app)
    await ws.send_json({"type": "text", "text": "tell me a lot", "input_id": "c1"})
    first = await receive_until(ws, event_named("playback.start"))
    await ws.send_json({"type": "audio.begin", "sample_rate": 16000, "input_id": "c2"})
    await send_pcm(ws, HALF + SILENCE)
    await ws.send_json({"type": "audio.gap", "silence_ms": 100, "voiced_ms": 250})
    await ws.send_json({"type": "audio.pause", "pause": 1, "silence_ms": 200})
    web_app.tts.seconds = 0.1
    await ws.send_json({"type": "audio.end", "trailing_silence_ms": 700})
    got = await receive_until(ws, lambda m: is_result(m) and m["turn"] == 2, into=first)
    assert not got.of("endpoint") and "speculation.start" not in got.events()
    assert not holds(got)  # no speculation: the page ends the utterance as it would
    interrupted, answer = got.of("turn.result")
    assert interrupted["interrupted"] and answer["input_id"] == "c2"
    assert answer["speculation"]["pauses"] == 1 and answer["speculation"]["started"] == 0
    # nor does a gap start Whisper: one transcription, the answer's
    assert answer["speculation"]["gaps"] == 1
    assert answer["speculation"]["early_asr_started"] == 0
    assert web_app.asr.heard == [4000 + 3200]
    await ws.close()


@pytest.mark.parametrize("speculate", [False])
async def test_ws_no_speculate_keeps_the_turn_for_the_end(web_app: Web) -> None:
    ws = await web_app.client.ws_connect("/ws")
    hello = await receive_until(ws, lambda m: m["type"] == "hello")
    assert hello.of("hello")[0]["speculate"] is False
    await ws.send_json({"type": "audio.begin", "sample_rate": 16000, "input_id": "c1"})
    await send_pcm(ws, HALF + SILENCE)
    await ws.send_json({"type": "audio.gap", "silence_ms": 100, "voiced_ms": 250})
    await ws.send_json({"type": "audio.pause", "pause": 1, "silence_ms": 200})
    await send_pcm(ws, SILENCE * 2)
    await ws.send_json({"type": "audio.end", "trailing_silence_ms": 700})
    got = await receive_until(ws, is_result)
    assert not got.of("endpoint") and "speculation.start" not in got.events()
    assert not holds(got)
    result = got.of("turn.result")[0]
    assert result["turn"] == 1 and result["reply"] == REPLY
    assert result["speculation"]["started"] == 0
    assert result["speculation"]["early_asr_started"] == 0  # no Whisper at the gap either
    assert result["timeline"]["spans"]["endpoint"] == [[-0.7, 0.0]]
    assert web_app.asr.heard == [4000 + 3 * 3200]  # one turn, on the whole utterance
    await ws.close()


@pytest.mark.parametrize("message, expected", [
    ({"type": "audio.pause", "pause": 0}, "audio.pause: pause must be an integer >= 1"),
    ({"type": "audio.pause", "pause": 1, "silence_ms": "x"},
     "audio.pause: silence_ms must be a number"),
    ({"type": "audio.resume", "silence_ms": -1}, "audio.resume: silence_ms must be a number"),
    ({"type": "audio.gap", "silence_ms": 100, "voiced_ms": "x"},
     "audio.gap: voiced_ms must be a number"),
    ({"type": "audio.pause", "pause": 1, "voiced_ms": -3},
     "audio.pause: voiced_ms must be a number"),
])
async def test_ws_bad_pause_messages_get_one_line(web_app: Web, message: dict[str, Any],
                                                  expected: str) -> None:
    ws = await open_ws(web_app)
    await ws.send_json({"type": "audio.begin", "sample_rate": 16000, "input_id": "c1"})
    await send_pcm(ws, HALF)
    await ws.send_json(message)
    error = (await receive_until(ws, is_error)).of("error")[0]
    assert error["message"].startswith(expected) and error["input_id"] == "c1"
    await ws.send_json({"type": "audio.end", "trailing_silence_ms": 700})
    assert (await receive_until(ws, is_result)).of("turn.result")[0]["error"] is None
    await ws.close()


# --- Whisper from the gap (services/web_gap.py) ------------------------------------------
GAP = SILENCE[:3200]  # 100 ms


def asr_start(got: Received) -> list[dict[str, Any]]:
    return [m["event"] for m in got.messages if event_named("asr.start")(m)]


async def test_ws_a_gap_starts_whisper_and_the_pause_takes_its_transcript(
        web_app: Web) -> None:
    web_app.asr.seconds = 0.15  # still running at the pause: the turn waits for it
    ws = await open_ws(web_app)
    await ws.send_json({"type": "audio.begin", "sample_rate": 16000, "input_id": "c1"})
    await send_pcm(ws, VOICE + GAP)
    await ws.send_json({"type": "audio.gap", "silence_ms": 100, "voiced_ms": 1000})
    await asyncio.sleep(0.1)  # the page's next 100 ms of silence
    await send_pcm(ws, GAP)
    await ws.send_json({"type": "audio.pause", "pause": 1, "silence_ms": 200,
                        "voiced_ms": 1000})
    got = await receive_until(ws, is_endpoint)
    # Whisper ran once, on the audio up to the gap; the turn waited for that transcript.
    assert web_app.asr.heard == [16000 + 1600]
    (start,) = asr_start(got)
    assert start["audio_s"] == 1.1 and 50 <= start["early_ms"] < 1000
    assert got.of("transcript")[0]["text"] == FakeAsr.text
    assert got.of("endpoint")[0]["reason"] == "question"
    await send_pcm(ws, SILENCE + SILENCE[:1600])
    await ws.send_json({"type": "audio.end", "trailing_silence_ms": 500})
    got = await receive_until(ws, is_result, into=got)
    result = got.of("turn.result")[0]
    assert result["reply"] == REPLY and result["transcript"] == FakeAsr.text
    spec = result["speculation"]
    assert spec["state"] == "confirmed" and spec["gaps"] == 1
    assert spec["early_asr_started"] == 1 and spec["early_asr_used"] == 1
    assert web_app.asr.heard == [16000 + 1600]
    await ws.close()


async def gap_then_pause_transcribed_at_the_pause(web_app: Web) -> dict[str, Any]:
    """One gap, its pause and the end, where the gap starts no transcription: Whisper runs
    at the pause, on the audio up to it. Returns the answer's ``speculation``."""
    ws = await open_ws(web_app)
    await ws.send_json({"type": "audio.begin", "sample_rate": 16000, "input_id": "c1"})
    await send_pcm(ws, VOICE + GAP)
    await ws.send_json({"type": "audio.gap", "silence_ms": 100, "voiced_ms": 1000})
    await send_pcm(ws, GAP)
    await ws.send_json({"type": "audio.pause", "pause": 1, "silence_ms": 200,
                        "voiced_ms": 1000})
    got = await receive_until(ws, is_endpoint)
    assert web_app.asr.heard == [16000 + 3200]  # at the pause, on the audio up to it
    (start,) = asr_start(got)
    assert "early_ms" not in start
    await send_pcm(ws, SILENCE + SILENCE[:1600])
    await ws.send_json({"type": "audio.end", "trailing_silence_ms": 500})
    got = await receive_until(ws, is_result, into=got)
    await ws.close()
    spec: dict[str, Any] = got.of("turn.result")[0]["speculation"]
    assert spec["state"] == "confirmed" and spec["gaps"] == 1
    assert spec["early_asr_started"] == 0 and spec["early_asr_used"] == 0
    return spec


@pytest.mark.parametrize("early_asr", [False])
async def test_ws_no_early_asr_counts_the_gap_and_transcribes_at_the_pause(
        web_app: Web) -> None:
    """serve --no-early-asr: the same messages as above, but Whisper waits for the pause
    (bench_page --gap-share measures the difference)."""
    spec = await gap_then_pause_transcribed_at_the_pause(web_app)
    assert spec["early_asr_slow"] == 0


async def test_ws_no_gap_transcription_where_whisper_runs_slow(web_app: Web) -> None:
    """Where the last recognition took longer than GAP_ASR_MAX_MS, a gap starts none (a
    wasted one would hold up the pause's): the gap is counted, Whisper waits for the
    pause, and the clock then holds this turn's recognition."""
    web_app.clock.last_ms = GAP_ASR_MAX_MS + 1
    spec = await gap_then_pause_transcribed_at_the_pause(web_app)
    assert spec["early_asr_slow"] == 1
    last = web_app.clock.last_ms
    assert last is not None and last < GAP_ASR_MAX_MS  # the fake's instant transcription


async def test_ws_voice_between_the_gap_and_the_pause_drops_the_gaps_transcript(
        web_app: Web) -> None:
    ws = await open_ws(web_app)
    await ws.send_json({"type": "audio.begin", "sample_rate": 16000, "input_id": "c1"})
    await send_pcm(ws, HALF + GAP)
    await ws.send_json({"type": "audio.gap", "silence_ms": 100, "voiced_ms": 250})
    await asyncio.sleep(0.1)
    # The voice came back before the pause (no message for that: the pause says it).
    await send_pcm(ws, HALF + SILENCE)
    await ws.send_json({"type": "audio.pause", "pause": 1, "silence_ms": 200,
                        "voiced_ms": 500})
    got = await receive_until(ws, is_endpoint)
    # The gap's transcription ran (on the first half) and was dropped; the turn ran its own
    # on the whole audio.
    assert sorted(web_app.asr.heard) == [4000 + 1600, 2 * 4000 + 1600 + 3200]  # threads race
    (start,) = asr_start(got)
    assert "early_ms" not in start and start["audio_s"] == 0.8
    await ws.send_json({"type": "audio.end", "trailing_silence_ms": 500})
    got = await receive_until(ws, is_result, into=got)
    spec = got.of("turn.result")[0]["speculation"]
    assert spec["state"] == "confirmed"
    assert spec["early_asr_started"] == 1 and spec["early_asr_used"] == 0
    await ws.close()


async def test_ws_one_gap_transcription_runs_at_a_time(web_app: Web) -> None:
    web_app.asr.seconds = 0.4
    ws = await open_ws(web_app)
    await ws.send_json({"type": "audio.begin", "sample_rate": 16000, "input_id": "c1"})
    await send_pcm(ws, HALF + GAP)
    await ws.send_json({"type": "audio.gap", "silence_ms": 100, "voiced_ms": 250})
    await send_pcm(ws, HALF + GAP)  # voice again, and the next gap while Whisper runs
    await ws.send_json({"type": "audio.gap", "silence_ms": 100, "voiced_ms": 500})
    await send_pcm(ws, GAP)
    await ws.send_json({"type": "audio.pause", "pause": 1, "silence_ms": 200,
                        "voiced_ms": 500})
    await ws.send_json({"type": "audio.end", "trailing_silence_ms": 500})
    got = await receive_until(ws, is_result)
    spec = got.of("turn.result")[0]["speculation"]
    assert spec["gaps"] == 2 and spec["early_asr_started"] == 1
    assert spec["early_asr_used"] == 0  # the first gap's words are not the pause's
    # Two transcriptions, the first gap's and the pause's whole utterance; their threads
    # race to start, so the order is not part of the contract.
    assert sorted(web_app.asr.heard) == [4000 + 1600, 2 * (4000 + 1600) + 1600]
    await ws.close()


async def test_ws_a_gap_without_a_pause_changes_nothing(web_app: Web) -> None:
    ws = await open_ws(web_app)
    # dropped with its utterance
    await ws.send_json({"type": "audio.begin", "sample_rate": 16000, "input_id": "c1"})
    await send_pcm(ws, HALF + GAP)
    await ws.send_json({"type": "audio.gap", "silence_ms": 100, "voiced_ms": 250})
    await ws.send_json({"type": "audio.cancel"})
    await asyncio.sleep(0.05)  # its transcription done (else the next gap starts none)
    # an utterance ended without a pause (e.g. the page's own limit) is an ordinary turn
    await ws.send_json({"type": "audio.begin", "sample_rate": 16000, "input_id": "c2"})
    await send_pcm(ws, HALF + GAP)
    await ws.send_json({"type": "audio.gap", "silence_ms": 100, "voiced_ms": 250})
    await send_pcm(ws, GAP)
    await ws.send_json({"type": "audio.end", "trailing_silence_ms": 200})
    got = await receive_until(ws, is_result)
    result = got.of("turn.result")[0]
    assert result["input_id"] == "c2" and result["reply"] == REPLY
    assert result["error"] is None and result["speculation"]["state"] is None
    assert "speculation.start" not in got.events() and not holds(got)
    assert "early_ms" not in asr_start(got)[0]
    assert result["speculation"]["gaps"] == 1
    assert result["speculation"]["early_asr_started"] == 1
    # two gaps' transcriptions (unused), and the turn's own on the whole utterance
    assert sorted(web_app.asr.heard) == [4000 + 1600, 4000 + 1600, 4000 + 3200]
    await ws.close()


# --- the words before a cut (pipeline/rejoin.py) ---------------------------------------
async def utterance(ws: aiohttp.ClientWebSocketResponse, web_app: Web, words: str,
                    given: str) -> None:
    """A streamed utterance Whisper hears as ``words``, ended without a pause."""
    web_app.asr.text = words
    await ws.send_json({"type": "audio.begin", "sample_rate": 16000, "input_id": given})
    await send_pcm(ws, HALF + SILENCE)
    await ws.send_json({"type": "audio.end", "trailing_silence_ms": 700})


async def speak_over(ws: aiohttp.ClientWebSocketResponse, got: Received, by: str | None,
                     heard_s: float = 0.0) -> Received:
    """Interrupt the next reply to play (``by``: "voice" as the page's voice onset sends it,
    None as its interrupt button) at its playback.start, or once ``heard_s`` of its audio
    reached the page."""
    message = {"type": "interrupt", **({"by": by} if by else {})}
    if not heard_s:
        got = await receive_until(ws, event_named("playback.start"), into=got)
        await ws.send_json(message)
        return got
    before, sent = got.audio_samples, False

    async def after_some_audio(got: Received) -> None:
        nonlocal sent
        if not sent and got.audio_samples - before >= heard_s * TTS_RATE:
            sent = True
            await ws.send_json(message)

    return await receive_until(ws, lambda m: sent, into=got, on_audio=after_some_audio)


def result_of(turn: int) -> Any:
    return lambda m: is_result(m) and m["turn"] == turn


def results(got: Received) -> dict[int, dict[str, Any]]:
    return {m["turn"]: m for m in got.of("turn.result")}


def user_messages(web_app: Web) -> list[str]:
    """The user messages of the last LLM request: the history's, then the new one."""
    return [m["content"] for m in web_app.fake.requests[-1].body["messages"]
            if m["role"] == "user"]


async def test_ws_words_cut_unheard_go_before_the_next_utterance(web_app: Web) -> None:
    web_app.tts.seconds = 1.0
    ws = await open_ws(web_app)
    await utterance(ws, web_app, "Call my sister.", "c1")
    got = await speak_over(ws, Received(), "voice")  # the rest of the request, at once
    web_app.tts.seconds = 0.1
    await utterance(ws, web_app, "After lunch.", "c2")
    got = await receive_until(ws, result_of(2), into=got)
    cut, answer = results(got)[1], results(got)[2]
    assert cut["interrupted"] and cut["heard"] == "" and cut["rejoined"] is None
    detected = next(m["event"] for m in got.messages if event_named("bargein.detected")(m))
    assert detected["source"] == "voice" and detected["turn"] == 1
    assert answer["transcript"] == "Call my sister. After lunch."
    assert answer["rejoined"] == {"text": "Call my sister.", "turn": 1}
    assert answer["input_id"] == "c2" and answer["reply"] == REPLY
    shown = next(m for m in got.of("transcript") if m["turn"] == 2)
    assert shown["text"] == "After lunch." and shown["joined"] == answer["transcript"]
    assert shown["rejoined"] == answer["rejoined"]
    assert user_messages(web_app) == ["Call my sister. After lunch."]  # what the LLM got
    # The history keeps the whole request (the cut pair never entered it).
    await ws.send_json({"type": "text", "text": "and then?"})
    got = await receive_until(ws, is_result)
    assert got.of("turn.result")[0]["rejoined"] is None
    assert user_messages(web_app) == ["Call my sister. After lunch.", "and then?"]
    # The silence before the words that went on (at least the first one's 700 ms trailing
    # silence) was a pause inside the request: this user's wait after a question grows.
    web_app.asr.text = "What time is it there?"
    endpoint = (await paused_once(ws, "c3")).of("endpoint")[0]
    assert endpoint["reason"] == "question" and endpoint["wait_ms"] >= 850
    await ws.send_json({"type": "audio.end", "trailing_silence_ms": endpoint["wait_ms"]})
    await receive_until(ws, is_result)
    await ws.close()


async def test_ws_words_cut_while_whisper_runs_go_before_the_next(web_app: Web) -> None:
    """The voice cuts the turn while Whisper still runs (a slow host): the turn waits for
    the words, asks the LLM nothing, and the next utterance's turn is asked both."""
    web_app.asr.seconds = 0.6
    ws = await open_ws(web_app)
    await utterance(ws, web_app, "Call my sister.", "c1")
    got = await receive_until(ws, event_named("asr.start"))
    await ws.send_json({"type": "interrupt", "by": "voice"})
    got = await receive_until(ws, result_of(1), into=got)
    cut = results(got)[1]
    assert cut["interrupted"] and cut["transcript"] == "Call my sister."
    assert web_app.fake.requests == []
    web_app.asr.seconds = 0.0
    await utterance(ws, web_app, "After lunch.", "c2")
    got = await receive_until(ws, result_of(2), into=got)
    assert results(got)[2]["transcript"] == "Call my sister. After lunch."
    assert user_messages(web_app) == ["Call my sister. After lunch."]
    await ws.close()


async def test_ws_cuts_chain_and_a_kept_reply_passes_nothing_on(web_app: Web) -> None:
    web_app.tts.seconds = 1.0
    ws = await open_ws(web_app)
    await utterance(ws, web_app, "Call my sister.", "c1")
    got = await speak_over(ws, Received(), "voice")
    await utterance(ws, web_app, "After lunch.", "c2")
    got = await speak_over(ws, got, "voice")  # cut unheard in turn: the words chain
    web_app.tts.seconds = 0.5
    await utterance(ws, web_app, "Around two.", "c3")
    got = await speak_over(ws, got, "voice", heard_s=0.9)  # its first sentence heard: kept
    web_app.tts.seconds = 0.1
    await utterance(ws, web_app, "Thanks.", "c4")
    got = await receive_until(ws, result_of(4), into=got)
    turns = results(got)
    assert turns[2]["transcript"] == "Call my sister. After lunch."
    assert turns[3]["transcript"] == "Call my sister. After lunch. Around two."
    assert turns[3]["rejoined"] == {"text": "Call my sister. After lunch.", "turn": 2}
    assert turns[3]["interrupted"] and turns[3]["heard"].startswith(SENTENCES[0])
    assert turns[4]["transcript"] == "Thanks." and turns[4]["rejoined"] is None
    assert user_messages(web_app) == ["Call my sister. After lunch. Around two.", "Thanks."]
    await ws.close()


async def test_ws_after_the_bound_or_the_stop_button_nothing_is_carried(
        web_app: Web, monkeypatch: pytest.MonkeyPatch) -> None:
    from functools import partial

    import services.web_session
    from pipeline.rejoin import CutWords

    monkeypatch.setattr(services.web_session, "CutWords", partial(CutWords, 0.5))
    web_app.tts.seconds = 1.0
    ws = await open_ws(web_app)
    await utterance(ws, web_app, "Call my sister.", "c1")
    got = await speak_over(ws, Received(), "voice")
    got = await receive_until(ws, result_of(1), into=got)
    await asyncio.sleep(0.8)  # the next utterance begins past the bound
    await utterance(ws, web_app, "After lunch.", "c2")
    got = await speak_over(ws, got, None)  # the interrupt button: not the user's voice
    await utterance(ws, web_app, "Around two.", "c3")
    got = await speak_over(ws, got, "voice")
    web_app.tts.seconds = 0.1
    await utterance(ws, web_app, "Thanks.", "c4")
    got = await receive_until(ws, result_of(4), into=got)
    turns = results(got)
    assert turns[2]["transcript"] == "After lunch." and turns[2]["rejoined"] is None
    assert turns[2]["interrupted"] and turns[2]["heard"] == ""
    assert turns[3]["transcript"] == "Around two." and turns[3]["rejoined"] is None
    assert turns[4]["transcript"] == "Around two. Thanks."  # the voice's cut carries
    assert turns[4]["rejoined"] == {"text": "Around two.", "turn": 3}
    sources = [m["event"]["source"] for m in got.messages
               if event_named("bargein.detected")(m)]
    assert sources == ["voice", "browser", "voice"]
    await ws.close()


async def test_ws_an_abandoned_speculation_neither_uses_nor_sets_the_words(
        web_app: Web) -> None:
    web_app.tts.seconds = 1.0
    ws = await open_ws(web_app)
    await utterance(ws, web_app, "Call my sister.", "c1")
    got = await speak_over(ws, Received(), "voice")
    got = await receive_until(ws, result_of(1), into=got)  # hung up: a pause speculates
    web_app.tts.seconds = 0.1
    web_app.asr.text = "After"
    web_app.fake.reply = Reply(tokens=tokens(REPLY), token_delay=0.05)  # still streaming
    await ws.send_json({"type": "audio.begin", "sample_rate": 16000, "input_id": "c2"})
    await send_pcm(ws, HALF + SILENCE)
    await ws.send_json({"type": "audio.pause", "pause": 1, "silence_ms": 200})
    got = await receive_until(ws, event_named("llm.first_token"), into=got)
    assert user_messages(web_app) == ["Call my sister. After"]  # the speculation carries them
    await ws.send_json({"type": "audio.resume", "pause": 1, "silence_ms": 300})
    web_app.asr.text = "After lunch."
    web_app.fake.reply = Reply(tokens=tokens(REPLY), token_delay=0.005)
    await send_pcm(ws, HALF + SILENCE)
    await ws.send_json({"type": "audio.end", "trailing_silence_ms": 700})
    got = await receive_until(ws, result_of(3), into=got)
    turns = results(got)
    assert turns[2]["abandoned"] and turns[2]["speculation"]["state"] == "cancelled"
    # Still turn 1's words alone: the abandoned turn neither used them up nor left its own.
    assert turns[3]["transcript"] == "Call my sister. After lunch."
    assert turns[3]["rejoined"] == {"text": "Call my sister.", "turn": 1}
    assert user_messages(web_app) == ["Call my sister. After lunch."]
    await ws.close()


# --- the sink on its own -------------------------------------------------------------
class FakeSocket:
    def __init__(self) -> None:
        self.sent: list[str | bytes] = []

    async def send_str(self, data: str) -> None:
        self.sent.append(data)

    async def send_bytes(self, data: bytes) -> None:
        self.sent.append(data)

    def audio_samples(self) -> int:
        return sum(len(d) for d in self.sent if isinstance(d, bytes)) // 2

    def types(self) -> list[str]:
        return [json.loads(d)["type"] for d in self.sent if isinstance(d, str)]


async def make_sink() -> tuple[WebSocketSink, FakeSocket, asyncio.Task[None]]:
    sock = FakeSocket()
    outbox = Outbox(sock)
    writer = asyncio.create_task(outbox.run())
    sink = WebSocketSink(outbox, block_ms=20, lead_ms=40)
    await sink.open(16000)
    return sink, sock, writer


async def test_sink_sends_every_sample_in_blocks_at_real_time() -> None:
    sink, sock, writer = await make_sink()
    loop = asyncio.get_running_loop()
    started = loop.time()
    played = await sink.play(np.ones(4000, dtype=np.int16))  # 250 ms
    played += await sink.play(np.ones(1600, dtype=np.int16))  # continues the schedule
    elapsed = loop.time() - started
    await asyncio.sleep(0)
    assert played == 5600 == sock.audio_samples()
    blocks = [d for d in sock.sent if isinstance(d, bytes)]
    assert max(len(b) for b in blocks) == 320 * 2  # 20 ms blocks
    assert elapsed >= 0.35  # paced (350 ms of audio + lead), not dumped at once
    assert sock.types() == ["audio.format"]
    sink.outbox.close()
    await writer


async def test_sink_stop_returns_the_played_count_and_silences_until_resume() -> None:
    sink, sock, writer = await make_sink()
    play = asyncio.create_task(sink.play(np.ones(16000, dtype=np.int16)))
    await asyncio.sleep(0.2)
    sink.stop()
    played = await play
    await asyncio.sleep(0)
    assert 0 < played < 16000
    assert played <= sock.audio_samples()  # the schedule never counts unsent audio
    assert sock.types()[-1] == "audio.stop"
    assert await sink.play(np.ones(100, dtype=np.int16)) == 0  # stopped: instant 0
    sink.resume()
    assert await sink.play(np.ones(160, dtype=np.int16)) == 160
    with pytest.raises(TypeError):
        await sink.play(np.ones(10, dtype=np.float32))
    sink.outbox.close()
    await writer


def test_serve_takes_the_speech_engine_options(monkeypatch: pytest.MonkeyPatch) -> None:
    """serve reaches Wyoming speech servers like replay/talk (--asr/--tts, services/engines)."""
    from services.cli import build_parser

    monkeypatch.delenv("VOICE_LLM_ASR", raising=False)
    monkeypatch.delenv("VOICE_LLM_TTS", raising=False)
    args = build_parser("serve").parse_args(
        ["serve", "--asr", "wyoming://10.0.0.5:10300", "--tts", "wyoming://10.0.0.6:10200"])
    assert (args.asr, args.tts) == ("wyoming://10.0.0.5:10300", "wyoming://10.0.0.6:10200")
    default = build_parser("serve").parse_args(["serve"])
    assert (default.asr, default.tts) == ("local", "local")
