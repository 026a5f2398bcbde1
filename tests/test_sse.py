"""SseParser: pure, byte-level cases (no event loop)."""

from __future__ import annotations

import pytest
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
