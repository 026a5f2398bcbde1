"""Word lists behind the sentence splitter's abbreviation rules, per language.

All entries are lowercase and without their final period ("e.g." -> "e.g"), except the
look-ahead word sets (``*_WORDS``), which are matched case-sensitively against the word
that follows. ``tables(language)`` merges the English/international base with one
language's lists, or with every language's (``language=None``); docs/splitter.md says what
each list does and why a few entries are left out of the merged set.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import NamedTuple


class Tables(NamedTuple):
    titles: frozenset[str]  # never end: "Dr. Smith", "Sra. López", "dott.ssa Bianchi"
    connectors: frozenset[str]  # never end either: "e.g. Tom", "z.B. Äpfel", "ca. 20"
    numeric_prefixes: frozenset[str]  # ambiguous, and a digit continues: "p. 12"
    abbreviations: frozenset[str]  # ambiguous: ends before an uppercase letter ("etc.")
    acronyms: frozenset[str]  # dotted acronyms that end before uppercase ("U.S. The")
    letter_nouns: frozenset[str]  # "vitamin D." / "plan B.": a label, not an initial
    ordinal_leads: frozenset[str]  # "im 19.": the number is an ordinal, decided at once
    ordinal_words: frozenset[str]  # "3. Oktober", "19. Jahrhundert": an ordinal's noun
    weak_leads: frozenset[str]  # language=None: "am 3." may be English "I am 3."
    words_after_weak: frozenset[str]  # language=None: words that continue only after a lead
    ordinals: bool  # German-style ordinal numbers ("3." + month, "1. oder 2.")


def _f(words: str) -> frozenset[str]:
    return frozenset(words.split())


# -- English and international (always on) -----------------------------------------------
_EN = Tables(
    titles=_f("mr mrs ms mx dr prof st mt vs sr sra srta rev gen col capt lt sgt gov sen "
              "rep hon pres messrs"),
    # Latin and English abbreviations that introduce what follows: they are never the last
    # word of a sentence, so "i.e. Tom" and "e.g. Python" stay whole.
    connectors=_f("e.g i.e cf viz a.k.a approx ca incl esp resp w.r.t"),
    numeric_prefixes=_f("no nos fig figs vol vols ch chap p pp para art eq ref tel ext op "
                        "sec est al jan feb mar apr jun jul aug sep sept oct nov dec"),
    abbreviations=_f("etc appt apt dept inc ltd co corp jr ph.d min mins secs hr hrs avg "
                     "misc ft oz lb lbs kg km cm mm"),
    acronyms=_f("u.s u.s.a u.k e.u u.n d.c l.a n.y n.y.c u.a.e u.s.s.r p.r.c b.c a.d f.b.i "
                "c.i.a n.a.s.a n.a.t.o p.s n.b r.i.p a.i o.k t.v s.f"),
    letter_nouns=_f("vitamin vitamins plan option options type grade class group section "
                    "part appendix exhibit row column size letter point category level zone "
                    "gate terminal platform block building wing hall room model series phase "
                    "stage track channel tier lane answer choice is was are were be choose "
                    "pick select try chapter act book volume"),
    ordinal_leads=frozenset(),
    ordinal_words=frozenset(),
    weak_leads=frozenset(), words_after_weak=frozenset(),
    ordinals=False,
)

# -- German ----------------------------------------------------------------------------
_DE_MONTHS = ("Januar Jänner Februar Feber März April Mai Juni Juli August September "
              "Oktober November Dezember Jan Feb Mär Mrz Apr Jun Jul Aug Sep Sept Okt Nov Dez")
_DE = Tables(
    titles=_f("hr hrn fr dipl ing mag"),
    connectors=_f("z.b d.h bzw ggf evtl u.a v.a inkl exkl zzgl bspw vgl sog u.u z.t ggü "
                  "bzgl insb gem mio mrd tsd"),
    numeric_prefixes=_f("nr nrn abs bd kap tab abb ziff hnr okt dez mär mrz"),
    abbreviations=_f("usw jh jhd std sek"),
    acronyms=frozenset(),
    letter_nouns=_f("typ klasse gruppe variante stufe kategorie ist war"),
    ordinal_leads=_f("am im vom zum zur beim der die das dem den des ein eine einem einen "
                     "einer eines jede jeder jedes jedem jeden sein seine seinem seinen "
                     "seiner ihr ihre ihrem ihren ihrer mein meine meinem meinen unser "
                     "unsere unserem unseren"),
    ordinal_words=frozenset((_DE_MONTHS + " Jahrhundert Jahrhunderts Jahrtausend Jh Jhd "
                             "Jahr Jahres Jahrestag Geburtstag Lebensjahr Weltkrieg Mal Platz "
                             "Rang Klasse Liga Bundesliga Runde Spieltag Stock Stockwerk Etage "
                             "Tag Tages Woche Monat Quartal Semester Auflage Kapitel Teil Band "
                             "Staffel Folge Sinfonie Symphonie Satz Akt Advent Halbzeit "
                             "Hälfte Minute Reich Republik FC Grad Person Versuch Schritt "
                             "Frage Preis Stufe Buch Sonntag").split()),
    weak_leads=frozenset(), words_after_weak=frozenset(),
    ordinals=True,
)

# -- French, Spanish, Italian --------------------------------------------------------------
_FR = Tables(
    titles=_f("mme mlle me ste"),
    connectors=_f("ex c.-à-d env av"),  # "p. ex. une", "env. 20 km", "44 av. J.-C."
    numeric_prefixes=_f("n t éd"),
    abbreviations=frozenset(),
    acronyms=frozenset(),
    letter_nouns=_f("vitamine type groupe classe est"),
    ordinal_leads=frozenset(), ordinal_words=frozenset(),
    weak_leads=frozenset(), words_after_weak=frozenset(), ordinals=False,
)
_ES = Tables(
    # "EE. UU.": the doubled letters mark a plural abbreviation; the first half never ends.
    titles=_f("sres dra lic ud uds vd vds dña avda ee ff rr cc"),
    connectors=_f("ej aprox"),
    numeric_prefixes=_f("pág pag págs núm num"),
    abbreviations=_f("uu aa hh oo cía"),
    acronyms=frozenset(),
    letter_nouns=_f("vitamina opción tipo grupo es"),
    ordinal_leads=frozenset(), ordinal_words=frozenset(),
    weak_leads=frozenset(), words_after_weak=frozenset(), ordinals=False,
)
_IT = Tables(
    titles=_f("sig sig.ra sig.na dott dott.ssa prof.ssa ing avv geom rag"),
    connectors=frozenset(),
    numeric_prefixes=_f("pag"),
    abbreviations=frozenset(),
    acronyms=frozenset(),
    letter_nouns=frozenset(),
    ordinal_leads=frozenset(), ordinal_words=frozenset(),
    weak_leads=frozenset(), words_after_weak=frozenset(), ordinals=False,
)

LANGUAGE_TABLES: dict[str, Tables] = {"en": _EN, "de": _DE, "fr": _FR, "es": _ES, "it": _IT}
# Ordinary words elsewhere ("I am 5.", "you may die 3..."): with language=None these
# German ordinal leads do not decide by themselves.
_LEADS_ONLY_WITH_DE = _f("am die den des ein sein")
# Also English words that start sentences ("... room 12. April is..."): with language=None
# they continue after a number only when a lead comes before it ("am 9. November").
_WORDS_ALSO_ENGLISH = _f("April August September November Band Person Minute Stock Tag")

# Words after which an English sentence cannot end (or almost never does): the endpoint
# waits longer after them, and the first-sentence cut never leaves a head ending in one.
CONTINUES = frozenset("""
a an the and or but nor so yet because since although though while if unless until when
whereas whether than that which who whom whose where to of in on at by for from with about
into onto over under between through during before after without within against among
like as is are was were be been being am do does did have has had will would can could
shall should may might must my your his her its our their this these those some any
every each no not very really more most less also just then um uh er erm many much
few several why how what which
""".split())

# After "a.m." / "p.m." these belong to the time: "3 p.m. EST on Friday".
TIME_ZONE_WORDS = _f("EST EDT CST CDT MST MDT PST PDT AKST HST ET CT MT PT GMT UTC BST IST "
                     "CET CEST EET WET JST KST AEST AEDT Eastern Central Mountain Pacific")
# After a dotted acronym ("U.S.") these belong to it: "the U.S. Army"; anything else
# capitalised starts a new sentence, as before ("in the U.S. The rest...").
ACRONYM_WORDS = _f("Army Navy Air Marine Marines Coast Congress Senate Senator Government "
                   "President Supreme Court Department Embassy Open Dollar Dollars Postal "
                   "Census Constitution Treasury Military Forces Border Secretary Ambassador "
                   "Attorney Federal National Capitol Mint Route Highway Interstate Olympic "
                   "Citizenship Immigration Customs Space Geological Patent Bureau Security "
                   "Council Commission Parliament Prime Minister Foreign Office Agency "
                   "Representative Representatives Soccer Team Economy Market "
                   "Markets Treasuries Election Elections Law Laws Citizens Cup Masters")
# "44 a. C." (antes de Cristo), "z. B." (zum Beispiel): a single lowercase letter whose
# second half follows after a space.
SPLIT_ABBREVIATION_WORDS: dict[str, frozenset[str]] = {
    "a": frozenset({"C"}), "d": frozenset({"C"}), "z": frozenset({"B"}),
}

ROMAN = re.compile(r"M{0,3}(?:CM|CD|D?C{0,3})(?:XC|XL|L?X{0,3})(?:IX|IV|V?I{0,3})")


@lru_cache(maxsize=32)
def tables(language: str | None) -> Tables:
    """The lists for one language (ISO 639-1, as Whisper reports it) on top of the
    English/international base, or every language's when ``language`` is None."""
    if language is None:
        parts = list(LANGUAGE_TABLES.values())
    else:
        parts = [_EN, LANGUAGE_TABLES.get(language.lower().split("-")[0], _EN)]

    def union(field: str) -> frozenset[str]:
        out: frozenset[str] = frozenset()
        for t in parts:
            out |= getattr(t, field)
        return out

    leads, words = union("ordinal_leads"), union("ordinal_words")
    weak: frozenset[str] = frozenset()
    after_weak: frozenset[str] = frozenset()
    if language is None:
        leads, weak = leads - _LEADS_ONLY_WITH_DE, leads & _LEADS_ONLY_WITH_DE
        words, after_weak = words - _WORDS_ALSO_ENGLISH, words
    return Tables(titles=union("titles"), connectors=union("connectors"),
                  numeric_prefixes=union("numeric_prefixes"),
                  abbreviations=union("abbreviations"), acronyms=union("acronyms"),
                  letter_nouns=union("letter_nouns"), ordinal_leads=leads,
                  ordinal_words=words, weak_leads=weak, words_after_weak=after_weak,
                  ordinals=any(t.ordinals for t in parts))


@lru_cache(maxsize=64)
def prefixes(words: frozenset[str]) -> frozenset[str]:
    """Every proper prefix of the words: while the word that follows a waiting end is one
    of these, it may still become a word that continues the sentence."""
    return frozenset(w[:k] for w in words for k in range(1, len(w)))
