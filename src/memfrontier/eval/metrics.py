"""Answer metrics: LoCoMo token F1 / EM, evidence recall, judge-label parsing, aggregation.

Token F1 and EM reproduce the official LoCoMo scorer (snap-research/locomo,
``task_eval/evaluation.py``: ``normalize_answer``, ``f1_score``, ``f1``, ``exact_match_score``
and the per-category rules of ``eval_question_answering``). Written from its behaviour, not copied.
That scorer reads ASCII: an answer in Chinese is one word, ``"Tokyo。"`` is not ``"Tokyo"`` and a
curly quote or a dash is a word. It is the default (``scorer="locomo"``), so published numbers keep
their meaning; ``scorer="unicode"`` (:data:`SCORERS`) reads any script, and equals it on ASCII text.
QPC is MemoryCPT Eq. 6 via :func:`memfrontier.core.cost.qpc`.
"""

from __future__ import annotations

import json
import math
import re
import string
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence
from functools import lru_cache
from typing import Literal

import regex

from ..core.cost import qpc

_PUNCT = frozenset(string.punctuation)
_ARTICLES_RE = re.compile(r"\b(a|an|the|and)\b")
_CJK_RE = regex.compile(r"([\p{Han}\p{Hiragana}\p{Katakana}\p{Hangul}])")

#: How an answer is read into words before F1 and EM (:func:`normalize_answer`): ``locomo``, the
#: official LoCoMo scorer (ASCII; the default, and every published number's), or ``unicode``.
Scorer = Literal["locomo", "unicode"]
SCORERS: tuple[Scorer, ...] = ("locomo", "unicode")
DEFAULT_SCORER: Scorer = "locomo"
ABSTENTION_PHRASES = ("no information available", "not mentioned")


def _stemmer():
    from ..core.stemming import porter_stemmer

    return porter_stemmer()


@lru_cache(maxsize=65536)
def _stem(word: str) -> str:
    return _stemmer().stem(word)


def _form(text: object, scorer: Scorer) -> str:
    """``text`` as ``scorer`` reads it before splitting it into parts or words: NFKC for ``unicode``
    (a fullwidth ``，`` or ``；`` is then ``,`` or ``;``), as written for ``locomo``."""
    return unicodedata.normalize("NFKC", str(text)) if scorer == "unicode" else str(text)


def normalize_answer(text: object, scorer: Scorer = DEFAULT_SCORER) -> str:
    """An answer as space-separated words.

    ``locomo`` (the official normalisation): drop ",", lowercase, drop ``string.punctuation``, drop
    a/an/the/and, squeeze spaces. ``unicode``: NFKC and casefold, drop every punctuation character
    (Unicode P*, and ``string.punctuation`` as above), drop a/an/the/and, then each Han, Hiragana,
    Katakana or Hangul character is a word of its own. On ASCII text both give the same words.

    >>> normalize_answer("她住在东京。", "unicode"), normalize_answer("“Tokyo” — she said", "unicode")
    ('她 住 在 东 京', 'tokyo she said')
    """
    s = _form(text, scorer)
    if scorer == "unicode":
        s = s.casefold()
        s = "".join(ch for ch in s if ch not in _PUNCT and unicodedata.category(ch)[0] != "P")
        s = _CJK_RE.sub(r" \1 ", s)
    elif scorer == "locomo":
        s = "".join(ch for ch in s.replace(",", "").lower() if ch not in _PUNCT)
    else:
        raise ValueError(f"unknown scorer {scorer!r}; choose {' or '.join(SCORERS)}")
    s = _ARTICLES_RE.sub(" ", s)
    return " ".join(s.split())


def _tokens(text: object, scorer: Scorer) -> list[str]:
    return [_stem(w) for w in normalize_answer(text, scorer).split()]


