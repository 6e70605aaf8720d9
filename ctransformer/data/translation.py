"""A synthetic Chinese -> English parallel corpus generated from a small grammar.

Every pair is produced by one derivation of a hand-written grammar, so the
translation is a *function* of the Chinese sentence (several Chinese
sentences may share one English translation, e.g. 他们/她们 -> "they", never
the other way round).  The grammar is combinatorial (millions of distinct
sentences), so exact match on held-out sentences measures generalisation,
not memorisation.  What a model has to learn:

* numbers 1-999:        三百二十五 -> three hundred twenty - five
* dates:                今天是2024年3月5日。 -> today is march 5 , 2024 .
* reordering:           他在公园里吃苹果。 -> he eats apples in the park .
                        他昨天在家吃了鱼。 -> he ate fish at home yesterday .
* subject-verb agreement (I am / he is / they are, eats / eat, has / have,
  does / do, was / were)
* tense and aspect:     了 -> past, 会 -> future (will), 正在 -> progressive,
                        不 / 没 / 不会 -> negation with do-support
* plurals with counts:  三只猫 -> three cats, 两个孩子 -> two children
* attributive and predicative adjectives, a / an: 一个旧杯子 -> an old cup
* locations:            在公园里 -> in the park, 在桌子上 -> on the table
* yes/no questions:     ...吗？ -> subject-auxiliary inversion, "?"

Token conventions: the Chinese side is a plain string tokenised per character
(:func:`zh_tokens`); the English side is lower-case tokens joined by single
spaces, punctuation (``. , ? -``) split off (:func:`en_tokens` is
``str.split``).  Sentences are at most ``max_len`` tokens on each side
(default 14; on average 9.4 characters and 6.7 words).  Vocabulary: about
310 English tokens (a third of them numbers: days 1-31, years 1995-2024)
and 180 Chinese characters (ASCII digits included).

Generation uses :class:`random.Random` seeded with ``seed`` only, so a corpus
is identical on every platform and NumPy version.
"""
from __future__ import annotations

import calendar
import random
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

Pair = Tuple[str, str]

# ---------------------------------------------------------------- numbers --
_ZH_DIGITS = "零一二三四五六七八九"
_EN_ONES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
            "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
            "nineteen"]
_EN_TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]


def zh_number(n: int, counted: bool = False) -> str:
    """Chinese numeral for 1 <= n <= 999.

    ``counted=True`` is the form used before a classifier: a leading 2 is
    两 (两只猫, 两百本书) instead of 二.  Examples: 10 十, 15 十五, 110 一百一十,
    105 一百零五, 325 三百二十五.
    """
    if not 1 <= n <= 999:
        raise ValueError(f"zh_number: n must be in [1, 999], got {n}")
    hundreds, rest = divmod(n, 100)
    tens, units = divmod(rest, 10)
    two = "两" if counted else "二"
    if hundreds == 0:
        if tens == 0:
            return two if units == 2 else _ZH_DIGITS[units]
        head = "" if tens == 1 else _ZH_DIGITS[tens]          # 十五, not 一十五
        return head + "十" + (_ZH_DIGITS[units] if units else "")
    out = (two if hundreds == 2 else _ZH_DIGITS[hundreds]) + "百"
    if rest == 0:
        return out
    if tens == 0:
        return out + "零" + _ZH_DIGITS[units]                 # 一百零五
    return out + _ZH_DIGITS[tens] + "十" + (_ZH_DIGITS[units] if units else "")  # 一百一十


def en_number(n: int) -> List[str]:
    """English tokens for 1 <= n <= 999 (American style, no "and"; the
    hyphen of twenty-five is its own token): 325 -> three hundred twenty - five."""
    if not 1 <= n <= 999:
        raise ValueError(f"en_number: n must be in [1, 999], got {n}")
    hundreds, rest = divmod(n, 100)
    out = [_EN_ONES[hundreds], "hundred"] if hundreds else []
    if rest == 0:
        return out
    if rest < 20:
        return out + [_EN_ONES[rest]]
    tens, units = divmod(rest, 10)
    return out + [_EN_TENS[tens]] + (["-", _EN_ONES[units]] if units else [])


