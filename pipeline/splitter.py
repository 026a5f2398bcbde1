"""Streaming sentence splitter: LLM tokens in, speakable sentences out, as early as decidable.

The splitter decides when the assistant may start speaking, so it must never cut in the
wrong place ("3.5", "9 a.m. tomorrow", "Dr. Smith") and never hold a finished sentence back.
Rules and benchmark: ``docs/splitter.md``; the word lists, per language, are in
``pipeline/splitter_data.py``. Pure Python: no I/O, no event loop, no model.

API
---
``SentenceSplitter(language=None)``
    ``language``: the reply's language (ISO 639-1, e.g. the ASR language), which selects
    its abbreviation lists and whether German ordinals ("am 3. Oktober") apply; None uses
    every language's lists.
    ``feed(chunk: str) -> list[str]``: the sentences completed by this chunk, stripped.
    ``flush() -> list[str]``: the rest at the end of the reply (even without punctuation);
    the splitter is then empty and can be reused. ``reset()`` drops everything (barge-in).
    ``pending_len`` / ``cut_pending(n)``: the undecided tail of the text, for the soft cut.
    Any chunking of a text gives the same sentences; nothing but whitespace is ever dropped.
    Each sentence is an exact substring of the input.

``SpeechChunker(splitter, max_sentences=None, first_max_chars=None)``
    Pipeline-stage options around a splitter, same ``feed``/``flush`` API:

    - ``max_sentences=N``: once N sentences were released, ``done`` becomes True, the
      N-th call's output is truncated to N, and later ``feed``/``flush`` return ``[]``.
      The caller then closes the LLM stream so the server stops generating.
    - ``first_max_chars=M``: if the *first* sentence grows past M characters with no
      sentence boundary, release its head at the latest clause boundary seen so far
      (``,`` ``;`` ``:`` or a dash followed by whitespace, or CJK ``，；：、``) so speech
      can start. Only one such cut per reply, and only in the first sentence: later
      sentences are never cut. A soft-cut head does not count towards ``max_sentences``.
"""

from __future__ import annotations

import re

from pipeline.splitter_data import ACRONYM_WORDS as _ACRONYM_WORDS
from pipeline.splitter_data import (
    CONTINUES,
    ROMAN,
    SPLIT_ABBREVIATION_WORDS,
    TIME_ZONE_WORDS,
    prefixes,
    tables,
)

# Scanner states.
_NORMAL = 0  # inside a sentence
_TERMINAL = 1  # right after . ! ? … (and closers): the next character decides
_WAIT = 2  # terminal + whitespace, but the period may be an abbreviation: wait for a char
_CJK = 3  # after 。！？．: no space will come, the next non-closer character ends it
_WORD = 4  # waiting end, a capitalised word follows: is it one that continues ("Oktober")?

# What a terminal followed by whitespace means (see _classify).
_DEFINITE = 0  # a boundary now
_NEVER = 1  # title, initial, list marker: the sentence goes on
_AMBIG = 2  # a.m., etc., e.g., U.S., "...": ends unless a lowercase word follows
_AMBIG_NUM = 3  # No., Fig., Jan.: as _AMBIG, and a digit also continues ("No. 5")
_QUOTED = 4  # ?" ?) or an open «: a lowercase word means the quote was mid-sentence

# What the character after a waiting end says (see _resolve).
_ENDS = 0  # the sentence ended before the whitespace
_GOES_ON = 1  # lowercase word: no boundary after all
_JOINS = 2  # « … ! » : the closing guillemet belongs to the sentence, decide again after it
_LOOK = 3  # a listed word may follow ("3. O…" -> "Oktober"): match it letter by letter