def token_f1(prediction: str | None, gold: str | None, scorer: Scorer = DEFAULT_SCORER) -> float:
    """Bag-of-Porter-stemmed-words F1 in [0, 1] (LoCoMo ``f1_score``), words read by ``scorer``
    (:func:`normalize_answer`); 0.0 with no overlap or empty input."""
    if not prediction or gold is None:
        return 0.0
    pred = _tokens(prediction, scorer)
    ref = _tokens(gold, scorer)
    same = sum((Counter(pred) & Counter(ref)).values())
    if same == 0:
        return 0.0
    precision = same / len(pred)
    recall = same / len(ref)
    return 2 * precision * recall / (precision + recall)


def multi_answer_f1(prediction: str | None, gold: str, scorer: Scorer = DEFAULT_SCORER) -> float:
    """LoCoMo category-1 F1: split both on ","; mean over gold parts of the max F1 over prediction parts."""
    if not prediction:
        return 0.0
    preds = [p.strip() for p in _form(prediction, scorer).split(",")]
    golds = [g.strip() for g in _form(gold, scorer).split(",")]
    return sum(max(token_f1(p, g, scorer) for p in preds) for g in golds) / len(golds)


def abstention_score(prediction: str | None) -> float:
    """LoCoMo category-5 score: 1.0 if the prediction says "no information available" or "not mentioned"."""
    low = (prediction or "").lower()
    return 1.0 if any(p in low for p in ABSTENTION_PHRASES) else 0.0


def locomo_f1(prediction: str | None, gold: str | None, category: str | int, scorer: Scorer = DEFAULT_SCORER) -> float:
    """Score one LoCoMo answer in [0, 1] as the official evaluator does, by category, its words
    read by ``scorer`` (:func:`normalize_answer`).

    1: :func:`multi_answer_f1`; 2, 4: :func:`token_f1`; 3: token F1 against the gold cut before its
    first ";"; 5: :func:`abstention_score` (gold ignored). Empty prediction -> 0.0.
    Raises ValueError for another category.
    """
    cat = str(category).strip()
    if cat == "5":
        return abstention_score(prediction)
    if cat not in ("1", "2", "3", "4"):
        raise ValueError(f"unknown LoCoMo category {category!r}")
    if not prediction or gold is None:
        return 0.0
    gold = str(gold)
    if cat == "1":
        return multi_answer_f1(prediction, gold, scorer)
    if cat == "3":
        gold = _form(gold, scorer).split(";")[0].strip()
    return token_f1(prediction, gold, scorer)


def exact_match(prediction: str | None, gold: str | None, scorer: Scorer = DEFAULT_SCORER) -> bool:
    """LoCoMo ``exact_match_score``: the sets of normalised (unstemmed) words, read by ``scorer``, are equal."""
    if prediction is None or gold is None:
        return False
    return set(normalize_answer(prediction, scorer).split()) == set(normalize_answer(gold, scorer).split())


def evidence_recall(gold_ids: Iterable[str], context_ids: Iterable[str]) -> float | None:
    """Fraction of distinct gold evidence ids present in ``context_ids``; None with no gold evidence."""
    gold = list(dict.fromkeys(gold_ids))
    if not gold:
        return None
    ctx = set(context_ids)
    return sum(1 for g in gold if g in ctx) / len(gold)


# --- judge label ---------------------------------------------------------------------------

JudgeLabel = Literal["CORRECT", "WRONG"]
_NEG_CORRECT_RE = re.compile(
    r"\b(?:not|never|isn't|isnt|is\s+not|wasn't)\s+(?:(?:entirely|fully|quite|completely|totally|really|exactly|"
    r"strictly|actually)\s+)?correct\b",
    re.IGNORECASE,
)
_CORRECT_RE = re.compile(r"(?<![\w-])correct(?![\w-])", re.IGNORECASE)
_WRONG_RE = re.compile(r"(?<![\w-])(?:wrong|incorrect)(?![\w-])", re.IGNORECASE)


def _label_value(value: object) -> JudgeLabel | None:
    if not isinstance(value, str):
        return None
    v = " ".join(value.strip().strip("\"'.!*` ").upper().split())
    if v == "CORRECT":
        return "CORRECT"
    if v in ("WRONG", "INCORRECT", "NOT CORRECT"):
        return "WRONG"
    return None


