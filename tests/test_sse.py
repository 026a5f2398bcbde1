"""SseParser: pure, byte-level cases (no event loop); then scripts/sse.py end to end."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from pathlib import Path

import pytest
from fake_llm import FakeLlm, Reply
from hypothesis import given
from hypothesis import strategies as st

from pipeline.sse import SseParser

# A llama-server-like stream: role chunk, a ping, two tokens, finish, [DONE].
STREAM = (b'data: {"choices":[{"delta":{"role":"assistant","content":null}}]}\n\n'
          b":\n\n"
          b'data: {"choices":[{"delta":{"content":"Hi"}}]}\n\n'
          b'data: {"choices":[{"delta":{"content":" \xc3\xa9t\xc3\xa9"}}]}\n\n'
          b'data: {"choices":[{"delta":{},"finish_reason":"stop"}]}\n\n'
          b"data: [DONE]\n\n")
EXPECTED = ['{"choices":[{"delta":{"role":"assistant","content":null}}]}',
            '{"choices":[{"delta":{"content":"Hi"}}]}',
            '{"choices":[{"delta":{"content":" été"}}]}',
            '{"choices":[{"delta":{},"finish_reason":"stop"}]}',
            "[DONE]"]


def feed_all(pieces: list[bytes]) -> list[str]:
    parser = SseParser()
    return [payload for piece in pieces for payload in parser.feed(piece)]


def test_whole_stream_in_one_read() -> None:
    assert feed_all([STREAM]) == EXPECTED


def test_single_event() -> None:
    assert SseParser().feed(b"data: hello\n\n") == ["hello"]


def test_event_is_not_complete_before_blank_line() -> None:
    parser = SseParser()
    assert parser.feed(b"data: hello\n") == []
    assert parser.pending
    assert parser.feed(b"\n") == ["hello"]
    assert not parser.pending


@pytest.mark.parametrize("newline", [b"\n", b"\r\n", b"\r"])
def test_each_line_terminator(newline: bytes) -> None:
    stream = STREAM.replace(b"\n", newline)
    assert feed_all([stream]) == EXPECTED


@pytest.mark.parametrize("newline", [b"\n", b"\r\n", b"\r"])
def test_split_at_every_byte_offset(newline: bytes) -> None:
    stream = STREAM.replace(b"\n", newline)
    for cut in range(len(stream) + 1):
        assert feed_all([stream[:cut], stream[cut:]]) == EXPECTED, cut


def test_one_byte_at_a_time_crlf() -> None:
    stream = STREAM.replace(b"\n", b"\r\n")
    assert feed_all([stream[i:i + 1] for i in range(len(stream))]) == EXPECTED


def test_crlf_split_between_cr_and_lf_is_one_line_end() -> None:
    parser = SseParser()
    assert parser.feed(b"data: a\r") == []
    assert parser.feed(b"\n") == []  # the LF pairs with the CR: no blank line yet
    assert parser.feed(b"\r") == ["a"]
    assert parser.feed(b"\ndata: b\r\n\r\n") == ["b"]


def test_cr_in_middle_of_read_does_not_swallow_next_lf() -> None:
    # "a\r" then "b": the CR ended a line; a later LF is a new (blank) line.
    parser = SseParser()
    assert parser.feed(b"data: a\rdata: b") == []
    assert parser.feed(b"\n\n") == ["a\nb"]


def test_comment_lines_are_ignored() -> None:
    assert SseParser().feed(b": ping\n:\n\ndata: x\n: inside\n\n") == ["x"]


def test_ping_only_stream_yields_nothing() -> None:
    assert SseParser().feed(b":\n\n" * 5) == []


def test_multi_line_data_joined_with_newline() -> None:
    assert SseParser().feed(b"data: one\ndata: two\ndata:three\n\n") == ["one\ntwo\nthree"]


def test_only_one_leading_space_is_removed() -> None:
    assert SseParser().feed(b"data:  two spaces\n\n") == [" two spaces"]


def test_no_space_after_colon() -> None:
    assert SseParser().feed(b"data:[DONE]\n\n") == ["[DONE]"]


def test_empty_data_line_dispatches_empty_payload() -> None:
    assert SseParser().feed(b"data:\n\n") == [""]
    assert SseParser().feed(b"data\n\n") == [""]  # field name without colon, empty value


def test_repeated_blank_lines_do_not_dispatch() -> None:
    assert SseParser().feed(b"\n\n\n\ndata: x\n\n\n\n") == ["x"]


def test_other_fields_ignored() -> None:
    stream = b"event: message\nid: 7\nretry: 100\ndata: x\nfoo: bar\n\n"
    assert SseParser().feed(stream) == ["x"]


def test_event_without_data_is_dropped() -> None:
    assert SseParser().feed(b"event: message\n\ndata: y\n\n") == ["y"]


def test_incomplete_event_at_end_stays_pending() -> None:
    parser = SseParser()
    assert parser.feed(b"data: x\n\ndata: partial") == ["x"]
    assert parser.pending


def test_colon_inside_value_kept() -> None:
    assert SseParser().feed(b'data: {"a": "b:c"}\n\n') == ['{"a": "b:c"}']


def test_utf8_character_split_across_reads() -> None:
    data = "data: café 🙂\n\n".encode()
    cut = data.index(b"\xf0") + 2  # inside the 4-byte emoji
    assert feed_all([data[:cut], data[cut:]]) == ["café 🙂"]


def test_invalid_utf8_is_replaced_not_raised() -> None:
    assert SseParser().feed(b"data: \xff\n\n") == ["\ufffd"]


def test_leading_bom_dropped_even_when_split() -> None:
    assert feed_all([b"\xef", b"\xbb", b"\xbfdata: x\n\n"]) == ["x"]
    assert SseParser().feed(b"\xef\xbb\xbfdata: y\n\n") == ["y"]


def test_empty_reads_are_harmless() -> None:
    assert feed_all([b"", b"data: x", b"", b"\r", b"", b"\n", b"\r\n"]) == ["x"]


@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=12),
       st.sampled_from([b"\n", b"\r\n", b"\r"]))
def test_any_split_gives_same_payloads(cuts: list[int], newline: bytes) -> None:
    stream = STREAM.replace(b"\n", newline)
    bounds = [0, *sorted(min(c, len(stream)) for c in cuts), len(stream)]
    pieces = [stream[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]
    assert feed_all(pieces) == EXPECTED


# --- scripts/sse.py, the lab's seed tool, against the fake server ---------------------------

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "sse.py"


async def run_script(*args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(SCRIPT), *args, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env={**os.environ, "COLUMNS": "100"})
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode or 0, out.decode(), err.decode()


async def test_script_marks_role_first_token_and_timings() -> None:
    async with FakeLlm(Reply(tokens=["Hi", " there", "."], token_delay=0.01)) as fake:
        code, out, err = await run_script("--url", fake.url, "--max-tokens", "8",
                                          "--no-cache", "--system", "Be brief.")
        body = fake.requests[-1].body
    assert code == 0, err
    lines = out.splitlines()
    labels = [line.split()[2] for line in lines if " ms  " in line and len(line.split()) > 2]
    assert labels[:3] == ["HTTP", "ROLE", "FIRST"] and "FINISH" in labels and "DONE" in labels
    assert all(len(line) <= 100 for line in lines if "{" in line)  # cut to the terminal
    assert "first token TTFT" in out and "prompt_n=12" in out and "'Hi there.'" in out
    assert body["cache_prompt"] is False and body["max_tokens"] == 8
    assert body["messages"][0] == {"role": "system", "content": "Be brief."}


async def test_script_one_line_error_when_no_server() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        code, _, err = await run_script("--url", f"http://127.0.0.1:{sock.getsockname()[1]}")
    assert code == 1 and err.strip().count("\n") == 0 and "no llama-server at" in err