_TERMINALS = frozenset(".!?…‼⁇⁈⁉‽؟।॥")
_STRONG = frozenset("!?‼⁇⁈⁉‽؟।॥")  # never an abbreviation
_CJK_TERMINALS = frozenset("。！？．｡")
_NEWLINES = frozenset("\n\r\u2028\u2029\x85\x0b\x0c")
# Closing marks that belong to the sentence they follow: quotes, brackets, markdown emphasis.
# (“ and ‘ close German quotes: „so“.)
_CLOSERS = frozenset("\"'”’“‘»)]}」』）】》〉〕*_")
_QUOTE_CLOSERS = frozenset("\"'”’“‘»」』")
# A quote or bracket after the terminal may close a quotation inside a longer sentence.
_HOLD_CLOSERS = _QUOTE_CLOSERS | frozenset(")]}）】》〉〕")
_OPENERS = "\"'“‘«([{*_¿¡<`~"
_MARKUP = frozenset("*_~`")  # transparent while waiting for the deciding character
_BULLETS = "-*•#>+_~`=|"
# After an abbreviation + space, these continue the sentence like a lowercase word does.
_CONTINUERS = frozenset(",;:)]}%&–—-/")
# After 」』 a particle or comma continues a Japanese/Chinese sentence (「はい！」と言った).
_CJK_CONTINUERS = frozenset("とっ、，")
# Everything the NORMAL scanner must look at; other characters are just appended.
_SPECIAL = re.compile(r"[\s.!?…‼⁇⁈⁉‽؟।॥。！？．｡«»]")

# The merged (language=None) lists, for reference and for the bench's decision points.
_ALL = tables(None)
TITLES = _ALL.titles
NUMERIC_PREFIXES = _ALL.numeric_prefixes
ABBREVIATIONS = _ALL.abbreviations | _ALL.acronyms
_DOTTED = re.compile(r"(?:[^\W\d_]\.)+[^\W\d_]")  # U.S, e.g, a.m, U.S.A
_LETTERS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ")
# Look-ahead words that only continue when their own period follows ("J. R.", "z. B.").
_DOTTED_WORDS = frozenset({_LETTERS, *SPLIT_ABBREVIATION_WORDS.values()})
_DOTTED_DATE = re.compile(r"\d{1,2}\.\d{1,2}")  # German "am 24.12. ist"
_MAX_TOKEN = 64  # longer tokens (URLs) are never abbreviations


def _is_emoji(c: str) -> bool:
    """Pictographs, dingbats and the joiners/modifiers inside emoji sequences. Right after a
    terminal they belong to that sentence, like a closing quote: "Done!🎉 Next step."."""
    o = ord(c)
    return (0x1F000 <= o <= 0x1FAFF or 0x2600 <= o <= 0x27BF or 0x2B00 <= o <= 0x2BFF
            or 0x2300 <= o <= 0x23FF or o in (0x200D, 0xFE0E, 0xFE0F)
            or 0xE0020 <= o <= 0xE007F)


def _is_cjk(c: str) -> bool:
    o = ord(c)
    return (0x3040 <= o <= 0x30FF or 0x3400 <= o <= 0x4DBF or 0x4E00 <= o <= 0x9FFF
            or 0xF900 <= o <= 0xFAFF)