# ---------------------------------------------------------------- lexicon --
class _Noun:
    """A noun: Chinese, English singular/plural, classifier, semantic kind
    (person / animal / thing / food / mass) and the attributive adjectives
    (keys of _ADJ) that fit it."""

    def __init__(self, zh: str, sg: str, pl: str, cl: str, kind: str, adjs: str = ""):
        self.zh, self.sg, self.pl, self.cl, self.kind = zh, sg, pl, cl, kind
        self.adjs = adjs.split()


def _n(zh, sg, cl, kind, adjs="", pl=None):
    return _Noun(zh, sg, pl or sg + "s", cl, kind, adjs)


_ADJ = {"大": "big", "小": "small", "新": "new", "旧": "old", "红": "red", "黑": "black", "白": "white"}

_NOUNS = [
    _n("老师", "teacher", "个", "person", "新"), _n("学生", "student", "个", "person", "新"),
    _n("医生", "doctor", "个", "person", "新"), _n("孩子", "child", "个", "person", pl="children"),
    _n("男人", "man", "个", "person", pl="men"), _n("女人", "woman", "个", "person", pl="women"),
    _n("农民", "farmer", "个", "person"), _n("工人", "worker", "个", "person"),
    _n("朋友", "friend", "个", "person", "新"),
    _n("猫", "cat", "只", "animal", "大 小 黑 白"), _n("狗", "dog", "只", "animal", "大 小 黑 白"),
    _n("鸟", "bird", "只", "animal", "小 黑 白"), _n("马", "horse", "匹", "animal", "大 小 黑 白"),
    _n("兔子", "rabbit", "只", "animal", "大 小 黑 白"),
    _n("苹果", "apple", "个", "food", "大 小 红"), _n("鸡蛋", "egg", "个", "food", "大 小"),
    _n("蛋糕", "cake", "个", "food", "大 小"),
    _n("书", "book", "本", "thing", "大 小 新 旧 红"), _n("信", "letter", "封", "thing", "新 旧"),
    _n("报纸", "newspaper", "份", "thing", "新 旧"), _n("诗", "poem", "首", "thing", "新"),
    _n("花", "flower", "朵", "thing", "大 小 红 白"),
    _n("车", "car", "辆", "thing", "大 小 新 旧 红 黑 白"), _n("球", "ball", "个", "thing", "大 小 新 旧 红 白"),
    _n("杯子", "cup", "个", "thing", "大 小 新 旧 红 黑 白"), _n("碗", "bowl", "个", "thing", "大 小 新 旧 白"),
    _n("椅子", "chair", "把", "thing", "大 小 新 旧 黑"), _n("桌子", "table", "张", "thing", "大 小 新 旧"),
    _n("电影", "movie", "部", "thing", "新 旧"),
]
_MASS = {zh: en for zh, en in [("鱼", "fish"), ("米饭", "rice"), ("面包", "bread"), ("水", "water"),
                               ("茶", "tea"), ("牛奶", "milk"), ("咖啡", "coffee"), ("果汁", "juice"),
                               ("电视", "tv"), ("衣服", "clothes")]}
_BY_ZH = {noun.zh: noun for noun in _NOUNS}

# pronoun subjects: zh, en, agreement class ("1s" = I, "3s" = he/she/it,
# "pl" = you/we/they and plural nouns)
_PRONOUNS = [("我", "i", "1s"), ("你", "you", "pl"), ("他", "he", "3s"), ("她", "she", "3s"),
             ("我们", "we", "pl"), ("你们", "you", "pl"), ("他们", "they", "pl"), ("她们", "they", "pl")]
_POSSESSIVES = [("我的", "my"), ("你的", "your"), ("他的", "his"), ("她的", "her"), ("我们的", "our"),
                ("你们的", "your"), ("他们的", "their")]

