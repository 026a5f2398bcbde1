"""Where the first sentence of a streamed reply ends.

The lab's rule (docs/lab.md): a terminal mark (. ! ?) *followed by whitespace*. Waiting for
the whitespace keeps "3.5" and "a.m." whole, at the cost of one more token of delay. Closing
quotes or brackets may sit between the mark and the whitespace ('He said "no." Then...'). A
list marker such as "1. " is not a sentence either: small models answer in numbered lists
often.
"""

from __future__ import annotations

import re

_BOUNDARY = re.compile(r"[.!?]+[\"'\u201d\u2019)\]]*\s")
_LIST_MARKER = re.compile(r"(?:^|\n)\s*(?:\d+|[a-zA-Z])$")


def first_sentence_end(text: str) -> int | None:
    """Index just past the first sentence (its mark and closing quotes), or None if not yet
    decidable. Leading whitespace or a lone mark at the very start is not a sentence."""
    for match in _BOUNDARY.finditer(text):
        before = text[: match.start()]
        if before.strip() and not _LIST_MARKER.search(before):
            return match.end() - 1  # exclude the whitespace that decided it
    return None


def first_sentence(text: str) -> str | None:
    end = first_sentence_end(text)
    return None if end is None else text[:end].strip()
