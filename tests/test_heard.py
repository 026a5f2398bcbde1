"""What the user heard: history truncation exact to the played samples."""

from pipeline.heard import INTERRUPTED_MARK, HeardText, worth_keeping


def make(raw: str, sentences: list[str], samples: list[int]) -> HeardText:
    h = HeardText()
    h.add_raw(raw)
    for i, (s, n) in enumerate(zip(sentences, samples, strict=True)):
        assert h.add_sentence(s) == i
        h.set_audio(i, n)
    return h


RAW = "Sleep at the same time. Avoid screens before bed. Keep the room cool."
SENTS = ["Sleep at the same time.", "Avoid screens before bed.", "Keep the room cool."]


def test_fully_played_sentences_are_kept_raw() -> None:
    h = make(RAW, SENTS, [1000, 1000, 1000])
    h.set_played(0, 1000)
    h.set_played(1, 1000)
    assert h.heard_text() == "Sleep at the same time. Avoid screens before bed."
    assert h.heard_raw() == "Sleep at the same time. Avoid screens before bed." + INTERRUPTED_MARK


def test_partial_sentence_cut_in_proportion_at_a_word_boundary() -> None:
    h = make(RAW, SENTS, [1000, 1000, 1000])
    h.set_played(0, 1000)
    h.set_played(1, 500)  # half of "Avoid screens before bed." is "Avoid screen" -> "Avoid"
    assert h.heard_text() == "Sleep at the same time. Avoid"
    assert RAW.startswith(h.heard_raw().removesuffix(INTERRUPTED_MARK))


def test_one_sample_less_than_the_whole_sentence_is_still_partial() -> None:
    h = make(RAW, SENTS, [1000, 1000, 1000])
    h.set_played(0, 999)
    assert h.heard_text() == "Sleep at the same"
    h.set_played(0, 1000)
    assert h.heard_text() == "Sleep at the same time."


def test_nothing_played_keeps_nothing_but_the_mark() -> None:
    h = make(RAW, SENTS, [1000, 1000, 1000])
    assert h.heard_text() == ""
    assert h.heard_raw() == INTERRUPTED_MARK


def test_reply_cut_by_max_sentences_ends_at_last_sentence() -> None:
    h = make(RAW + " And", SENTS, [1, 1, 1])
    assert h.reply(complete=False) == RAW
    assert h.reply(complete=True) == RAW + " And"


def test_sentences_are_located_in_order_even_when_repeated() -> None:
    h = HeardText()
    h.add_raw("Yes. Yes. No.")
    for s in ["Yes.", "Yes.", "No."]:
        h.add_sentence(s)
    assert [(s.start, s.end) for s in h.sentences] == [(0, 4), (5, 9), (10, 13)]


def test_a_client_that_played_less_cuts_across_the_sentences_in_order() -> None:
    h = make(RAW, SENTS, [1000, 1000, 1000])
    for i in range(3):
        h.set_played(i, 1000)  # all handed over to a client that plays it itself
    assert h.cut_at(1500) is True  # it played one and a half sentences
    assert h.heard_text() == "Sleep at the same time. Avoid"
    assert h.cut_at(1200) is True  # never more than before: a second, earlier report
    assert h.heard_text() == "Sleep at the same time."


def test_a_client_that_played_everything_cuts_nothing() -> None:
    h = make(RAW, SENTS, [1000, 1000, 1000])
    for i in range(3):
        h.set_played(i, 1000)
    assert h.cut_at(3000) is False and h.cut_at(10**6) is False
    assert h.heard_text() == RAW


def test_a_report_past_what_was_sent_keeps_what_was_sent() -> None:
    h = make(RAW, SENTS, [1000, 1000, 1000])
    h.set_played(0, 1000)
    h.set_played(1, 400)  # a barge-in stopped the hand-over here
    assert h.cut_at(2500) is True
    assert h.heard_text() == "Sleep at the same time. Avoid"


def test_a_cut_reply_is_kept_marked_but_sent_without_the_mark() -> None:
    from pipeline.conversation import Conversation

    c = Conversation()
    c.commit([{"role": "user", "content": "Tips?"}], "Sleep at the same" + INTERRUPTED_MARK)
    c.commit([{"role": "user", "content": "More?"}], "Keep it cool.")
    assert c.history[1]["content"].endswith(INTERRUPTED_MARK)  # the record says it was cut
    sent = c.messages_for("And?")
    assert [m["content"] for m in sent[1:]] == ["Tips?", "Sleep at the same", "More?",
                                                "Keep it cool.", "And?"]
    assert c.messages_for("And?") == sent  # the same prefix every turn: the cache holds


def test_a_cut_reply_is_worth_keeping_from_four_words_heard() -> None:
    assert not worth_keeping("")
    assert not worth_keeping("The key to")
    assert worth_keeping("The key to tea")
    h = make(RAW, SENTS, [1000, 1000, 1000])
    h.set_played(0, 400)  # "Sleep at the same time." -> "Sleep at"
    assert h.heard_text() == "Sleep at" and not worth_keeping(h.heard_text())