# transitive verbs: zh, base, 3sg, past, -ing, subject kinds, objects (zh of nouns / mass nouns)
_FOOD = "鱼 米饭 面包 苹果 鸡蛋 蛋糕"
_GOODS = "苹果 鸡蛋 蛋糕 书 花 车 球 杯子 碗 椅子 桌子 面包 牛奶 鱼 茶 咖啡 果汁"
_ANIMALS = "猫 狗 鸟 马 兔子"
_TRANSITIVE = [
    ("吃", "eat", "eats", "ate", "eating", "person animal", _FOOD),
    ("喝", "drink", "drinks", "drank", "drinking", "person animal", "水 牛奶 茶 咖啡 果汁"),
    ("读", "read", "reads", "read", "reading", "person", "书 信 报纸 诗"),
    ("写", "write", "writes", "wrote", "writing", "person", "信 诗 书"),
    ("买", "buy", "buys", "bought", "buying", "person", _GOODS),
    ("卖", "sell", "sells", "sold", "selling", "person", _GOODS),
    ("洗", "wash", "washes", "washed", "washing", "person", "车 杯子 碗 苹果 衣服"),
    ("做", "make", "makes", "made", "making", "person", "蛋糕 面包 咖啡 茶 桌子 椅子"),
    ("看", "watch", "watches", "watched", "watching", "person", "电视 电影"),
    ("追", "chase", "chases", "chased", "chasing", "person animal", _ANIMALS),
    ("画", "draw", "draws", "drew", "drawing", "person", "猫 狗 鸟 马 花 车"),
    ("踢", "kick", "kicks", "kicked", "kicking", "person", "球"),
]
# intransitive (verb-object compounds in Chinese): zh, base, 3sg, past, -ing, subject kinds
_INTRANSITIVE = [
    ("跑步", "run", "runs", "ran", "running", "person animal"),
    ("睡觉", "sleep", "sleeps", "slept", "sleeping", "person animal"),
    ("游泳", "swim", "swims", "swam", "swimming", "person animal"),
    ("唱歌", "sing", "sings", "sang", "singing", "person bird"),
    ("跳舞", "dance", "dances", "danced", "dancing", "person"),
]
# places: Chinese after 在, English phrase
_PLACES = [("公园里", "in the park"), ("花园里", "in the garden"), ("房间里", "in the room"),
           ("厨房里", "in the kitchen"), ("图书馆里", "in the library"), ("商店里", "in the shop"),
           ("车里", "in the car"), ("学校", "at school"), ("家", "at home"), ("桌子上", "on the table"),
           ("床上", "on the bed"), ("椅子上", "on the chair"), ("桌子下", "under the table"),
           ("床下", "under the bed"), ("河边", "by the river"), ("门口", "at the door"),
           ("树上", "in the tree")]
# predicative adjectives by the subject's kind
_PRED_ADJ = {
    "person": [("高兴", "happy"), ("累", "tired"), ("忙", "busy"), ("饿", "hungry"), ("渴", "thirsty"),
               ("高", "tall"), ("矮", "short")],
    "animal": [("饿", "hungry"), ("累", "tired"), ("渴", "thirsty"), ("大", "big"), ("小", "small")],
    "thing": [("大", "big"), ("小", "small"), ("新", "new"), ("旧", "old"), ("贵", "expensive"),
              ("便宜", "cheap")],
    "food": [("大", "big"), ("小", "small"), ("好吃", "delicious"), ("贵", "expensive"),
             ("便宜", "cheap")],
}
_MONTHS = ["january", "february", "march", "april", "may", "june", "july", "august", "september",
           "october", "november", "december"]
YEARS = range(1995, 2025)


# ------------------------------------------------------------ noun phrases --
class _NP:
    """A generated noun phrase: Chinese text, English tokens, agreement class."""

    def __init__(self, zh: str, en: List[str], agr: str, kind: str):
        self.zh, self.en, self.agr, self.kind = zh, en, agr, kind


def _article(word: str) -> str:
    return "an" if word[0] in "aeio" else "a"


def _counted_np(rng: random.Random, noun: _Noun, count: int, adj: Optional[str]) -> _NP:
    """一只猫 -> a cat, 三只大猫 -> three big cats."""
    adj_zh, adj_en = (adj, [_ADJ[adj]]) if adj else ("", [])
    zh = zh_number(count, counted=True) + noun.cl + adj_zh + noun.zh
    if count == 1:
        head = adj_en + [noun.sg]
        return _NP(zh, [_article(head[0])] + head, "3s", noun.kind)
    return _NP(zh, en_number(count) + adj_en + [noun.pl], "pl", noun.kind)


