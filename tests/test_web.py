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
import wave
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import numpy as np
import pytest
from aiohttp.test_utils import TestClient, TestServer
from fake_llm import FakeLlm, Reply

from pipeline.llm_client import LlmClient
from services.assistant import Assistant
from services.web import STATE, create_app
from services.ws_sink import Outbox, WebSocketSink

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

    def transcribe(self, audio: np.ndarray) -> str:
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

    @property
    def state(self) -> Any:
        return self.client.server.app[STATE]


@pytest.fixture
async def web_app() -> AsyncIterator[Web]:
    tts = FakeTts()
    async with FakeLlm(Reply(tokens=tokens(REPLY), token_delay=0.005)) as fake:
        llm = LlmClient(fake.url)
        await llm.__aenter__()
        assistant = Assistant(FakeAsr(), tts, llm, fake.url)  # type: ignore[arg-type]
        app = create_app(assistant, max_upload_bytes=UPLOAD_LIMIT, max_utterance_s=2.0)
        try:
            async with TestClient(TestServer(app)) as client:
                yield Web(client, fake, tts)
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