class SentenceSplitter:
    """Incremental sentence splitter; see the module docstring and docs/splitter.md.

    Work per ``feed`` is proportional to the chunk: the pending sentence is kept as a list
    of pieces and only joined once, when it is released.
    """

    def __init__(self, *, language: str | None = None, titles: frozenset[str] | None = None,
                 numeric_prefixes: frozenset[str] | None = None,
                 abbreviations: frozenset[str] | None = None) -> None:
        """``language``: the reply's language (ISO 639-1, e.g. the ASR language) selects
        its abbreviation lists on top of the English ones; None (the default) uses every
        language's lists, for replies whose language is not known. ``titles`` etc.
        replace a list."""
        t = tables(language)
        self.language = language
        self.titles = t.titles if titles is None else titles
        self.numeric_prefixes = t.numeric_prefixes if numeric_prefixes is None \
            else numeric_prefixes
        self.abbreviations = t.abbreviations if abbreviations is None else abbreviations
        self.connectors = t.connectors
        self.acronyms = t.acronyms
        self.letter_nouns = t.letter_nouns
        self.ordinal_leads = t.ordinal_leads
        self.ordinal_words = t.ordinal_words
        self.weak_leads = t.weak_leads
        self.words_after_weak = t.words_after_weak
        self.ordinals = t.ordinals
        # Look-ahead words are matched as they arrive: a prefix that fits no word decides.
        self._prefixes = {words: prefixes(words) for words in (
            t.ordinal_words, t.words_after_weak, TIME_ZONE_WORDS, _ACRONYM_WORDS, *_DOTTED_WORDS)}
        self.reset()

    def reset(self) -> None:
        """Forget everything fed so far (e.g. on barge-in)."""
        self._parts: list[str] = []  # pending text not yet released
        self._parts_len = 0
        self._state = _NORMAL
        self._tok = ""  # current whitespace-delimited token (capped)
        self._prev_tok: str | None = None  # previous token of this sentence; None at start
        self._word = ""  # the token before the terminal run
        self._run = ""  # the terminal run: "." "?!" "..."
        self._closers = ""  # quotes/brackets after the run
        self._run_prev = ""  # the character before the run (CJK check)
        self._wait_kind = _DEFINITE
        self._wait_words: frozenset[str] = frozenset()  # capitalised words that continue
        self._wait_lw = ""  # the abbreviation being decided, lowercased
        self._look = ""  # letters of the word after a waiting end (state _WORD)
        self._ntok = 0  # words so far in this sentence
        self._cut = 0  # pending length at the candidate sentence end while waiting
        self._guillemets = 0  # open « in this sentence
        self._fw_decimal = False  # "３．" may become "３．５"
        self._cjk_quote = False  # 」 after 。 may be followed by a particle
        self._last = ""  # last character fed

    @property
    def pending_len(self) -> int:
        """Length of the raw text fed but not yet released (a suffix of all text fed)."""
        return self._parts_len

    def cut_pending(self, n: int) -> str:
        """Release the first ``n`` pending characters now (the pipeline's soft cut).

        The caller picks ``n`` at a clause boundary, before any undecided terminal.
        """
        text = "".join(self._parts)
        n = max(0, min(n, len(text)))
        head, rest = text[:n], text[n:]
        self._parts = [rest] if rest else []
        self._parts_len = len(rest)
        self._cut = max(0, self._cut - n)
        return head.strip()

    def feed(self, chunk: str) -> list[str]:
        out: list[str] = []
        seg = 0  # chunk[seg:i] is pending text not yet in self._parts
        i = 0
        n = len(chunk)
        while i < n:
            c = chunk[i]
            if c in _NEWLINES:
                # Small models write lists and headings without punctuation: a line break
                # always ends the sentence.
                self._end_line(chunk, seg, i, out)
                seg = i = i + 1
                continue
            state = self._state
            if state == _WAIT:
                if c.isspace() or c in _MARKUP:
                    i += 1  # "etc. **Next**": the emphasis does not decide, the letter does
                    continue
                verdict = self._resolve(c)
                if verdict == _LOOK:
                    self._state, self._look = _WORD, c
                    i += 1
                    continue
                if verdict == _ENDS:
                    seg = self._emit_cut(chunk, seg, i, out)
                    continue  # c starts the next sentence; rescan it in _NORMAL
                if verdict == _JOINS:
                    self._closers += c
                    self._guillemets -= 1
                    self._state = _TERMINAL
                    i += 1
                    continue
                self._state = state = _NORMAL
            elif state == _WORD:
                if c.isalpha():
                    look = self._look + c
                    if look in self._prefixes[self._wait_words] or (
                            look in self._wait_words):
                        self._look = look
                        i += 1
                        continue
                    goes_on = False
                else:
                    goes_on = self._look_goes_on(c)  # "3. Oktober " / "p.m. EST," / "J. R."
                look, self._look = self._look, ""
                if not goes_on:
                    seg = self._emit_cut(chunk, seg, i, out)
                self._state = state = _NORMAL
                self._add_tok(look)  # the word goes on in _NORMAL; rescan c there
            elif state == _TERMINAL:
                if c in _TERMINALS:
                    self._run += c  # "?!", "..."
                    self._add_tok(c)
                    i += 1
                    continue
                if c in _CLOSERS or _is_emoji(c):
                    self._closers += c
                    if c == "»":
                        self._guillemets = max(0, self._guillemets - 1)
                    self._add_tok(c)
                    i += 1
                    continue
                if c.isspace():
                    # Only whitespace decides: "3." may still become "3.5" and "example."
                    # may become "example.com".
                    kind = self._classify()
                    self._end_tok()
                    pos = self._parts_len + i - seg
                    if kind == _DEFINITE:
                        seg = self._emit(chunk, seg, i, out)
                    elif kind == _NEVER:
                        self._state = _NORMAL
                    else:
                        self._state, self._wait_kind, self._cut = _WAIT, kind, pos
                    i += 1
                    continue
                if _is_cjk(c) and self._run_prev and _is_cjk(self._run_prev) and not (
                        "…" in self._run or self._run.startswith("..")):
                    # "好.你" / "吗?我": CJK text written with ASCII marks has no spaces either.
                    # An ellipsis there is a pause inside the sentence: "这个问题……其实".
                    seg = self._emit(chunk, seg, i, out)
                    continue
                self._state = state = _NORMAL  # "3.5", "e.g", "example.com": not an end
            elif state == _CJK:
                if c in _CLOSERS or c in _CJK_TERMINALS or c in _TERMINALS or _is_emoji(c):
                    if c in _QUOTE_CLOSERS:
                        self._cjk_quote = True
                    self._add_tok(c)
                    i += 1
                    continue
                if (self._fw_decimal and c.isdigit()) or (
                        self._cjk_quote and c in _CJK_CONTINUERS):
                    self._state = state = _NORMAL
                else:
                    seg = self._emit(chunk, seg, i, out)  # sets _NORMAL; rescan c
                    continue
            # _NORMAL
            if c.isspace():
                self._end_tok()
                i += 1
                continue
            if c in _TERMINALS:
                self._state = _TERMINAL
                self._word, self._run, self._closers = self._tok, c, ""
                self._run_prev = chunk[i - 1] if i else self._last
                self._add_tok(c)
                i += 1
                continue
            if c in _CJK_TERMINALS:
                prev = chunk[i - 1] if i else self._last
                self._state = _CJK
                self._fw_decimal = c == "．" and prev.isdigit()
                self._cjk_quote = False
                self._add_tok(c)
                i += 1
                continue
            if c == "«":
                self._guillemets += 1
            elif c == "»":
                self._guillemets = max(0, self._guillemets - 1)
            # Fast path: ordinary characters up to the next one that matters.
            m = _SPECIAL.search(chunk, i + 1)
            j = m.start() if m else n
            self._add_tok(chunk[i:j])
            i = j
        if seg < n:
            self._parts.append(chunk[seg:])
            self._parts_len += n - seg
        if n:
            self._last = chunk[-1]
        return out

    def flush(self) -> list[str]:
        """The rest of the reply, even without final punctuation; then start afresh."""
        out: list[str] = []
        if self._state == _WAIT or (self._state == _WORD and not self._look_goes_on("")):
            self._emit_cut("", 0, 0, out)  # keep "etc." and what followed apart
        text = "".join(self._parts).strip()
        if text:
            out.append(text)
        self.reset()
        return out

    # -- decisions -------------------------------------------------------------------
    def _classify(self) -> int:
        """What the terminal run means now that whitespace follows it. Sets the look-ahead
        words (``_wait_words``) for the waiting kinds."""
        run = self._run
        closers = self._closers.strip("*_")  # markdown emphasis does not hide "**1.**"
        word = self._word.lstrip(_OPENERS)
        lw = word.lower()
        self._wait_words, self._wait_lw = frozenset(), lw
        if any(ch in _STRONG for ch in run):
            kind = _DEFINITE
        elif len(run) > 1 or "…" in run:
            kind = _AMBIG  # "Well... maybe" goes on, "Wait... What?" does not
        elif closers:
            kind = _AMBIG if (lw in self.abbreviations or lw in self.connectors
                              or _DOTTED.fullmatch(word) or (len(word) == 1 and word.islower())
                              ) else _DEFINITE  # "(etc.) and", "(i.e.) the"
        else:
            kind = self._classify_word(word, lw)
        if kind == _DEFINITE and (self._guillemets > 0
                                  or any(ch in _HOLD_CLOSERS for ch in closers)):
            kind = _QUOTED  # 'He asked "Why?" and left.', "Sleep (eight hours!) too."
        return kind

    def _classify_word(self, word: str, lw: str) -> int:
        """A single period after ``word``, no closers."""
        prev = (self._prev_tok or "").strip(_OPENERS).lower()
        if lw == "st" and self._ntok > 1 and self._prev_tok and self._prev_tok[0].isupper():
            return _AMBIG  # "Main St. The shop" is Street; "Visit St. Paul's" a title
        if lw in self.titles or lw in self.connectors:
            return _NEVER  # "Dr. Smith", "e.g. Python", "z.B. Äpfel": never an end
        if len(word) == 1 and word.isupper():
            if prev.rstrip(".") in self.letter_nouns or (word == "C" and prev in ("a.", "d.")):
                # "vitamin D. It", "44 a. C. Su": a label, not an initial; but another
                # initial continues: "The author is J. R. R. Tolkien".
                self._wait_words = _LETTERS
                return _AMBIG
            return _NEVER  # "J. K. Rowling"
        if word.isdecimal() and len(word) <= 3:
            if self._list_position():
                return _NEVER  # "1. Drink water", "Steps: 2. Rinse"
            if self.ordinals:
                lead = prev.strip("*_")
                if lead in self.ordinal_leads:
                    return _NEVER  # "am 3. Oktober", "im 19. Jahrhundert"
                # "bis 15. März", "1. oder 2."; language=None: "am 9. November" but not
                # "room 12. April is".
                self._wait_words = self.words_after_weak if lead in self.weak_leads \
                    else self.ordinal_words
                return _AMBIG
            return _DEFINITE
        if len(word) > 1 and word.isupper() and ROMAN.fullmatch(word):
            return _NEVER if self._list_position() else _AMBIG  # "II. Methods", "Friedrich II."
        if lw in self.numeric_prefixes:
            return _AMBIG_NUM  # "p. 12", "Nr. 5"
        if lw in ("a.m", "p.m"):
            self._wait_words = TIME_ZONE_WORDS  # "3 p.m. EST on Friday"
            return _AMBIG
        if _DOTTED.fullmatch(word):
            if word.isupper() and lw not in self.acronyms and len(word) <= 5:
                return _NEVER  # "J.K. Rowling", "J.R.R. Tolkien": initials
            if lw in self.acronyms:
                self._wait_words = _ACRONYM_WORDS  # "the U.S. Army"
            return _AMBIG
        if lw in self.abbreviations:
            return _AMBIG
        if len(word) == 1 and word.islower():
            self._wait_words = SPLIT_ABBREVIATION_WORDS.get(lw, frozenset())  # "z. B."
            return _AMBIG
        if self.ordinals and _DOTTED_DATE.fullmatch(word):
            return _AMBIG  # "Am 24.12. ist", "bis zum 31.12. Danach"
        return _DEFINITE

    def _look_goes_on(self, c: str) -> bool:
        """The word after a waiting end is complete (``c`` is not a letter): does it
        continue the sentence? Letters that continue only as another abbreviation ("J. R.",
        "z. B.", "a. C.") need their period."""
        if self._look not in self._wait_words:
            return False
        return c == "." or self._wait_words not in _DOTTED_WORDS

    def _list_position(self) -> bool:
        prev = self._prev_tok
        return prev is None or prev.rstrip("*_").endswith(":")

    def _resolve(self, c: str) -> int:
        """The first non-space character after an ambiguous end decides it."""
        kind = self._wait_kind
        if kind == _QUOTED and c == "»" and self._guillemets > 0:
            return _JOINS
        if c.islower() or c in _CONTINUERS:
            return _GOES_ON
        if kind == _AMBIG_NUM and (c.isdigit() or c == "#" or (
                c == "(" and self._wait_lw == "al")):
            return _GOES_ON  # "No. 5", "et al. (2020)"
        if self._wait_words and c.isalpha() and (
                c in self._prefixes[self._wait_words] or c in self._wait_words):
            return _LOOK  # "3. O…": decided once the word stops fitting "Oktober"
        # Uppercase, digit, opening quote or bracket, a letter without case (CJK...), emoji.
        return _ENDS

    # -- bookkeeping -----------------------------------------------------------------
    def _add_tok(self, s: str) -> None:
        if len(self._tok) < _MAX_TOKEN:
            self._tok += s

    def _end_tok(self) -> None:
        if self._tok.strip(_BULLETS):  # "-", "**", "#" are not words
            self._prev_tok = self._tok
            self._ntok += 1
        self._tok = ""

    def _start_sentence(self) -> None:
        self._state = _NORMAL
        self._tok = ""
        self._prev_tok = None
        self._ntok = 0
        self._look = ""
        self._guillemets = 0

    def _emit(self, chunk: str, seg: int, i: int, out: list[str]) -> int:
        """Release everything pending before chunk[i]; return the new segment start."""
        self._parts.append(chunk[seg:i])
        text = "".join(self._parts).strip()
        if text:
            out.append(text)
        self._parts, self._parts_len = [], 0
        self._start_sentence()
        return i

    def _emit_cut(self, chunk: str, seg: int, i: int, out: list[str]) -> int:
        """Release the pending text up to the waiting end; what came after stays pending."""
        self._parts.append(chunk[seg:i])
        text = "".join(self._parts)
        head, rest = text[: self._cut].strip(), text[self._cut:]
        if head:
            out.append(head)
        self._parts, self._parts_len = ([rest], len(rest)) if rest else ([], 0)
        self._start_sentence()
        return i

    def _end_line(self, chunk: str, seg: int, i: int, out: list[str]) -> None:
        if self._state == _WAIT or (self._state == _WORD and not self._look_goes_on("\n")):
            self._emit_cut(chunk, seg, i, out)
            seg = i
        self._emit(chunk, seg, i, out)


