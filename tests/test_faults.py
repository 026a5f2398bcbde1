"""Faults the pipeline must survive (issue 12): what is saved when the process dies or is
stopped, TTS failures, a dying llama-server, context overflow. scripts/faults runs these
and prints the fault table; the real parts are used wherever they can produce the fault."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeline.events import Event, EventName
from pipeline.heard import worth_keeping
from services.turn_options import EventWriter, write_json_atomic

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"


def test_events_are_on_disk_one_line_per_event_before_close(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    writer = EventWriter(path)
    writer(Event(1, 0.0, EventName.TURN_START, {"mode": "streamed"}))
    writer(Event(1, 0.1, EventName.ASR_START, {"audio_s": 1.0}))
    # Not closed: a kill -9 now would find both lines complete.
    lines = path.read_text().splitlines()
    assert [json.loads(line)["event"] for line in lines] == ["start", "start"]
    writer.close()
    writer.close()  # idempotent


def test_json_is_replaced_atomically(tmp_path: Path) -> None:
    path = tmp_path / "out" / "r.json"
    write_json_atomic(path, {"turns": [1]})
    write_json_atomic(path, {"turns": [1, 2]})
    assert json.loads(path.read_text()) == {"turns": [1, 2]}
    assert [p.name for p in path.parent.iterdir()] == ["r.json"]  # no temp file left


def _replay(*args: str, tmp_path: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "VOICE_LLM_STATE": str(tmp_path / "state")}
    return subprocess.Popen([sys.executable, "-m", "services.cli", "replay", *args], cwd=ROOT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _wait_for_event(path: Path, event: str, timeout: float = 120.0) -> list[dict[str, object]]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists():
            # A line is complete only with its newline: the reader may catch the writer
            # between the first and the last byte of one os.write.
            text = path.read_text()
            evs = [json.loads(line) for line in text[:text.rfind("\n") + 1].splitlines()]
            if any(f"{e['stage']}.{e['event']}" == event for e in evs):
                return evs
        time.sleep(0.05)
    raise AssertionError(f"no {event} in {path} within {timeout} s")


@pytest.mark.integration
@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130),
                                       (signal.SIGHUP, 129)],
                         ids=["SIGTERM", "SIGINT", "SIGHUP"])  # SIGHUP: the terminal closed
def test_replay_stopped_by_a_signal_closes_the_turn_and_saves(
        llama_server, tmp_path: Path, sig: signal.Signals, code: int) -> None:
    events, out = tmp_path / "events.jsonl", tmp_path / "replay.json"
    proc = _replay(str(SAMPLES / "01_sleep_tips.wav"), str(SAMPLES / "02_bicycle_history.wav"),
                   str(SAMPLES / "03_sky_blue.wav"), "--llm-url", llama_server.url,
                   "--max-sentences", "0", "--max-tokens", "200", "--events", str(events),
                   "--json", str(out), tmp_path=tmp_path)
    try:
        # Turn 1 is finished and saved; kill during turn 2's playback.
        _wait_for_event(events, "turn.end")
        _wait_for(out)  # written (atomically) just after the turn's last event
        assert json.loads(out.read_text())["turns"][0]["error"] is None
        evs = _wait_for_event(events, "playback.start")
        while not [e for e in evs if e["turn"] == 2 and e["event"] == "start"
                   and e["stage"] == "playback"]:
            evs = _wait_for_event(events, "playback.start")
        time.sleep(2.0)  # several words heard: a reply cut before its fourth is not kept
        proc.send_signal(sig)
        stdout, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == code, stderr
    assert "Traceback" not in stderr
    line = [x for x in stderr.splitlines() if "stopped by" in x]
    assert len(line) == 1 and sig.name in line[0] and str(events) in line[0]
    evs = [json.loads(x) for x in events.read_text().splitlines()]
    turn2 = [f"{e['stage']}.{e['event']}" for e in evs if e["turn"] == 2]
    assert "bargein.detected" in turn2 and turn2[-1] == "turn.end"
    idle = [e for e in evs if e["turn"] == 2 and e["event"] == "slot_idle"]
    assert idle and idle[0]["confirmed"] is True
    assert not any(e["turn"] == 3 for e in evs)  # stopped: no further turn
    data = json.loads(out.read_text())
    assert len(data["turns"]) == 2 and data["turns"][1]["interrupted"] is True
    assert data["history"]["history"][-1]["content"].endswith("…")


def _cli(*args: str, tmp_path: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "VOICE_LLM_STATE": str(tmp_path / "state")}
    return subprocess.Popen([sys.executable, "-m", "services.cli", *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for(path: Path, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"no {path} within {timeout} s"
        time.sleep(0.05)


@pytest.mark.integration
def test_compare_stopped_by_sigterm_writes_the_report_of_what_was_measured(
        llama_server, tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    proc = _cli("compare", str(SAMPLES), "--runs", "1", "--llm-url", llama_server.url,
                "--out", str(out), tmp_path=tmp_path)
    try:
        _wait_for(out / "compare.json")  # written after the first turn already
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, stderr
    assert "Traceback" not in stderr
    assert len([x for x in stderr.splitlines() if "stopped by SIGTERM" in x]) == 1
    report = json.loads((out / "compare.json").read_text())
    assert 1 <= len(report["turns"]) < 2 * len(list(SAMPLES.glob("*.wav")))
    assert (out / "compare.md").exists()
    lines = (out / "events.jsonl").read_text().splitlines()
    assert {json.loads(x)["file"] for x in lines} == {t["file"] for t in report["turns"]}


@pytest.mark.integration
def test_lab_stopped_by_sigint_saves_and_confirms_the_slot_idle(
        llama_server, tmp_path: Path) -> None:
    out = tmp_path / "lab"
    proc = _cli("lab", "all", "--llm-url", llama_server.url, "--out", str(out),
                tmp_path=tmp_path)
    try:
        time.sleep(8)  # inside the experiments (they take minutes)
        assert proc.poll() is None
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    line = [x for x in stderr.splitlines() if "stopped by SIGINT" in x]
    assert len(line) == 1 and "slot confirmed idle" in line[0], stderr
    assert (out / "lab.json").exists()


@pytest.mark.integration
def test_llama_server_killed_mid_reply_is_named_restarted_and_the_next_turn_works(
        tmp_path: Path) -> None:
    """The real server, started by the replay itself (managed, its child), SIGKILLed by pid
    while it streams turn 1; turn 2 must be answered by the restarted server."""
    from services import models
    from services.errors import UserError
    from services.llama_server import LlamaServer
    from services.server_check import free_port

    try:
        models.llama_server_binary()
        models.llm_model()
    except UserError as e:
        pytest.skip(f"real llama-server not available: {e}")
    state = tmp_path / "state"
    events, out = tmp_path / "events.jsonl", tmp_path / "replay.json"
    url = f"http://127.0.0.1:{free_port()}"
    proc = _replay(str(SAMPLES / "02_bicycle_history.wav"), str(SAMPLES / "03_sky_blue.wav"),
                   "--llm-url", url, "--max-sentences", "0", "--max-tokens", "400",
                   "--events", str(events), "--json", str(out), tmp_path=tmp_path)
    server = LlamaServer(state)
    try:
        _wait_for_event(events, "splitter.sentence", timeout=240)
        first_pid = server.running_pid()
        assert first_pid is not None
        os.kill(first_pid, signal.SIGKILL)  # the pid this test's replay started
        stdout, stderr = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
        server.stop()  # the restarted server, started by this test's replay
    assert "Traceback" not in stderr and "ClientPayloadError" not in stdout + stderr
    assert "TransferEncodingError" not in stdout + stderr
    died = [x for x in stderr.splitlines() if "died with SIGKILL" in x]
    assert len(died) == 1 and "restarted it" in died[0] and "restart 1" in died[0], stderr
    data = json.loads(out.read_text())
    cut, nxt = data["turns"]
    assert cut["error"] and "llama-server" in cut["error"]
    assert nxt["error"] is None and nxt["reply"]
    assert data["server_restarts"] == 1
    history = data["history"]["history"]
    # The cut turn keeps what was heard: the sentences released before the kill were
    # synthesized and played to the end (the rule), and the history says it was cut.
    assert len(history) == 4 and history[1]["content"].endswith("…")
    assert cut["heard"] and cut["heard"] in history[1]["content"]
    evs = [json.loads(x) for x in events.read_text().splitlines()]
    played = [e for e in evs if e["turn"] == 1 and e["stage"] == "playback"]
    assert played and played[-1]["event"] == "end"
    assert proc.returncode == 1


# -- with the fake server: what the real one cannot be made to do on cue ---------------------

def _sentences_reply(**kw: object) -> object:
    from fake_llm import Reply
    from test_turn import SENTENCES, tokens

    return Reply(tokens=tokens(*SENTENCES), **{"token_delay": 0.01, **kw})  # type: ignore[arg-type]


async def test_stream_cut_mid_reply_plays_what_was_released_and_keeps_it() -> None:
    from fake_llm import FakeLlm
    from test_turn import AUDIO, make_runner

    from pipeline.llm_client import LlmClient

    # 14 tokens = the first two sentences and a bit of the third, then the socket drops.
    async with FakeLlm(_sentences_reply(disconnect_after=14)) as fake:  # type: ignore[arg-type]
        async with LlmClient(fake.url) as client:
            runner = await make_runner(fake, client, max_sentences=None)
            result = await asyncio.wait_for(runner.run(AUDIO), 10)
            assert result.error and "lost mid-stream" in result.error
            assert "Payload" not in result.error and "TransferEncoding" not in result.error
            names = [e.name for e in result.events]
            assert names.index("playback.end") < names.index("turn.error")
            kept = runner.conversation.history[-1]["content"]
            assert kept.endswith("…") and "bedroom cool and dark." in kept
            assert "Avoid" not in kept  # the unfinished fragment was never spoken
            assert result.heard == kept[:-1].strip()


async def test_context_overflow_trims_the_oldest_turns_and_retries_once() -> None:
    from fake_llm import FakeLlm, Reply
    from test_turn import make_runner

    from pipeline.llm_client import LlmClient

    limit = 900  # characters of prompt the fake "context" holds
    seen: list[list[dict[str, str]]] = []

    def reply(body: dict[str, object]) -> Reply:
        messages = body["messages"]  # type: ignore[index]
        seen.append(messages)  # type: ignore[arg-type]
        size = sum(len(m["content"]) for m in messages)  # type: ignore[attr-defined]
        if size > limit:
            return Reply(status=400, error_body={"error": {
                "code": 400, "type": "exceed_context_size_error",
                "message": "the request exceeds the available context size",
                "n_prompt_tokens": size // 4, "n_ctx": limit // 4 + 160 + 32}})
        return _sentences_reply(token_delay=0.0)  # type: ignore[return-value]

    async with FakeLlm(reply) as fake:
        async with LlmClient(fake.url) as client:
            runner = await make_runner(fake, client, max_sentences=None)
            runner.conversation.max_messages = 1000  # only the overflow trims here
            system = runner.conversation.system_prompt
            trims = 0
            for _ in range(12):
                result = await asyncio.wait_for(runner.run(text="How do I sleep better?"),
                                                10)
                assert result.error is None
                trimmed = [e for e in result.events if e.name == "llm.context_trimmed"]
                trims += len(trimmed)
                if trimmed:
                    assert trimmed[0].data["dropped_messages"] >= 2
                    assert trimmed[0].data["n_ctx"] == limit // 4 + 160 + 32
            assert trims >= 2
            assert all(m[0] == {"role": "system", "content": system} for m in seen)
            assert len(runner.conversation.history) < 24


def test_trim_never_drops_the_system_prompt() -> None:
    from pipeline.conversation import Conversation

    c = Conversation()
    for i in range(5):
        c.commit([{"role": "user", "content": f"q{i}"}], f"answer {i}")
    assert c.trim_oldest(0.5) == 6
    assert [m["content"] for m in c.history] == ["q3", "answer 3", "q4", "answer 4"]
    assert c.messages_for("x")[0]["role"] == "system"
    c.history.clear()
    assert c.trim_oldest(0.5) == 0


@pytest.fixture
def small_context_server(tmp_path: Path):
    """A real llama-server of our own with ``-c 2048`` (the shared fixture has 4096)."""
    from services import models
    from services.errors import UserError
    from services.find_server import managed_server
    from services.llama_server import ServerOptions
    from services.server_check import free_port

    try:
        models.llama_server_binary()
        models.llm_model()
    except UserError as e:
        pytest.skip(f"real llama-server not available: {e}")
    with managed_server(ServerOptions(port=free_port(), ctx=2048),
                        tmp_path / "state-2048") as info:
        yield info.url


@pytest.mark.integration
async def test_sixty_turns_overflow_a_2048_context_and_keep_working(
        small_context_server: str) -> None:
    """60 turns of 4-sentence replies with -c 2048 (the real server's own 400) and no
    history cap but the overflow trim: every turn is answered."""
    from test_turn import FakeTts

    from pipeline.audio_out import InstantSink
    from pipeline.conversation import Conversation
    from pipeline.llm_client import LlmClient
    from pipeline.turn import TurnConfig, TurnRunner

    questions = ["Tell me about the history of bicycles.", "Why is the sky blue?",
                 "How do I sleep better?", "What should I cook tonight?"]
    sink = InstantSink()
    await sink.open(16000)
    async with LlmClient(small_context_server) as client:
        runner = TurnRunner(None, client, FakeTts(), sink, Conversation(max_messages=10_000),
                            TurnConfig(max_tokens=160, max_sentences=4))
        trims, errors = 0, []
        for i in range(60):
            result = await runner.run(text=questions[i % len(questions)])
            if result.error:
                errors.append(result.error)
            trims += sum(e.name == "llm.context_trimmed" for e in result.events)
        assert errors == []
        assert trims >= 1
        assert runner.conversation.messages_for("x")[0]["role"] == "system"


async def test_a_signal_closes_the_running_turn_like_a_barge_in() -> None:
    """Stopper in-process: SIGTERM to ourselves mid-playback closes the turn (stream
    closed, slot confirmed idle) instead of killing the process; exit code 143."""
    from fake_llm import FakeLlm
    from test_turn import AUDIO, make_runner

    from pipeline.llm_client import LlmClient
    from services.turn_options import Stopper

    async with FakeLlm(_sentences_reply(token_delay=0.05)) as fake:  # type: ignore[arg-type]
        async with LlmClient(fake.url) as client:
            runner = await make_runner(fake, client, max_sentences=None)
            stopper = Stopper().install()
            stopper.runner = runner
            loop = asyncio.get_running_loop()
            runner.listeners.append(lambda e: loop.call_soon(
                os.kill, os.getpid(), signal.SIGTERM) if e.name == "playback.start" else None)
            try:
                result = await asyncio.wait_for(runner.run(AUDIO), 10)
            finally:
                stopper.remove()
            assert stopper.exit_code == 143 and result.interrupted
            names = [e.name for e in result.events]
            assert "llm.closed" in names
            idle = [e for e in result.events if e.name == "server.slot_idle"]
            assert idle and idle[0].data["confirmed"] is True
            if worth_keeping(result.heard):  # the history keeps what was heard, marked
                assert runner.conversation.history[-1]["content"].endswith("…")
            else:  # stopped before four words were heard: the pair is not kept
                assert runner.conversation.history == []