def _json_objects(text: str) -> list[str]:
    """Top-level ``{...}`` spans of ``text`` (quote-aware); an unclosed last one runs to the end."""
    spans: list[str] = []
    depth, begin, in_str, esc, quote = 0, -1, False, False, ""
    for i, ch in enumerate(text):
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == quote:
                in_str = False
        elif ch in "\"'" and depth > 0:
            in_str, quote = True, ch
        elif ch == "{":
            if depth == 0:
                begin = i
            depth += 1
        elif ch == "}" and depth > 0:
            depth -= 1
            if depth == 0:
                spans.append(text[begin : i + 1])
    if depth > 0:
        spans.append(text[begin:])
    return spans


def _json_labels(text: str) -> list[object] | None:
    """Values of every ``label`` key in the JSON object(s) in ``text``; None if no object has one."""
    values: list[object] = []
    for span in _json_objects(text):
        try:
            import json_repair

            obj = json_repair.loads(span)
        except Exception:  # noqa: BLE001 - json_repair raises varied errors on garbage
            try:
                obj = json.loads(span)
            except ValueError:
                continue
        objs = obj if isinstance(obj, list) else [obj]
        values += [v for o in objs if isinstance(o, dict) for k, v in o.items() if str(k).strip().lower() == "label"]
    return values or None


def parse_judge_label(text: str | None) -> JudgeLabel | None:
    """Parse an LLM judge reply into "CORRECT", "WRONG" or None (a judge error; the caller counts it).

    1. A JSON object with a ``label`` key (fenced, truncated or wrapped in prose; repaired with
       ``json_repair``) decides: "CORRECT" -> CORRECT; "WRONG" / "INCORRECT" / "NOT CORRECT" -> WRONG;
       any other value, or several objects that disagree -> None.
    2. Otherwise the words in the reply: "wrong", "incorrect" and negated "correct" ("not correct",
       "isn't correct") count as WRONG, a bare "correct" as CORRECT (case-insensitive). Exactly one
       kind present -> that label; both or neither (including an empty reply) -> None.
    """
    if not text or not text.strip():
        return None
    values = _json_labels(text)
    if values is not None:
        labels = {_label_value(v) for v in values}
        return labels.pop() if len(labels) == 1 else None
    body = _NEG_CORRECT_RE.sub(" WRONG ", text)
    has_wrong = bool(_WRONG_RE.search(body))
    has_correct = bool(_CORRECT_RE.search(body))
    if has_wrong == has_correct:
        return None
    return "WRONG" if has_wrong else "CORRECT"


# --- aggregation ---------------------------------------------------------------------------

LOCOMO_OVERALL = "all (1-4)"
OVERALL = "all"
LOCOMO_EXCLUDED = ("5",)


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _present(rows: Sequence[dict], key: str) -> list[float]:
    out = []
    for r in rows:
        v = r.get(key)
        if v is None or (isinstance(v, float) and math.isnan(v)):
            continue
        out.append(float(v))
    return out


def _group_stats(rows: Sequence[dict]) -> dict:
    f1s = _present(rows, "f1")
    ems = _present(rows, "em")
    judged = [bool(r["judge"]) for r in rows if r.get("judge") is not None]
    recalls = _present(rows, "evidence_recall")
    usd = _present(rows, "usd")
    unpriced = sum(1 for r in rows if r.get("unpriced_calls"))
    f1_mean = _mean(f1s)
    usd_mean = None if unpriced else _mean(usd)  # unknown, not the priced part
    return {
        "n_questions": len(rows),
        "f1": f1_mean,
        "em": _mean(ems),
        "judge_accuracy": _mean([1.0 if j else 0.0 for j in judged]),
        "n_judged": len(judged),
        "n_judge_missing": sum(1 for r in rows if "judge" in r and r["judge"] is None),  # asked, no verdict
        "evidence_recall": _mean(recalls),
        "n_with_evidence": len(recalls),
        "usd_per_question": usd_mean,
        "usd_total": sum(usd) if usd and not unpriced else None,
        "unpriced_questions": unpriced,
        "proxy_s_mean": _mean(_present(rows, "proxy_s")),
        "wall_s_mean": _mean(_present(rows, "wall_s")),
        "qpc": qpc(f1_mean, usd_mean) if f1_mean is not None and usd_mean is not None else None,
    }


