"""The words before a cut: a turn's user message carried into the next utterance's turn.

A reply cut by the user's voice before ``MIN_KEPT_WORDS`` of it were heard is not kept,
and its question goes with it (``pipeline.heard.worth_keeping``); most often it answered a
pause taken for the end ("Call my sister." [pause] "after lunch."). ``CutWords`` keeps that
turn's user message and hands it (``Rejoined``) to the next utterance's turn if its voice
began within ``rejoin_s`` of the cut; ``TurnRunner.run(rejoined=...)`` joins the two
transcripts (``join_transcripts``). docs/live.md, "After a false endpoint".

One bookkeeping for both live front ends: ``LiveTurnTaker`` (``talk``, ``replay --live``,
pipeline/live.py) and the browser page (services/web_session.py). Each says which
barge-ins were the user's voice (``barged_in``) and which turn results are the next
utterance's answer (``finished``: not an abandoned speculation); this decides the rest.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pipeline.turn import TurnResult

log = logging.getLogger(__name__)

# After a reply cut before enough of it was heard to keep it, the user's words of that turn
# go before the next utterance's if it began within this long after the cut. The voice that
# cut it began before the cut, so this only bounds a next utterance after a silence: by
# then the user has let the request go or will say it again.
REJOIN_S = 3.0


@dataclass(frozen=True)
class Rejoined:
    """The user's words of an earlier turn, carried into this one (live turn-taking,
    ``pipeline.live``): that turn was cut by the user's voice before enough of its reply was
    heard to keep it, so its question never entered the history. ``text`` is the user
    message it sent (itself joined if it carried words from before), ``turn`` its number."""

    text: str
    turn: int

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "turn": self.turn}


def join_transcripts(earlier: str, new: str) -> str:
    """One user message from two transcripts: "Call my sister." + "After lunch." ->
    "Call my sister. After lunch." Each keeps Whisper's own punctuation; the full stop
    Whisper put at the pause reads as a sentence break, which is how it was said. Where it
    put none, the sentence goes on, so the capital Whisper gives every utterance's first
    word goes ("Call my sister" + "After lunch." -> "Call my sister after lunch."), but
    not that of "I" or of a word in capitals ("TV")."""
    earlier, new = earlier.strip(), new.strip()
    if not (earlier and new):
        return earlier or new
    first = new.split(maxsplit=1)[0]
    goes_on = not earlier.endswith((".", "?", "!", "…"))
    if goes_on and first[:1].isupper() and first[1:2].islower():
        new = new[0].lower() + new[1:]
    return f"{earlier} {new}"


@dataclass(frozen=True)
class Cut:
    """A turn cut by the user's voice and not kept: its user words wait for the next."""

    text: str
    turn: int
    at: float  # time.monotonic() of the barge-in


class CutWords:
    """The words of the last turn cut by the user's voice and not kept, for the next
    utterance. ``rejoin_s`` None: they are dropped with the reply (the feature off)."""

    def __init__(self, rejoin_s: float | None = REJOIN_S) -> None:
        self.rejoin_s = rejoin_s
        self.cut: Cut | None = None
        self._bargein: tuple[int, float] | None = None  # (turn, monotonic) of the last one

    def barged_in(self, turn: int) -> None:
        """The user's voice cut turn ``turn`` now (its ``bargein.detected``)."""
        self._bargein = (turn, time.monotonic())

    def voiced(self, turn: int) -> bool:
        """Was the last barge-in recorded (``barged_in``) the one that cut ``turn``?"""
        return self._bargein is not None and self._bargein[0] == turn

    def rejoined(self, began: float) -> Rejoined | None:
        """The words of the last cut turn, if this utterance began (``began``, monotonic)
        soon enough after the cut to go on with them (called as its turn starts, after the
        cut turn finished). Every speculation on the utterance gets them, as does the turn
        at its end."""
        cut = self.cut
        if cut is None or self.rejoin_s is None:
            return None
        if began - cut.at > self.rejoin_s:
            log.info("the words of cut turn %d are dropped: the next utterance began %.1f s "
                     "after the cut", cut.turn, began - cut.at)
            self.cut = None
            return None
        return Rejoined(cut.text, cut.turn)

    def finished(self, result: TurnResult, *, by_voice: bool) -> None:
        """A turn is over (not an abandoned speculation): it was the next utterance's, so
        it uses up the cut words it was sent with, unless it was cut unkept in turn
        (``by_voice``: by the user's voice, not the conversation ending or a stop button):
        then its own user message, those words included, waits for the next (cuts chain).
        A failed turn (the server down) leaves them for the next utterance, still bounded
        by ``rejoin_s`` from the cut: they were not answered. (An utterance with no words
        does not fail when it carries them: its turn answers them, pipeline/turn.py.)"""
        if result.error is not None:
            return
        if (result.interrupted and not result.committed and by_voice
                and result.transcript and self.rejoin_s is not None):
            # Cut before enough of the reply was heard to keep it: the pair left the
            # history, the words wait.
            at = (self._bargein[1] if self._bargein is not None and self.voiced(result.turn)
                  else time.monotonic())
            self.cut = Cut(result.transcript, result.turn, at)
        else:
            self.cut = None