_CLAUSE_MARKS = frozenset(",;:—–")
_CJK_CLAUSE_MARKS = frozenset("，；：、")
# Words an English phrase starts with: a first sentence with no clause mark is cut just
# before one of them ("The best way to stay safe on a hike | is to tell someone ...").
# Words a speaker may pause before: conjunctions, relatives, "to", the verbs "is/was...".
CLAUSE_STARTS = frozenset("""
and or but so because since while when where which who that if unless until though although
to with for from about into through after before during without is are was were will would
can could should
""".split())
# Prepositions that open a phrase: "Airplanes stay | in the air", "invented | by Karl Benz".
# ("of" is left out: "One | of the best ways" splits a noun phrase.)
PREPOSITION_STARTS = frozenset("in on at by like as than over under between around across "
                               "along within".split())
PHRASE_STARTS = CLAUSE_STARTS | PREPOSITION_STARTS
_MIN_PHRASE_HEAD = 12  # characters: never cut a head shorter than "The best way"


class SpeechChunker:
    """``max_sentences`` and the first-sentence soft cut around a ``SentenceSplitter``."""

    def __init__(self, splitter: SentenceSplitter | None = None, *,
                 max_sentences: int | None = None, first_max_chars: int | None = None,
                 first_phrase_chars: int | None = None,
                 phrase_starts: frozenset[str] = PHRASE_STARTS,
                 first_word_chars: int | None = None) -> None:
        self.splitter = splitter if splitter is not None else SentenceSplitter()
        self.max_sentences = max_sentences
        self.first_max_chars = first_max_chars
        # A first sentence with no clause mark is cut at a word boundary: before the first
        # phrase-starting word that begins at or after this many characters (None: never).
        self.first_phrase_chars = first_phrase_chars
        self.phrase_starts = phrase_starts
        # A first sentence that reaches this many characters with neither is cut at a word
        # boundary anyway (None: never): a long head is a long wait for its synthesis.
        self.first_word_chars = first_word_chars
        self.sentences = 0  # full sentences released
        self._first_open = first_max_chars is not None  # still watching the first sentence
        self._fed_len = 0  # characters fed while watching the first sentence
        self._clause_end = -1  # offset in the fed text just after the latest clause mark
        # Offsets of the phrase-starting words fed so far, and of the space after each.
        self._phrases: list[tuple[int, int]] = []
        self._word_ends: list[int] = []  # offsets after the words a head may end with
        self._word = ""  # the word being fed, and where it began
        self._word_at = 0
        self._prev = self._prev2 = ""  # the last two characters fed

    @property
    def done(self) -> bool:
        return self.max_sentences is not None and self.sentences >= self.max_sentences

    def feed(self, chunk: str) -> list[str]:
        if self.done:
            return []
        out = self.splitter.feed(chunk)
        if self._first_open:
            if out:
                self._first_open = False  # the first sentence ended on its own
            else:
                out = self._soft_cut(chunk)
                return out  # a head is not a sentence: nothing counts yet
        return self._count(out)

    def flush(self) -> list[str]:
        if self.done:
            return []  # the stream was closed on purpose: the tail is not spoken
        self._first_open = False
        return self._count(self.splitter.flush())

    def _count(self, sentences: list[str]) -> list[str]:
        if self.max_sentences is not None:
            sentences = sentences[: self.max_sentences - self.sentences]
        self.sentences += len(sentences)
        return sentences

    def _soft_cut(self, chunk: str) -> list[str]:
        assert self.first_max_chars is not None
        # Only the new chunk is scanned: feed stays O(chunk) while the first sentence grows.
        for c in chunk:
            # Clause marks followed by whitespace: "Well, ", "note: ", "this — " (not "3,5").
            if (c.isspace() and (self._prev in _CLAUSE_MARKS
                                 or (self._prev == "-" and self._prev2.isspace()))
                    or self._prev in _CJK_CLAUSE_MARKS):  # CJK: no space after "，"
                self._clause_end = self._fed_len
            if c.isalpha() or c == "'":
                if not self._word:
                    self._word_at = self._fed_len
                self._word += c
            elif self._word:
                if c.isspace() and self._word.lower() in self.phrase_starts:
                    self._phrases.append((self._word_at, self._fed_len))
                if c.isspace() and self._word.lower() not in CONTINUES:
                    self._word_ends.append(self._fed_len)
                self._word = ""
            self._prev2, self._prev = self._prev, c
            self._fed_len += 1
        pending = self.splitter.pending_len
        start = self._fed_len - pending  # where the pending text begins in the fed text
        if pending <= self.first_max_chars:
            return []
        limit = self.first_phrase_chars
        # With the word cut, a phrase start counts only within its first W characters: by
        # then the word cut decides, however the text was chunked.
        within = start + (self.first_word_chars or pending)
        late = [p - start for p, space in self._phrases if limit is not None
                and p - start >= max(limit, _MIN_PHRASE_HEAD) and space < within]
        if self._clause_end > start:
            cut = self._clause_end - start
        elif late:
            cut = late[0]
        elif (self.first_word_chars is not None and pending >= self.first_word_chars
              and (word_cut := self._word_cut(start, within)) is not None):
            cut = word_cut
        else:
            return []
        self._first_open = False  # one cut per reply; later sentences are never cut
        head = self.splitter.cut_pending(cut)
        return [head] if head else []

    def _word_cut(self, start: int, within: int) -> int | None:
        """Where a long first sentence with no clause mark and no late phrase start is cut:
        before an earlier phrase start ("Blue appears | because of ..."), else after the
        last word a phrase can end with ("The history of bicycles | dates back ...", never
        "... thousands of | years"), never leaving a head under 12 characters. Only words
        finished before ``within`` (``first_word_chars`` past ``start``) count, so the
        chunking of the text does not change the cut."""
        early = [p - start for p, space in self._phrases
                 if p - start >= _MIN_PHRASE_HEAD and space < within]
        if early:
            return early[0]
        ends = [e - start for e in self._word_ends
                if e - start >= _MIN_PHRASE_HEAD and e < within]
        return ends[-1] if ends else None
