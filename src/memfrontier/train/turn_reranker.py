"""Train ``rag``'s turn reranker (:mod:`memfrontier.retrieve.rerank`) on the LoCoMo training pool.

Data: every training-pool question with gold evidence (categories 1-4 of the eight non-test
conversations); its candidates are the ``candidates`` turns of rag's turn search (recipe
``turns_chunks_rrf``: turn dense + BM25 + the turn's chunk rank, RRF k=5) over its conversation,
labelled 1 when the turn is one of the question's evidence records. The test split is never read.

Objective: binary cross-entropy of the reranker's score (a logit) against the label, AdamW
(lr 3e-3, batches of 512, ``epochs`` passes, the products scaled by :data:`PRODUCT_SCALE`), on one CPU thread; seeded, so a rerun writes the same
weights on the same machine and library versions.

Validation: leave one conversation out (eight folds): recall@10 and recall@20 (share of a
question's evidence among its first 10 / 20 turns) of the held-out conversation's questions in the
reranked order against the fused order, averaged over questions. The file keeps the report.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ..core.provenance import provenance, sha256_file
from ..core.types import Scope
from ..embed.minilm import MiniLMEmbedder
from ..eval.datasets import DATASET_FILES, data_root
from ..eval.datasets.locomo import load_locomo, locomo_split
from ..retrieve.hybrid import hybrid_search
from ..retrieve.rerank import SCALAR_FEATURES, RerankerFile, turn_features, write_reranker_file
from ..store.open import open_store
from ..strategies.rag import Rag, RagConfig
from ..views.turns import KIND, build_turns, open_turn_bank
from .configs import TurnRerankerConfig

LR = 3e-3
BATCH = 512
#: The products q*t (each about 1/dim) are multiplied by this while training, so that their weights
#: start and decay on the scale of the standardised scalars'; the file holds ``w_v`` times it.
PRODUCT_SCALE = 20.0


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


def collect(cfg: TurnRerankerConfig, on_progress=None) -> tuple[list[Question], dict]:
    """The training questions (see the module docstring) and the data's provenance
    (``{"file", "sha256", "conversations", "questions"}``)."""
    path = data_root(cfg.data_root) / DATASET_FILES["locomo"]
    convs = locomo_split(load_locomo(path), "train")
    store = open_store(cfg.store, MiniLMEmbedder())
    rag = Rag(RagConfig(unit="turn", retrievers=("dense", "bm25", "chunk"), k=cfg.candidates))
    count = store.embedder.count_tokens
    out: list[Question] = []
    try:
        bank = open_turn_bank(store)
        for c in convs:
            store.add(c.records)  # content-addressed: a rerun adds nothing
            scope = Scope(user_id=c.id)
            build_turns(bank, store, scope)
            for q in c.questions:
                if not q.evidence_ids:
                    continue
                hits = hybrid_search(bank, q.question, scope, rag.recipe, k=cfg.candidates, store=store)
                qv = bank.encode_query(q.question)
                bm25 = {it.id: s for it, s in bank.search_bm25(q.question, scope, None, kind=KIND)}
                scalars, products = turn_features(bank, scope, KIND, q.question, hits, qv, bm25, count)
                gold = set(q.evidence_ids)
                out.append(
                    Question(
                        conversation=c.id,
                        scalars=scalars,
                        products=products,
                        labels=np.asarray([float(any(s in gold for s in h.item.source_ids)) for h in hits], np.float32),
                        sources=[list(h.item.source_ids) for h in hits],
                        gold=list(q.evidence_ids),
                    )
                )
            if on_progress:
                on_progress("collected", conversation=c.id, questions=len(out))
    finally:
        store.close()
    data = {
        "file": str(path),
        "sha256": sha256_file(path),
        "conversations": [c.id for c in convs],
        "questions": len(out),
    }
    return out, data


def fit(questions: list[Question], cfg: TurnRerankerConfig) -> dict:
    """Weights (the :class:`RerankerFile` fields ``mean`` ... ``b_o``) fitted on ``questions``."""
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(cfg.seed)
    xs = np.vstack([q.scalars for q in questions])
    xv = np.vstack([q.products for q in questions])
    y = np.concatenate([q.labels for q in questions])
    mean, std = xs.mean(0), xs.std(0)
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


def validate(questions: list[Question], cfg: TurnRerankerConfig, embedding_model: str, on_progress=None) -> dict:
    """Leave-one-conversation-out recall@10 / @20, fused vs reranked order (module docstring)."""
    from ..retrieve.rerank import TurnReranker

    per: dict[str, list[float]] = {f"{o}@{k}": [] for o in ("fused", "reranked") for k in (10, 20)}
    convs = sorted({q.conversation for q in questions})
    for held in convs:
        weights = fit([q for q in questions if q.conversation != held], cfg)
        model = TurnReranker(RerankerFile(embedding_model=embedding_model, scalars=list(SCALAR_FEATURES), **weights))
        for q in (q for q in questions if q.conversation == held):
            s = model.score(q.scalars, q.products)
            reranked = sorted(range(len(s)), key=lambda i: (-float(s[i]), i))
            for k in (10, 20):
                per[f"fused@{k}"].append(recall_at(q, list(range(len(s))), k))
                per[f"reranked@{k}"].append(recall_at(q, reranked, k))
        if on_progress:
            on_progress("validated", held_out=held)
    return {
        "method": "leave one conversation out",
        "folds": len(convs),
        "questions": len(questions),
        "recall": {k: round(float(np.mean(v)), 4) for k, v in per.items()},
    }


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
            data={"locomo": data},
            split="train",
            seed=cfg.seed,
            models={"embedder": model_id},
            training={
                "candidates": cfg.candidates,
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


__all__ = ["Question", "collect", "fit", "recall_at", "train_turn_reranker", "validate"]