def _noun_phrase(rng: random.Random, noun: _Noun, role: str, max_count: int = 10) -> _NP:
    """A random determiner structure around ``noun``.  A bare subject is
    definite singular (猫 -> the cat); a bare object is a generic plural
    (吃苹果 -> eat apples)."""
    adj = rng.choice(noun.adjs) if noun.adjs and rng.random() < 0.3 else None
    adj_zh, adj_en = (adj, [_ADJ[adj]]) if adj else ("", [])
    form = rng.choices(["bare", "count", "this", "these", "poss"], [3, 3, 2, 1, 1])[0]
    if form == "bare":
        if role == "subject":
            return _NP(adj_zh + noun.zh, ["the"] + adj_en + [noun.sg], "3s", noun.kind)
        return _NP(adj_zh + noun.zh, adj_en + [noun.pl], "pl", noun.kind)
    if form == "count":
        return _counted_np(rng, noun, rng.choice([1, 1] + list(range(2, max_count + 1))), adj)
    near = rng.random() < 0.5
    if form == "this":
        det_zh, det_en = ("这", "this") if near else ("那", "that")
        return _NP(det_zh + noun.cl + adj_zh + noun.zh, [det_en] + adj_en + [noun.sg], "3s", noun.kind)
    if form == "these":
        det_zh, det_en = ("这些", "these") if near else ("那些", "those")
        return _NP(det_zh + adj_zh + noun.zh, [det_en] + adj_en + [noun.pl], "pl", noun.kind)
    poss_zh, poss_en = rng.choice(_POSSESSIVES)
    return _NP(poss_zh + adj_zh + noun.zh, [poss_en] + adj_en + [noun.sg], "3s", noun.kind)


def _subject(rng: random.Random, kinds: Sequence[str], pronoun_p: float = 0.4) -> _NP:
    """A subject whose kind is in ``kinds``; pronouns count as persons."""
    if "person" in kinds and rng.random() < pronoun_p:
        zh, en, agr = rng.choice(_PRONOUNS)
        return _NP(zh, [en], agr, "person")
    nouns = [n for n in _NOUNS if n.kind in kinds or (n.zh == "鸟" and "bird" in kinds)]
    return _noun_phrase(rng, rng.choice(nouns), "subject")


def _object(rng: random.Random, zh: str) -> _NP:
    if zh in _MASS:
        return _NP(zh, [_MASS[zh]], "3s", "mass")
    return _noun_phrase(rng, _BY_ZH[zh], "object")


# --------------------------------------------------------- English helpers --
def _be(agr: str, past: bool) -> str:
    if past:
        return "were" if agr == "pl" else "was"
    return {"1s": "am", "3s": "is", "pl": "are"}[agr]


def _do(agr: str) -> str:
    return "does" if agr == "3s" else "do"


# ------------------------------------------------------------ sentence types --
_TIMES = {"present": [("每天", "every day")], "progressive": [("现在", "now")],
          "past": [("昨天", "yesterday"), ("今天", "today")], "future": [("明天", "tomorrow"), ("今天", "today")]}


def _place_time(rng: random.Random, tense: str, loc_p: float = 0.35, time_p: float = 0.35):
    place = rng.choice(_PLACES) if rng.random() < loc_p else None
    time = rng.choice(_TIMES[tense]) if rng.random() < time_p else None
    return place, time


def _with_time(subject_zh: str, rest_zh: str, time, rng: random.Random) -> str:
    """Put a Chinese time word before or after the subject."""
    if time is None:
        return subject_zh + rest_zh
    if rng.random() < 0.3:
        return time[0] + subject_zh + rest_zh
    return subject_zh + time[0] + rest_zh


