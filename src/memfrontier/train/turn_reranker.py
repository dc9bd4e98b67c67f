"""Train ``rag``'s turn reranker (:mod:`memfrontier.retrieve.rerank`) on two kinds of history.

Data: every question with gold evidence of (1) the LoCoMo training pool (categories 1-4 of the
eight non-test conversations: two people chatting, short turns), (2) ``longmemeval`` questions
of the LongMemEval training pool (:func:`longmemeval_training_pool`: a user and an assistant, long
answers, only the evidence sessions) and (3) ``longmemeval_s`` questions of LongMemEval_S's
training split (the same kind of history at its real scale, ~50 sessions of which most are
distractors: what the reranker must learn to skip; none drawn in (2) as well, since the two files
share question ids and so scopes). Trained on LoCoMo alone, the reranker learnt that longer turns
are more often evidence and, on LongMemEval, spent the token budget on one or two long answers. A question's candidates are
the ``candidates`` turns of rag's turn search (recipe ``turns_chunks_rrf``: turn dense + BM25 + the
turn's chunk rank, RRF k=5) over its conversation, labelled 1 when the turn is one of its evidence
records. No test question (LoCoMo's conv-49 and conv-50, LongMemEval's report samples) is read.

Objective: binary cross-entropy of the reranker's score (a logit) against the label, AdamW
(lr 3e-3, batches of 512, ``epochs`` passes, the products scaled by :data:`PRODUCT_SCALE`), on one
CPU thread; seeded, so a rerun writes the same weights on the same machine and library versions.

Validation, each against the fused order: leave one LoCoMo conversation out (eight folds, every
LongMemEval question in training) and, per LongMemEval file, five folds of its questions (every
other question in training); recall@10 and recall@20 (share of a question's evidence among its first
10 / 20 turns), averaged over the held-out questions. The file keeps the report.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

import numpy as np

from ..core.provenance import provenance, sha256_file
from ..core.types import Scope
from ..embed.minilm import MiniLMEmbedder
from ..eval.datasets import DATASET_FILES, data_root
from ..eval.datasets.locomo import load_locomo, locomo_split
from ..eval.datasets.longmemeval import load_longmemeval, load_longmemeval_s, longmemeval_sample, report_reserve
from ..retrieve.hybrid import hybrid_search
from ..retrieve.rerank import SCALAR_FEATURES, RerankerFile, hit_features, write_reranker_file
from ..store.open import open_store
from ..strategies.rag import Rag, RagConfig
from ..views.turns import KIND, build_turns, open_turn_bank
from .configs import TurnRerankerConfig

LR = 3e-3
BATCH = 512
#: The products q*t (each about 1/dim) are multiplied by this while training, so that their weights
#: start and decay on the scale of the standardised scalars'; the file holds ``w_v`` times it.
PRODUCT_SCALE = 20.0
#: Folds of each LongMemEval file's questions in the validation.
LME_FOLDS = 5
#: A training question's ``conversation`` prefix -> the dataset it comes from (LoCoMo's: none).
PREFIXES = {"lme:": "longmemeval", "lmes:": "longmemeval_s"}


@dataclass
class Question:
    """One training question: its conversation, the candidates' features and labels, and the
    evidence ids (recall's denominator; some may be outside the candidates)."""

    conversation: str
    scalars: np.ndarray  # (n, n_scalars) float32
    products: np.ndarray  # (n, dim) float32
    labels: np.ndarray  # (n,) float32, 1 = the turn is evidence
    sources: list[list[str]]  # each candidate's record ids
    gold: list[str]


def longmemeval_training_pool(convs: list) -> list:
    """The LongMemEval conversations (one per question) outside every report sample, in file order
    (:func:`~memfrontier.eval.datasets.longmemeval.report_reserve` of ``convs``, the oracle file)."""
    reserved = report_reserve(convs)
    return [c for c in convs if c.id not in reserved]


def collect(cfg: TurnRerankerConfig, on_progress=None) -> tuple[list[Question], dict]:
    """The training questions (see the module docstring) and the data's provenance (per dataset:
    ``{"file"`` (relative to the data root), ``"sha256", "conversations", "questions"}``).
    A LongMemEval question's ``conversation`` is prefixed ``lme:`` (the oracle file) or ``lmes:`` (S)."""
    root = data_root(cfg.data_root)
    sources = [("locomo", "", locomo_split(load_locomo(root / DATASET_FILES["locomo"]), "train"))]
    drawn: set[str] = set()
    if cfg.longmemeval:
        pool = longmemeval_training_pool(load_longmemeval(root / DATASET_FILES["longmemeval"]))
        picked = sorted(random.Random(cfg.seed).sample(pool, min(cfg.longmemeval, len(pool))), key=lambda c: c.id)
        sources.append(("longmemeval", "lme:", picked))
        drawn = {c.id for c in picked}
    if cfg.longmemeval_s:
        pool = load_longmemeval_s(root / DATASET_FILES["longmemeval_s"], "train", data_root=root)
        picked = longmemeval_sample([c for c in pool if c.id not in drawn], cfg.longmemeval_s, cfg.seed)
        sources.append(("longmemeval_s", "lmes:", picked))
    store = open_store(cfg.store, MiniLMEmbedder())
    rag = Rag(RagConfig(unit="turn", retrievers=("dense", "bm25", "chunk"), k=cfg.candidates))
    count = store.embedder.count_tokens
    out: list[Question] = []
    data: dict[str, dict] = {}
    try:
        bank = open_turn_bank(store)
        for name, prefix, convs in sources:
            n0 = len(out)
            for c in convs:
                store.add(c.records)  # content-addressed: a rerun adds nothing
                scope = Scope(user_id=c.id)
                build_turns(bank, store, scope)
                for q in c.questions:
                    if q.evidence_ids:
                        out.append(_question(bank, store, rag, scope, prefix + c.id, q, cfg.candidates, count))
                if on_progress:
                    on_progress("collected", dataset=name, conversation=c.id, questions=len(out) - n0)
            path = root / DATASET_FILES[name]
            data[name] = {
                "file": DATASET_FILES[name],
                "sha256": sha256_file(path),
                "conversations": [c.id for c in convs],
                "questions": len(out) - n0,
            }
    finally:
        store.close()
    return out, data


def _question(bank, store, rag: Rag, scope: Scope, conversation: str, q, k: int, count) -> Question:
    """One question's candidates (rag's turn search), their features and labels."""
    hits = hybrid_search(bank, q.question, scope, rag.recipe, k=k, store=store)
    scalars, products = hit_features(bank, scope, KIND, q.question, hits, count)
    gold = set(q.evidence_ids)
    return Question(
        conversation=conversation,
        scalars=scalars,
        products=products,
        labels=np.asarray([float(any(s in gold for s in h.item.source_ids)) for h in hits], np.float32),
        sources=[list(h.item.source_ids) for h in hits],
        gold=list(q.evidence_ids),
    )


def fit(questions: list[Question], cfg: TurnRerankerConfig) -> dict:
    """Weights (the :class:`RerankerFile` fields ``mean`` ... ``b_o``) fitted on ``questions``."""
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(cfg.seed)
    xs = np.vstack([q.scalars for q in questions])
    xv = np.vstack([q.products for q in questions])
    y = np.concatenate([q.labels for q in questions])
    mean, std, low, high = xs.mean(0), xs.std(0), xs.min(0), xs.max(0)
    std = np.where(std > 1e-6, std, 1.0)  # a constant feature (e.g. a question word never seen) stays 0
    zs = torch.tensor((xs - mean) / std, dtype=torch.float32)
    pv = torch.tensor(xv * PRODUCT_SCALE, dtype=torch.float32)
    yt = torch.tensor(y)
    n_s, dim = zs.shape[1], pv.shape[1]
    w_v = torch.nn.Linear(dim, cfg.hidden)
    w_s = torch.nn.Linear(n_s, cfg.hidden, bias=False)
    w_o = torch.nn.Linear(cfg.hidden, 1)
    w_l = torch.nn.Linear(n_s, 1, bias=False)
    params = [*w_v.parameters(), *w_s.parameters(), *w_o.parameters(), *w_l.parameters()]
    opt = torch.optim.AdamW(params, lr=LR, weight_decay=cfg.weight_decay)
    gen = torch.Generator().manual_seed(cfg.seed)
    for _ in range(cfg.epochs):
        perm = torch.randperm(len(yt), generator=gen)
        for i in range(0, len(yt), BATCH):
            b = perm[i : i + BATCH]
            logit = (w_o(torch.relu(w_v(pv[b]) + w_s(zs[b]))) + w_l(zs[b])).squeeze(-1)
            loss = torch.nn.functional.binary_cross_entropy_with_logits(logit, yt[b])
            opt.zero_grad()
            loss.backward()
            opt.step()
    dump = lambda t: t.detach().numpy()  # noqa: E731
    return {
        "mean": _rounded(mean),
        "std": _rounded(std),
        "low": _rounded(low),
        "high": _rounded(high),
        "w_v": [_rounded(r) for r in dump(w_v.weight) * PRODUCT_SCALE],
        "w_s": [_rounded(r) for r in dump(w_s.weight)],
        "b_h": _rounded(dump(w_v.bias)),
        "w_o": _rounded(dump(w_o.weight)[0]),
        "w_l": _rounded(dump(w_l.weight)[0]),
        "b_o": _rounded(dump(w_o.bias))[0],
    }


def _rounded(a) -> list[float]:
    """``a``'s values to 6 significant digits (float32 holds about 7: the file stays small and exact
    enough)."""
    return [float(f"{float(v):.6g}") for v in np.ravel(a)]


def recall_at(q: Question, order: list[int], k: int) -> float:
    """Share of ``q``'s evidence among the record ids of its first ``k`` candidates in ``order``."""
    got = {s for i in order[:k] for s in q.sources[i]}
    return len(got & set(q.gold)) / len(set(q.gold))


def folds(questions: list[Question]) -> dict[str, list[list[int]]]:
    """The validation folds as lists of question indices, per dataset: each LoCoMo conversation
    alone (``locomo``); each LongMemEval file's questions (:data:`PREFIXES`) in :data:`LME_FOLDS`
    contiguous parts of their sorted order (``longmemeval``, ``longmemeval_s``). A dataset without
    questions is absent."""
    loc: dict[str, list[int]] = {}
    lme: dict[str, list[int]] = {}
    for i, q in enumerate(questions):
        prefix = next((p for p in PREFIXES if q.conversation.startswith(p)), None)
        if prefix:
            lme.setdefault(PREFIXES[prefix], []).append(i)
        else:
            loc.setdefault(q.conversation, []).append(i)
    out = {"locomo": [loc[c] for c in sorted(loc)]} if loc else {}
    for name in sorted(lme):
        idx = sorted(lme[name], key=lambda i: questions[i].conversation)
        out[name] = [list(map(int, f)) for f in np.array_split(idx, min(LME_FOLDS, len(idx)))]
    return out


def validate(questions: list[Question], cfg: TurnRerankerConfig, embedding_model: str, on_progress=None) -> dict:
    """Per dataset, recall@10 / @20 of its held-out folds (:func:`folds`), fused vs reranked order,
    each fold scored by a reranker fitted on every other question (module docstring)."""
    from ..retrieve.rerank import TurnReranker

    report: dict[str, dict] = {}
    for name, parts in folds(questions).items():
        per: dict[str, list[float]] = {f"{o}@{k}": [] for o in ("fused", "reranked") for k in (10, 20)}
        for part in parts:
            held = set(part)
            weights = fit([q for i, q in enumerate(questions) if i not in held], cfg)
            model = TurnReranker(
                RerankerFile(embedding_model=embedding_model, scalars=list(SCALAR_FEATURES), **weights)
            )
            for q in (questions[i] for i in part):
                s = model.score(q.scalars, q.products)
                reranked = sorted(range(len(s)), key=lambda i: (-float(s[i]), i))
                for k in (10, 20):
                    per[f"fused@{k}"].append(recall_at(q, list(range(len(s))), k))
                    per[f"reranked@{k}"].append(recall_at(q, reranked, k))
            if on_progress:
                on_progress("validated", dataset=name, held_out=len(part))
        report[name] = {
            "method": "leave one conversation out" if name == "locomo" else f"{len(parts)} folds of questions",
            "folds": len(parts),
            "questions": sum(map(len, parts)),
            "recall": {k: round(float(np.mean(v)), 4) for k, v in per.items()},
        }
    return report


def train_turn_reranker(cfg: TurnRerankerConfig, on_progress=None) -> dict:
    """Collect, validate (leave one conversation out), fit on every training question and write
    ``cfg.out``. Returns ``{"out", "validation", "questions", "seconds"}``.

    Raises:
        DatasetError: the LoCoMo file is missing or unreadable.
    """
    t0 = time.perf_counter()
    questions, data = collect(cfg, on_progress)
    model_id = MiniLMEmbedder().model_id
    validation = validate(questions, cfg, model_id, on_progress)
    weights = fit(questions, cfg)
    rf = RerankerFile(
        embedding_model=model_id,
        scalars=list(SCALAR_FEATURES),
        **weights,
        provenance=provenance(
            data=data,
            split="train",
            seed=cfg.seed,
            models={"embedder": model_id},
            training={
                "candidates": cfg.candidates,
                "longmemeval": cfg.longmemeval,
                "longmemeval_s": cfg.longmemeval_s,
                "hidden": cfg.hidden,
                "epochs": cfg.epochs,
                "weight_decay": cfg.weight_decay,
                "lr": LR,
                "batch": BATCH,
                "pairs": int(sum(len(q.labels) for q in questions)),
                "positives": int(sum(q.labels.sum() for q in questions)),
            },
        ),
        validation=validation,
    )
    write_reranker_file(rf, cfg.out)
    return {"out": cfg.out, "validation": validation, "questions": len(questions), "seconds": time.perf_counter() - t0}


__all__ = [
    "Question",
    "collect",
    "fit",
    "folds",
    "longmemeval_training_pool",
    "recall_at",
    "train_turn_reranker",
    "validate",
]