def _group_sort_key(name: str):
    return (0, int(name), "") if name.isdigit() else (1, 0, name)


def summarize(rows: Iterable[dict], by: str = "category", dataset: str | None = None) -> dict[str, dict]:
    """Per-group and overall means of per-question result rows.

    ``rows``: dicts with ``f1``, ``em`` (bool or float), ``judge`` (bool | None), ``evidence_recall``
    (float | None), ``usd`` (USD for that question), ``proxy_s`` and ``wall_s`` (seconds), and the
    ``by`` key. Returns ``{group: stats, ..., overall: stats}`` with groups in natural order; each
    stats dict has n_questions, f1, em, judge_accuracy (over non-None judges; n_judged,
    n_judge_missing: rows whose ``judge`` key is None, judged without a verdict; a row without the
    key was not sent to the judge), evidence_recall (over non-None; n_with_evidence), usd_per_question, usd_total,
    proxy_s_mean, wall_s_mean and qpc = f1 / (usd_per_question x 1e4) (MemoryCPT Eq. 6). Means are
    None when no value is present. A row with ``unpriced_calls`` > 0 (calls of a model missing from
    the price book) makes its group's cost unknown: usd_per_question, usd_total and qpc are None and
    ``unpriced_questions`` counts such rows.

    LoCoMo (``dataset="locomo"``, or every row has ``dataset == "locomo"``): category "5" rows form
    their own group (``"5"``; ``"category 5"`` when ``by`` is another key) and are never part of
    any other group or of the overall, which is keyed ``"all (1-4)"``; otherwise it is ``"all"``.
    """
    rows = list(rows)
    if dataset is None and rows and all(r.get("dataset") == "locomo" for r in rows):
        dataset = "locomo"
    is_locomo = (dataset or "").lower() == "locomo"
    excluded: list[dict] = []
    scored = rows
    if is_locomo:
        excluded = [r for r in rows if str(r.get("category")) in LOCOMO_EXCLUDED]
        scored = [r for r in rows if str(r.get("category")) not in LOCOMO_EXCLUDED]
    groups: dict[str, list[dict]] = {}
    for r in scored:
        groups.setdefault(str(r.get(by)), []).append(r)
    out: dict[str, dict] = {name: _group_stats(groups[name]) for name in sorted(groups, key=_group_sort_key)}
    if excluded:
        out["5" if by == "category" else "category 5"] = _group_stats(excluded)
    out[LOCOMO_OVERALL if is_locomo else OVERALL] = _group_stats(scored)
    return out


def choice_ratios(choices: Iterable[dict]) -> dict[str, dict[str, float]]:
    """Share of each choice per name over dicts ``{name: choice}`` (e.g. BudgetMem's module ->
    tier): ``{name: {choice: ratio}}``, names and choices in first-seen order, ratios per name
    summing to 1. An empty input gives ``{}``."""
    counts: dict[str, Counter] = {}
    for d in choices:
        for name, choice in d.items():
            counts.setdefault(str(name), Counter())[str(choice)] += 1
    return {name: {c: n / sum(cnt.values()) for c, n in cnt.items()} for name, cnt in counts.items()}


def overall_metrics(groups: dict) -> dict:
    """The overall group of :func:`summarize`'s output (``"all (1-4)"`` on LoCoMo, else ``"all"``);
    ``{}`` when there is none (no rows)."""
    key = next((k for k in groups if k.startswith("all")), None)
    return groups.get(key, {}) if key else {}