def _action(rng: random.Random) -> Pair:
    """他在公园里吃苹果。 -> he eats apples in the park ."""
    transitive = rng.random() < 0.75
    if transitive:
        vzh, base, s3, past, ing, kinds, objects = rng.choice(_TRANSITIVE)
        obj = _object(rng, rng.choice(objects.split()))
    else:
        vzh, base, s3, past, ing, kinds = rng.choice(_INTRANSITIVE)
        obj = None
    subj = _subject(rng, kinds.split())
    tense = rng.choice(["present", "progressive", "past", "future"])
    question = rng.random() < 0.2
    neg = tense != "progressive" and not question and rng.random() < 0.2
    place, time = _place_time(rng, tense)
    loc_zh = "在" + place[0] if place else ""
    obj_zh, obj_en = (obj.zh, obj.en) if obj else ("", [])

    # Chinese: S [T] [neg/aspect] [在 place] V [了] O
    if tense == "present":
        core = ("不" if neg else "") + loc_zh + vzh + obj_zh
    elif tense == "progressive":
        core = "正在" + (place[0] if place else "") + vzh + obj_zh   # 正在 absorbs the locative 在
    elif tense == "past":
        if neg:
            core = "没" + loc_zh + vzh + obj_zh
        else:
            core = loc_zh + vzh + ("了" + obj_zh if obj else "了")   # 吃了苹果 / 游泳了
    else:
        core = ("不会" if neg else "会") + loc_zh + vzh + obj_zh
    zh = _with_time(subj.zh, core, time, rng) + ("吗？" if question else "。")

    # English: agreement, do-support, inversion; place and time at the end
    verb_form = {"present": s3 if subj.agr == "3s" else base, "progressive": ing, "past": past,
                 "future": base}[tense]
    if question:
        aux = {"present": _do(subj.agr), "progressive": _be(subj.agr, False), "past": "did",
               "future": "will"}[tense]
        verb = base if tense != "progressive" else ing
        en = [aux] + subj.en + [verb]
    elif neg:
        aux = {"present": _do(subj.agr), "past": "did", "future": "will"}[tense]
        en = subj.en + [aux, "not", base]
    elif tense == "progressive":
        en = subj.en + [_be(subj.agr, False), ing]
    elif tense == "future":
        en = subj.en + ["will", base]
    else:
        en = subj.en + [verb_form]
    en += obj_en + (place[1].split() if place else []) + (time[1].split() if time else [])
    return zh, " ".join(en + ["?" if question else "."])


def _be_location(rng: random.Random) -> Pair:
    """猫在桌子上。 -> the cat is on the table ."""
    subj = _subject(rng, ["person", "animal", "thing", "food"])
    place = rng.choice(_PLACES)
    tense = rng.choice(["present", "present", "past", "future"])
    question = rng.random() < 0.2
    neg = not question and rng.random() < 0.2
    time = None
    if tense == "past":
        time = ("昨天", "yesterday")
    elif tense == "future" and rng.random() < 0.5:
        time = ("明天", "tomorrow")
    marker = {"present": "不" if neg else "", "past": "不" if neg else "",
              "future": "不会" if neg else "会"}[tense]
    zh = _with_time(subj.zh, marker + "在" + place[0], time, rng) + ("吗？" if question else "。")
    be = ["will", "be"] if tense == "future" else [_be(subj.agr, tense == "past")]
    if question:
        en = be[:1] + subj.en + be[1:]
    else:
        en = subj.en + (be[:1] + ["not"] + be[1:] if neg else be)
    en += place[1].split() + ([time[1]] if time else [])
    return zh, " ".join(en + ["?" if question else "."])


def _predicate_adjective(rng: random.Random) -> Pair:
    """这本书很旧。 -> this book is old .  她昨天很累吗？ -> was she tired yesterday ?"""
    subj = _subject(rng, ["person", "animal", "thing", "food"])
    adj_zh, adj_en = rng.choice(_PRED_ADJ[subj.kind])
    tense = rng.choice(["present", "present", "past", "future"])
    question = rng.random() < 0.2
    neg = not question and rng.random() < 0.2
    time = None
    if tense == "past":
        time = ("昨天", "yesterday")
    elif tense == "future" and rng.random() < 0.5:
        time = ("明天", "tomorrow")
    if tense == "future":
        marker = "不会" if neg else "会很"
    else:
        marker = "不" if neg else "很"
    zh = _with_time(subj.zh, marker + adj_zh, time, rng) + ("吗？" if question else "。")
    be = ["will", "be"] if tense == "future" else [_be(subj.agr, tense == "past")]
    if question:
        en = be[:1] + subj.en + be[1:]
    else:
        en = subj.en + (be[:1] + ["not"] + be[1:] if neg else be)
    en += [adj_en] + ([time[1]] if time else [])
    return zh, " ".join(en + ["?" if question else "."])


