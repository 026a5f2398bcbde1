"""Tricky assistant replies with their expected sentences (the splitter's evidence corpus).

Each case is ``(id, rule, text, sentences)``: ``sentences`` are exact substrings of ``text``
in order, stripped. ``rule`` names the docs/splitter.md rule the case exercises. Used by
``tests/test_splitter.py`` (three chunkings each) and ``scripts/bench_splitter.py``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import NamedTuple


class Case(NamedTuple):
    id: str
    rule: str
    text: str
    sentences: list[str]


def _c(id: str, rule: str, text: str, *sentences: str) -> Case:
    return Case(id, rule, text, list(sentences))


CORPUS: list[Case] = [
    # -- 1. terminals, runs, closers ----------------------------------------------------
    _c("basic", "terminal", "Sure! I can help with that. What do you need?",
       "Sure!", "I can help with that.", "What do you need?"),
    _c("runs", "terminal", "Really?! That is amazing!!! Are you sure?? Yes.",
       "Really?!", "That is amazing!!!", "Are you sure??", "Yes."),
    _c("quote-close", "closers", 'She said, "I will be there." Then she hung up.',
       'She said, "I will be there."', "Then she hung up."),
    _c("curly-quote", "closers", "He replied, “Absolutely.” After that, we left.",
       "He replied, “Absolutely.”", "After that, we left."),
    _c("paren-close", "closers",
       "Drink water (at least two liters.) Sleep well (eight hours!) too.",
       "Drink water (at least two liters.)", "Sleep well (eight hours!) too."),
    _c("paren-mid", "closers", "It works (mostly). The rest is up to you.",
       "It works (mostly).", "The rest is up to you."),
    _c("question-quote-mid", "quoted", 'He asked "Why?" and walked away. I did not answer.',
       'He asked "Why?" and walked away.', "I did not answer."),
    _c("exclaim-quote-end", "quoted", 'They shouted "Run!" Everyone ran.',
       'They shouted "Run!"', "Everyone ran."),
    _c("single-quote", "quoted", "The sign said 'Closed.' We went home.",
       "The sign said 'Closed.'", "We went home."),
    _c("interrobang", "terminal", "You did what‽ Tell me more.", "You did what‽", "Tell me more."),
    _c("no-final", "flush", "The capital of France is Paris. It is known for the Eiffel Tower",
       "The capital of France is Paris.", "It is known for the Eiffel Tower"),
    _c("single-word", "terminal", "Yes. No. Maybe.", "Yes.", "No.", "Maybe."),
    # -- 2. titles and initials -----------------------------------------------------------
    _c("dr", "titles", "Dr. Smith will see you now. Please bring your card.",
       "Dr. Smith will see you now.", "Please bring your card."),
    _c("mr-mrs", "titles", "Mr. and Mrs. Brown live next door. Ms. Lee visits often.",
       "Mr. and Mrs. Brown live next door.", "Ms. Lee visits often."),
    _c("prof", "titles", "Ask Prof. Ada Lovelace. She knows everything about engines.",
       "Ask Prof. Ada Lovelace.", "She knows everything about engines."),
    _c("st-mt", "titles", "We visited St. Louis and then climbed Mt. Everest. It was cold.",
       "We visited St. Louis and then climbed Mt. Everest.", "It was cold."),
    _c("vs", "titles", "It was Brazil vs. Germany in the semifinal. Germany won 7-1.",
       "It was Brazil vs. Germany in the semifinal.", "Germany won 7-1."),
    _c("no-number", "titles", "Beethoven's Symphony No. 9 is famous. It premiered in 1824.",
       "Beethoven's Symphony No. 9 is famous.", "It premiered in 1824."),
    _c("no-answer", "titles", "Is it safe? No. It is not safe at all.",
       "Is it safe?", "No.", "It is not safe at all."),
    _c("initials", "titles", "J. K. Rowling wrote Harry Potter. The first book came out in 1997.",
       "J. K. Rowling wrote Harry Potter.", "The first book came out in 1997."),
    _c("initial-mid", "titles", "The novel is by George R. R. Martin. He also writes blogs.",
       "The novel is by George R. R. Martin.", "He also writes blogs."),
    _c("title-newline", "newline", "Thanks, Dr.\nSee you soon.", "Thanks, Dr.", "See you soon."),
    # -- 3. ambiguous abbreviations -------------------------------------------------------
    _c("am-lower", "abbrev", "The store opens at 9 a.m. tomorrow. Don't be late.",
       "The store opens at 9 a.m. tomorrow.", "Don't be late."),
    _c("am-upper", "abbrev", "The store opens at 9 a.m. Bring your receipt.",
       "The store opens at 9 a.m.", "Bring your receipt."),
    _c("pm-digit", "abbrev", "The train leaves at 5 p.m. 3 trains run later.",
       "The train leaves at 5 p.m.", "3 trains run later."),
    _c("etc-upper", "abbrev", "Pack socks, shirts, etc. You will need them.",
       "Pack socks, shirts, etc.", "You will need them."),
    _c("etc-lower", "abbrev", "Pack socks, shirts, etc. and a warm jacket.",
       "Pack socks, shirts, etc. and a warm jacket."),
    _c("etc-comma", "abbrev", "Fruits (apples, pears, etc.) are healthy. Eat them daily.",
       "Fruits (apples, pears, etc.) are healthy.", "Eat them daily."),
    _c("eg", "abbrev", "Use a light oil, e.g. olive oil, for cooking. It tastes better.",
       "Use a light oil, e.g. olive oil, for cooking.", "It tastes better."),
    _c("ie", "abbrev", "Choose the cheaper plan, i.e. the basic one. It covers most needs.",
       "Choose the cheaper plan, i.e. the basic one.", "It covers most needs."),
    _c("us-lower", "abbrev", "The U.S. government announced new rules. They start in May.",
       "The U.S. government announced new rules.", "They start in May."),
    _c("us-end", "abbrev", "She moved to the U.S. Her family stayed in Spain.",
       "She moved to the U.S.", "Her family stayed in Spain."),
    _c("usa-quote", "abbrev", 'He flew to the U.S.A. "It was long," he said.',
       "He flew to the U.S.A.", '"It was long," he said.'),
    _c("phd", "abbrev", "She has a Ph.D. in physics. Her thesis was on lasers.",
       "She has a Ph.D. in physics.", "Her thesis was on lasers."),
    _c("ellipsis-lower", "ellipsis", "Well... maybe we could try again. What do you think?",
       "Well... maybe we could try again.", "What do you think?"),
    _c("ellipsis-upper", "ellipsis", "I waited and waited... Nobody came.",
       "I waited and waited...", "Nobody came."),
    _c("ellipsis-char", "ellipsis", "Let me think… Yes, that works. Hmm… not sure though.",
       "Let me think…", "Yes, that works.", "Hmm… not sure though."),
    _c("inc", "abbrev", "Apple Inc. makes phones. Its stock rose.",
       "Apple Inc. makes phones.", "Its stock rose."),
    _c("et-al", "abbrev", "Smith et al. found the same effect. Others disagree.",
       "Smith et al. found the same effect.", "Others disagree."),
    _c("month", "abbrev", "The meeting is on Jan. 5 at noon. Please confirm.",
       "The meeting is on Jan. 5 at noon.", "Please confirm."),
    _c("fig", "abbrev", "See Fig. 3 for details. It shows the trend.",
       "See Fig. 3 for details.", "It shows the trend."),
    _c("approx", "abbrev", "It takes approx. twenty minutes. Then it is ready.",
       "It takes approx. twenty minutes.", "Then it is ready."),
    _c("min-unit", "abbrev", "Boil the eggs for 10 min. Then cool them in cold water.",
       "Boil the eggs for 10 min.", "Then cool them in cold water."),
    # -- 4. numbers -----------------------------------------------------------------------
    _c("decimal", "numbers", "The value of pi is about 3.14159. It never ends.",
       "The value of pi is about 3.14159.", "It never ends."),
    _c("year", "numbers", "I was born in 1990. Then we moved to Berlin.",
       "I was born in 1990.", "Then we moved to Berlin."),
    _c("count-end", "numbers", "The answer is 42. That is all.",
       "The answer is 42.", "That is all."),
    _c("money", "numbers", "It costs $4.99 per month. The annual plan is $49.99. That saves money.",
       "It costs $4.99 per month.", "The annual plan is $49.99.", "That saves money."),
    _c("percent", "numbers", "Sales grew by 12.5% last year. Profits fell by 3%. Odd, right?",
       "Sales grew by 12.5% last year.", "Profits fell by 3%.", "Odd, right?"),
    _c("version", "numbers", "Upgrade to version 3.11.4. It fixes the bug. Python 3.12 is faster.",
       "Upgrade to version 3.11.4.", "It fixes the bug.", "Python 3.12 is faster."),
    _c("time", "numbers", "The show starts at 7:30. Doors open at 7.", "The show starts at 7:30.",
       "Doors open at 7."),
    _c("thousands", "numbers", "The city has 1,250,000 people. It is growing.",
       "The city has 1,250,000 people.", "It is growing."),
    _c("list-inline", "list", "Here is the plan: 1. Drink water. 2. Sleep early. 3. Walk daily.",
       "Here is the plan: 1. Drink water.", "2. Sleep early.", "3. Walk daily."),
    _c("list-lines", "list", "Tips:\n1. Drink water\n2. Sleep early\n3. Walk daily",
       "Tips:", "1. Drink water", "2. Sleep early", "3. Walk daily"),
    _c("list-start", "list", "1. Preheat the oven. 2. Mix the flour and sugar.",
       "1. Preheat the oven.", "2. Mix the flour and sugar."),
    _c("list-bold", "list", "**1.** Preheat the oven.\n**2.** Bake for 20 minutes.",
       "**1.** Preheat the oven.", "**2.** Bake for 20 minutes."),
    _c("range", "numbers", "Bake it for 20-25 minutes. Let it cool for 5.",
       "Bake it for 20-25 minutes.", "Let it cool for 5."),
    _c("score", "numbers", "Spain won 2.0 on aggregate? No, it was 2-0. Close game.",
       "Spain won 2.0 on aggregate?", "No, it was 2-0.", "Close game."),
    _c("temperature", "numbers", "Water boils at 100 °C. At altitude it is 95.5 °C. Try it.",
       "Water boils at 100 °C.", "At altitude it is 95.5 °C.", "Try it."),
    _c("ordinal-chapter", "numbers", "Read chapter 12. It explains everything.",
       "Read chapter 12.", "It explains everything."),
    # -- 5. URLs, emails, files, code ---------------------------------------------------
    _c("url", "urls", "Visit https://example.com/docs. It has guides. Or see www.python.org.",
       "Visit https://example.com/docs.", "It has guides.", "Or see www.python.org."),
    _c("url-query", "urls", "Try https://x.org/?q=a.b&y=1! It works.",
       "Try https://x.org/?q=a.b&y=1!", "It works."),
    _c("domain", "urls", "I use example.com for tests. It is reserved.",
       "I use example.com for tests.", "It is reserved."),
    _c("email", "urls", "Write to help@example.co.uk. We reply within a day.",
       "Write to help@example.co.uk.", "We reply within a day."),
    _c("file", "files", "Open config.yaml and edit it. Then run main.py. Done.",
       "Open config.yaml and edit it.", "Then run main.py.", "Done."),
    _c("code", "files", "Call `os.path.join()` here. Use `str.split()` to parse.",
       "Call `os.path.join()` here.", "Use `str.split()` to parse."),
    _c("dotfile", "files", "Edit your .bashrc file. Then reload the shell.",
       "Edit your .bashrc file.", "Then reload the shell."),
    _c("ip", "urls", "The server is at 192.168.1.1. Connect to it.",
       "The server is at 192.168.1.1.", "Connect to it."),
    # -- 6. line breaks, lists, headings --------------------------------------------------
    _c("heading", "newline", "## Morning routine\nWake up early. Stretch for five minutes.",
       "## Morning routine", "Wake up early.", "Stretch for five minutes."),
    _c("bullets", "newline", "Benefits:\n- better sleep\n- more energy\n- less stress",
       "Benefits:", "- better sleep", "- more energy", "- less stress"),
    _c("blank-lines", "newline", "First paragraph ends here.\n\n\nSecond paragraph starts.",
       "First paragraph ends here.", "Second paragraph starts."),
    _c("crlf", "newline", "Line one\r\nLine two.\r\n", "Line one", "Line two."),
    _c("leading-newlines", "newline", "\n\nHello there. How are you?", "Hello there.",
       "How are you?"),
    _c("bullet-sentences", "newline", "* Drink water. It helps.\n* Sleep well.",
       "* Drink water.", "It helps.", "* Sleep well."),
    _c("numbered-headings", "list", "1. Planning\nDecide where to go.\n2. Packing\nBring a map.",
       "1. Planning", "Decide where to go.", "2. Packing", "Bring a map."),
    # -- 7. CJK ---------------------------------------------------------------------------
    _c("zh", "cjk", "今天天气很好。我们去公园吧！你觉得怎么样？",
       "今天天气很好。", "我们去公园吧！", "你觉得怎么样？"),
    _c("zh-decimal", "cjk", "这需要3.5个小时。然后我们休息。",
       "这需要3.5个小时。", "然后我们休息。"),
    _c("zh-quote", "cjk", "他说：“我明天来。”大家都很高兴。",
       "他说：“我明天来。”", "大家都很高兴。"),
    _c("ja", "cjk", "こんにちは。元気ですか？今日は暑いですね。",
       "こんにちは。", "元気ですか？", "今日は暑いですね。"),
    _c("ja-bracket", "cjk", "「ありがとう。」彼女は笑った。", "「ありがとう。」", "彼女は笑った。"),
    _c("ja-particle", "cjk", "「はい！」と彼は言った。", "「はい！」と彼は言った。"),
    _c("zh-mixed", "cjk", "我用Python 3.12写代码。很好用！", "我用Python 3.12写代码。", "很好用！"),
    _c("zh-ascii-marks", "cjk", "真的吗?我不信.你呢?", "真的吗?", "我不信.", "你呢?"),
    _c("fullwidth-decimal", "cjk", "価格は３．５ドルです．安いです．", "価格は３．５ドルです．",
       "安いです．"),
    _c("zh-newline", "cjk", "步骤如下：\n第一步，洗手。\n第二步，做饭。",
       "步骤如下：", "第一步，洗手。", "第二步，做饭。"),
    # -- 8. other languages ---------------------------------------------------------------
    _c("es", "languages", "¿Cómo estás? ¡Qué bien! Me alegro mucho.",
       "¿Cómo estás?", "¡Qué bien!", "Me alegro mucho."),
    _c("es-sr", "languages", "El Sr. García llegó tarde. ¿Por qué? No lo sé.",
       "El Sr. García llegó tarde.", "¿Por qué?", "No lo sé."),
    _c("fr-space", "languages", "Bonjour ! Comment ça va ? Très bien, merci.",
       "Bonjour !", "Comment ça va ?", "Très bien, merci."),
    _c("fr-guillemets", "languages", "Il m'a dit : « Bonjour ! » Puis il est parti.",
       "Il m'a dit : « Bonjour ! »", "Puis il est parti."),
    _c("fr-nbsp", "languages", "Vraiment\u00a0? Oui\u00a0! C'est vrai.",
       "Vraiment\u00a0?", "Oui\u00a0!", "C'est vrai."),
    _c("de-decimal", "languages", "Das kostet 3,50 Euro. Die Fahrt dauert 2,5 Stunden.",
       "Das kostet 3,50 Euro.", "Die Fahrt dauert 2,5 Stunden."),
    _c("de-quote", "languages", "Er sagte: „Ich komme morgen.“ Dann ging er.",
       "Er sagte: „Ich komme morgen.“", "Dann ging er."),
    _c("ru", "languages", "Привет! Как дела? Всё хорошо, т.е. отлично.",
       "Привет!", "Как дела?", "Всё хорошо, т.е. отлично."),
    _c("it", "languages", "Ciao! Sono le 10.30. Andiamo?", "Ciao!", "Sono le 10.30.", "Andiamo?"),
    _c("ar", "languages", "كيف حالك؟ أنا بخير.", "كيف حالك؟", "أنا بخير."),
    _c("hi", "languages", "मैं ठीक हूँ। आप कैसे हैं?", "मैं ठीक हूँ।", "आप कैसे हैं?"),
    # -- 9. emoji and markdown ------------------------------------------------------------
    _c("emoji-inline", "emoji", "Great job 🎉 on finishing! Keep going 💪.",
       "Great job 🎉 on finishing!", "Keep going 💪."),
    _c("emoji-line", "emoji", "Have fun! 🎉\nSee you later.", "Have fun!", "🎉", "See you later."),
    _c("bold-end", "markdown", "This is **very important.** Read it twice.",
       "This is **very important.**", "Read it twice."),
    _c("bold-start", "markdown", "**Note:** Save often. *Really* often.",
       "**Note:** Save often.", "*Really* often."),
    _c("italic-after-abbrev", "markdown", "Bring snacks, drinks, etc. *Don't* forget water.",
       "Bring snacks, drinks, etc.", "*Don't* forget water."),
    _c("bold-question", "markdown", "**Why does it work?** Because of gravity.",
       "**Why does it work?**", "Because of gravity."),
    _c("link-md", "markdown", "See [the docs](https://docs.python.org/3/). They help.",
       "See [the docs](https://docs.python.org/3/).", "They help."),
    # -- 10. mixed realistic replies ------------------------------------------------------
    _c("recipe", "mixed",
       "Sure! Here's a quick recipe:\n\n1. Boil 2.5 cups of water.\n2. Add the pasta.\n"
       "3. Cook for 8-10 min. and drain.\n\nEnjoy your meal!",
       "Sure!", "Here's a quick recipe:", "1. Boil 2.5 cups of water.", "2. Add the pasta.",
       "3. Cook for 8-10 min. and drain.", "Enjoy your meal!"),
    _c("history", "mixed",
       "The bicycle was invented in 1817 by Karl Drais. Early models had no pedals. "
       "By the 1890s, bikes were popular in the U.S. and Europe.",
       "The bicycle was invented in 1817 by Karl Drais.", "Early models had no pedals.",
       "By the 1890s, bikes were popular in the U.S. and Europe."),
    _c("weather", "mixed",
       "Tomorrow will be sunny, with highs of 24.5 °C. Rain is likely after 6 p.m. "
       "Take an umbrella!",
       "Tomorrow will be sunny, with highs of 24.5 °C.", "Rain is likely after 6 p.m.",
       "Take an umbrella!"),
    _c("science", "mixed",
       "The sky looks blue because of Rayleigh scattering. Shorter wavelengths (i.e. blue "
       "light) scatter more. At sunset... the light travels farther.",
       "The sky looks blue because of Rayleigh scattering.",
       "Shorter wavelengths (i.e. blue light) scatter more.",
       "At sunset... the light travels farther."),
    _c("tea", "mixed",
       "Heat the water to about 80 °C. Steep the tea for 2-3 min. Don't over-steep it! "
       "Add honey, lemon, etc. if you like.",
       "Heat the water to about 80 °C.", "Steep the tea for 2-3 min.", "Don't over-steep it!",
       "Add honey, lemon, etc. if you like."),
    _c("hiking", "mixed",
       "For the hike, bring: water, snacks, and a map. The trail to Mt. Rainier is 9.2 "
       "miles long. Start before 7 a.m. to avoid the heat.",
       "For the hike, bring: water, snacks, and a map.",
       "The trail to Mt. Rainier is 9.2 miles long.", "Start before 7 a.m. to avoid the heat."),
    _c("language", "mixed",
       "Learning Spanish? ¡Buena idea! Practice 15 min. every day. Apps like Duolingo help.",
       "Learning Spanish?", "¡Buena idea!", "Practice 15 min. every day.",
       "Apps like Duolingo help."),
]


# -- chunkings: how the text reaches the splitter -----------------------------------------
def _is_cjk(c: str) -> bool:
    o = ord(c)
    return 0x3040 <= o <= 0x30FF or 0x3400 <= o <= 0x9FFF or 0xF900 <= o <= 0xFAFF \
        or 0xFF00 <= o <= 0xFFEF


def _wordish(c: str) -> bool:
    return c.isalpha() and not _is_cjk(c)


def llm_tokens(text: str) -> list[str]:
    """LLM-like tokens: a word with its leading space, single digits, single punctuation
    marks, whitespace runs (the space before a word goes with the word), CJK one by one."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if _wordish(c) or (c == " " and i + 1 < n and _wordish(text[i + 1])):
            j = i + 1
            while j < n and _wordish(text[j]):
                j += 1
            out.append(text[i:j])
            i = j
        elif c.isspace():
            j = i
            while j < n and text[j].isspace():
                j += 1
            if j - i > 1 and text[j - 1] == " " and j < n and _wordish(text[j]):
                j -= 1  # leave the last space to the next word: " word"
            out.append(text[i:j])
            i = j
        else:  # digit, punctuation, emoji, CJK: one character per token
            out.append(c)
            i += 1
    return out


def word_chunks(text: str) -> list[str]:
    """Whole words with their leading whitespace (and the trailing whitespace alone)."""
    words = re.findall(r"\s*\S+", text)
    tail = text[sum(map(len, words)):]
    return words + ([tail] if tail else [])


def char_chunks(text: str) -> list[str]:
    return list(text)


CHUNKINGS: dict[str, Callable[[str], list[str]]] = {
    "llm_tokens": llm_tokens, "words": word_chunks, "chars": char_chunks,
}