def _have(rng: random.Random) -> Pair:
    """他有三百二十五本书。 -> he has three hundred twenty - five books ."""
    subj = _subject(rng, ["person"], pronoun_p=0.6)
    noun = rng.choice([n for n in _NOUNS if n.kind != "person" or n.zh in ("孩子", "朋友", "学生")])
    count = rng.choice([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, rng.randint(11, 99), rng.randint(100, 999)])
    adj = rng.choice(noun.adjs) if noun.adjs and rng.random() < 0.25 else None
    obj = _counted_np(rng, noun, count, adj)
    question = rng.random() < 0.2
    zh = subj.zh + "有" + obj.zh + ("吗？" if question else "。")
    if question:
        en = [_do(subj.agr)] + subj.en + ["have"] + obj.en + ["?"]
    else:
        en = subj.en + ["has" if subj.agr == "3s" else "have"] + obj.en + ["."]
    return zh, " ".join(en)


def _random_date(rng: random.Random) -> Tuple[int, int, int]:
    year, month = rng.choice(YEARS), rng.randint(1, 12)
    return year, month, rng.randint(1, calendar.monthrange(year, month)[1])


def _date(year: Optional[int], month: int, day: Optional[int]) -> Tuple[str, List[str]]:
    """(2024, 3, 5) -> ("2024年3月5日", [march, 5, ",", 2024]); year or day may be None."""
    zh = (f"{year}年" if year else "") + f"{month}月" + (f"{day}日" if day else "")
    en = [_MONTHS[month - 1]] + ([str(day)] if day else [])
    if year:
        en += ([","] if day else []) + [str(year)]
    return zh, en


def _day_is(rng: random.Random) -> Pair:
    """今天是2024年3月5日。 -> today is march 5 , 2024 ."""
    (day_zh, day_en, be) = rng.choice([("今天", "today", "is"), ("明天", "tomorrow", "is"),
                                       ("昨天", "yesterday", "was")])
    year, month, day = _random_date(rng)
    date_zh, date_en = _date(year if rng.random() < 0.6 else None, month, day)
    if rng.random() < 0.2:
        return day_zh + "是" + date_zh + "吗？", " ".join([be, day_en] + date_en + ["?"])
    return day_zh + "是" + date_zh + "。", " ".join([day_en, be] + date_en + ["."])


def _birthday(rng: random.Random) -> Pair:
    """我的生日是3月5日。 -> my birthday is march 5 ."""
    poss_zh, poss_en = rng.choice(_POSSESSIVES)
    year, month, day = _random_date(rng)
    date_zh, date_en = _date(year if rng.random() < 0.3 else None, month, day)
    if rng.random() < 0.2:
        return poss_zh + "生日是" + date_zh + "吗？", " ".join(["is", poss_en, "birthday"] + date_en + ["?"])
    return poss_zh + "生日是" + date_zh + "。", " ".join([poss_en, "birthday", "is"] + date_en + ["."])


def _born(rng: random.Random) -> Pair:
    """他出生于1990年3月5日。 -> he was born on march 5 , 1990 ."""
    subj = _subject(rng, ["person"], pronoun_p=0.6)
    year, month, day = _random_date(rng)
    form = rng.choice(["ymd", "ymd", "ym", "y"])
    if form == "y":
        date_zh, date_en = f"{year}年", ["in", str(year)]
    else:
        date_zh, date_en = _date(year, month, day if form == "ymd" else None)
        date_en = ["on" if form == "ymd" else "in"] + date_en
    was = _be(subj.agr, past=True)
    if rng.random() < 0.2:
        return subj.zh + "出生于" + date_zh + "吗？", " ".join([was] + subj.en + ["born"] + date_en + ["?"])
    return subj.zh + "出生于" + date_zh + "。", " ".join(subj.en + [was, "born"] + date_en + ["."])


def _number(rng: random.Random) -> Pair:
    """三百二十五 -> three hundred twenty - five (no punctuation)."""
    n = rng.choice([rng.randint(1, 99), rng.randint(100, 999), rng.randint(100, 999)])
    return zh_number(n), " ".join(en_number(n))


_KINDS: List[Tuple[str, Callable[[random.Random], Pair], float]] = [
    ("action", _action, 0.42), ("be_location", _be_location, 0.12),
    ("predicate_adjective", _predicate_adjective, 0.12), ("have", _have, 0.10),
    ("day_is", _day_is, 0.07), ("birthday", _birthday, 0.05), ("born", _born, 0.05),
    ("number", _number, 0.07),
]
SENTENCE_KINDS = tuple(name for name, _, _ in _KINDS)


# ---------------------------------------------------------------- public API --
def zh_tokens(zh: str) -> List[str]:
    """Chinese side tokens: one per character."""
    return list(zh)


def en_tokens(en: str) -> List[str]:
    """English side tokens (the corpus already separates them by spaces)."""
    return en.split()


#: Default share of each sentence kind.
KIND_WEIGHTS: Dict[str, float] = {name: weight for name, _, weight in _KINDS}


def _check_weights(weights: Mapping[str, float], where: str) -> List[float]:
    unknown = set(weights) - set(SENTENCE_KINDS)
    if unknown:
        raise ValueError(f"{where}: weights keys must be in {SENTENCE_KINDS}, got {sorted(unknown)}")
    values = [float(weights.get(name, 0.0)) for name in SENTENCE_KINDS]
    if any(not v >= 0 for v in values) or sum(values) <= 0:
        raise ValueError(f"{where}: weights must be non-negative with a positive sum, got {dict(weights)}")
    return values


def sample_pair(rng: random.Random, kind: Optional[str] = None,
                weights: Optional[Mapping[str, float]] = None) -> Pair:
    """One (zh, en) pair drawn from the grammar: of sentence ``kind`` (one of
    :data:`SENTENCE_KINDS`) if given, else of a kind drawn with ``weights``
    (kind -> relative weight, missing kinds get 0; default
    :data:`KIND_WEIGHTS`)."""
    if kind is None:
        values = [w for _, _, w in _KINDS] if weights is None else _check_weights(weights, "sample_pair")
        _, make, _ = rng.choices(_KINDS, values)[0]
    else:
        table = {name: make for name, make, _ in _KINDS}
        if kind not in table:
            raise ValueError(f"sample_pair: kind must be one of {SENTENCE_KINDS}, got {kind!r}")
        make = table[kind]
    return make(rng)


def make_translation_corpus(n_train: int = 20000, n_valid: int = 1000, n_test: int = 1000, seed: int = 0,
                            max_len: int = 14, weights: Optional[Mapping[str, float]] = None
                            ) -> Dict[str, List[Pair]]:
    """Synthetic zh -> en corpus: {"train", "valid", "test"} -> list of (zh, en).

    Pairs are drawn from the grammar (see the module docstring) with
    ``random.Random(seed)``; pairs with more than ``max_len`` tokens on either
    side (characters for Chinese, :func:`en_tokens` for English) are redrawn,
    and so is every Chinese sentence already drawn, so all sentences are
    distinct and the splits are disjoint (no Chinese sentence of valid/test
    occurs in train, nor in the other held-out split).  The test split is drawn
    first, then valid, then train: for a fixed seed, test and valid do not
    depend on ``n_train``.  Same seed -> identical corpus.

    ``weights`` (kind -> relative weight, see :data:`KIND_WEIGHTS`) changes
    the mix of sentence kinds, e.g. ``{"number": 1}`` for numbers only.  In a
    probe with torch (d_model 128, 2+2 layers, batch 64, Adam 1e-3, 20000
    training pairs) held-out exact match reached 0.59 / 0.79 / 0.91 after
    2 / 4 / 8 epochs; most remaining errors were in dates (digits -> tokens).
    """
    for name, value in (("n_train", n_train), ("n_valid", n_valid), ("n_test", n_test), ("max_len", max_len)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"make_translation_corpus: {name} must be a non-negative int, got {value!r}")
    if weights is not None:
        _check_weights(weights, "make_translation_corpus")
    rng = random.Random(seed)
    seen = set()
    out: Dict[str, List[Pair]] = {}
    for split, size in (("test", n_test), ("valid", n_valid), ("train", n_train)):
        pairs: List[Pair] = []
        attempts = 0
        while len(pairs) < size:
            attempts += 1
            if attempts > 50 * size + 1000:
                raise ValueError(f"make_translation_corpus: could not draw {size} distinct {split} sentences "
                                 f"of at most {max_len} tokens (got {len(pairs)})")
            zh, en = sample_pair(rng, weights=weights)
            if zh in seen or len(zh) > max_len or len(en.split()) > max_len:
                continue
            seen.add(zh)
            pairs.append((zh, en))
        out[split] = pairs
    return {"train": out["train"], "valid": out["valid"], "test": out["test"]}
