"""Retrieval configurations scored by evidence recall against the context tokens they hand the
answerer, without an LLM.

Each configuration is a ``rag`` config (:class:`~memfrontier.strategies.rag.RagConfig`: unit,
retrievers, k, neighbours, max_tokens) run through the real path: a SQLite store built from the
benchmark's records, the turn view where the unit is a turn, ``Rag.context`` (the shared
``hybrid_search`` and the strategy's context building). ``oracle`` (the gold evidence) is the
anchor. Per question: evidence recall as the eval runner computes it
(:func:`~memfrontier.eval.metrics.evidence_recall` of the gold ids against the context's record
ids; questions without gold evidence left out), context tokens = the context text in the
answerer's tokenizer (the Qwen2.5 1.5B bench model's vocabulary, loaded alone; MiniLM's WordPiece
when that model is not installed, and the file says which), and the query-time overhead = the
wall time of ``context`` (query embedding, search, context building), after one warm-up query per
scope (index loads).  Each configuration's recall minus rag-k8's is paired by question, with its 95%
bootstrap interval (:func:`~memfrontier.frontier.stats.paired_diff_ci`, the frontier's).

Sets: LoCoMo training pool (the eight non-test conversations, categories 1-4), LoCoMo test split
(conv-49, conv-50, categories 1-4), reported apart, LongMemEval oracle (a seeded sample of
``--lme-limit`` questions: its haystacks are long to embed on two cores; 0 skips it) and
LongMemEval_S's training split (``longmemeval_s-train``, asked for by name: the ``--s-limit``
questions the frontier's ``--split train --limit N --seed 42`` answers, ~50 sessions each, about a
minute of embedding per question on two cores; its store can be the frontier's, ``--s-store``).

Writes ``<out>/retrieval.json`` (every configuration x set: n, mean recall, mean / p50 context
tokens, overhead p50 / p95 ms; provenance), ``<out>/retrieval.md`` and one recall-vs-tokens plot
per set (``<out>/recall_tokens_<set>.png``).

    python benchmarks/bench_retrieval.py                          # all sets (about 10-15 min on 2 cores)
    python benchmarks/bench_retrieval.py --sets locomo-train      # tune on the training pool only
    python benchmarks/bench_retrieval.py --lme-limit 0 --only rag-k8 rag-turns
    python benchmarks/bench_retrieval.py --sets longmemeval_s-train --s-limit 30 --only rag-k8 rag-turns-rr
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from memfrontier.core.jsonio import write_json_atomic  # noqa: E402
from memfrontier.core.ledger import Ledger, use_ledger  # noqa: E402
from memfrontier.core.provenance import git_commit, provenance, sha256_file  # noqa: E402
from memfrontier.core.types import Budget, Scope  # noqa: E402
from memfrontier.embed.minilm import MiniLMEmbedder  # noqa: E402
from memfrontier.embed.query import _CACHES  # noqa: E402
from memfrontier.eval.datasets import DATASET_FILES, data_root  # noqa: E402
from memfrontier.eval.datasets.locomo import load_locomo, locomo_split  # noqa: E402
from memfrontier.eval.datasets.longmemeval import load_longmemeval, load_longmemeval_s, longmemeval_sample  # noqa: E402
from memfrontier.eval.datasets.sampling import select_questions  # noqa: E402
from memfrontier.eval.metrics import evidence_recall  # noqa: E402
from memfrontier.frontier.spec import load_spec  # noqa: E402
from memfrontier.frontier.stats import paired_diff_ci  # noqa: E402
from memfrontier.store.open import open_store  # noqa: E402
from memfrontier.strategies import get_strategy  # noqa: E402
from memfrontier.strategies.base import MemoryEnv, Query  # noqa: E402

#: The options of the frontier spec's configurations (src/memfrontier/frontier/default.yaml) by label.
FRONTIER = {c.label: c.options for c in load_spec().configurations}
#: label -> (strategy, options). The reference points first, then the turn configurations.
CONFIGS: dict[str, tuple[str, dict]] = {
    "oracle": ("oracle", {}),
    "rag-k4": ("rag", {"k": 4}),
    "rag-k8": ("rag", {"k": 8}),
    "rag-k16": ("rag", {"k": 16}),
    "rag-k8-dense": ("rag", {"k": 8, "retrievers": ["dense"]}),
    "rag-k8-bm25": ("rag", {"k": 8, "retrievers": ["bm25"]}),
    "turns-k16": ("rag", {"unit": "turn", "k": 16}),
    "turns-k32": ("rag", {"unit": "turn", "k": 32}),
    "turns-k16-dense": ("rag", {"unit": "turn", "k": 16, "retrievers": ["dense"]}),
    "turns-k16-bm25": ("rag", {"unit": "turn", "k": 16, "retrievers": ["bm25"]}),
    "turns-k8-n1": ("rag", {"unit": "turn", "k": 8, "neighbours": 1}),
    "turns-chunks-k16": ("rag", {"unit": "turn", "k": 16, "retrievers": ["dense", "bm25", "chunk"]}),
    # the configurations chosen on the training pool (frontier labels rag-turns, rag-turns-v2,
    # rag-turns-rr: its reranker was trained on the training pool, so its row there is in-sample)
    "rag-turns": ("rag", FRONTIER["rag-turns"]),
    "rag-turns-v2": ("rag", FRONTIER["rag-turns-v2"]),
    "turns-colon": ("rag", {**FRONTIER["rag-turns"], "turn_style": "colon"}),
    "turns-rr": ("rag", {**FRONTIER["rag-turns"], "rerank": True}),
    "rag-turns-rr": ("rag", FRONTIER["rag-turns-rr"]),
    # near-duplicate folding (memfrontier.retrieve.fold) off: what folding changes at the same k / budget
    "rag-k4-nofold": ("rag", {"k": 4, "fold": None}),
    "rag-k8-nofold": ("rag", {"k": 8, "fold": None}),
    "rag-turns-rr-nofold": ("rag", {**FRONTIER["rag-turns-rr"], "fold": None}),
    # a long turn shown as its excerpt of at most this many retriever tokens (memfrontier.retrieve.excerpt)
    "rag-turns-rr-x96": ("rag", {**FRONTIER["rag-turns-rr"], "excerpt_tokens": 96}),
    "rag-turns-rr-x160": ("rag", {**FRONTIER["rag-turns-rr"], "excerpt_tokens": 160}),
    "rag-turns-rr-x224": ("rag", {**FRONTIER["rag-turns-rr"], "excerpt_tokens": 224}),
}
REFERENCE = "rag-k8"


def answerer_tokenizer():
    """``(count_tokens, name)``: the bench answerer's tokenizer (vocabulary only), else MiniLM's."""
    try:
        from llama_cpp import Llama

        from memfrontier.llm.local_models import model_file, resolve_local

        m = resolve_local("qwen2.5-1.5b")
        llm = Llama(model_path=str(model_file(m)), vocab_only=True, verbose=False)
        return (lambda t: len(llm.tokenize(t.encode("utf-8"), add_bos=False, special=False))), m.model_id
    except Exception as e:  # noqa: BLE001 - the fallback is recorded in the output
        print(f"answerer tokenizer unavailable ({e}); counting MiniLM tokens", file=sys.stderr)
        emb = MiniLMEmbedder()
        return emb.count_tokens, emb.model_id


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(q * (len(xs) - 1))))] if xs else float("nan")


async def run_set(env, convs, labels, count_tokens, measured=None) -> dict[str, dict]:
    """Every configuration of ``labels`` on the questions (with gold evidence) of ``convs``;
    ``measured(rows)``, if given, after each configuration (the rows so far)."""
    questions = [q for c in convs for q in c.questions if q.evidence_ids]
    out = {}
    per_question: dict[str, dict[str, float]] = {}  # label -> question id -> recall (paired differences)
    for label in labels:
        name, options = CONFIGS[label]
        strat = get_strategy(name, options)
        for c in convs:  # the turn view (no-op when built) and a warm-up query per scope
            scope = Scope(user_id=c.id)
            await strat.build(env, scope)
            await strat.context(Query(text="hello", scope=scope, gold_evidence_ids=[]), env, None, Budget())
        _CACHES.clear()  # every configuration encodes its queries itself (no vector left by the one before)
        recalls, tokens, ms = [], [], []
        ledger = Ledger()  # counts the reranker's declines (rerank.declined)
        for q in questions:
            query = Query(text=q.question, scope=Scope(user_id=q.conversation_id), gold_evidence_ids=q.evidence_ids)
            t0 = time.perf_counter()
            with use_ledger(ledger):
                ctx = await strat.context(query, env, None, Budget())
            ms.append(1e3 * (time.perf_counter() - t0))
            recalls.append(evidence_recall(q.evidence_ids, ctx.evidence_ids))
            tokens.append(count_tokens(ctx.text))
        per_question[label] = {q.id: r for q, r in zip(questions, recalls)}
        out[label] = {
            "strategy": name,
            "options": options,
            "n": len(questions),
            "evidence_recall": statistics.fmean(recalls),
            "context_tokens_mean": statistics.fmean(tokens),
            "context_tokens_p50": pct(tokens, 0.5),
            "overhead_ms_p50": pct(ms, 0.5),
            "overhead_ms_p95": pct(ms, 0.95),
            "rerank_declined": ledger.events.get("rerank.declined", 0),
            "recall_by_question": per_question[label],  # paired comparisons across runs (compare_retrieval.py)
        }
        if REFERENCE in per_question and label != REFERENCE:
            out[label]["d_recall_vs_ref"] = paired_diff_ci(per_question[label], per_question[REFERENCE])
        r = out[label]
        print(
            f"  {label:18s} recall {r['evidence_recall']:.3f}  tokens {r['context_tokens_mean']:7.0f}  "
            f"p50 {r['overhead_ms_p50']:6.1f} ms  p95 {r['overhead_ms_p95']:6.1f} ms",
            flush=True,
        )
        if measured is not None:
            measured(out)
    return out


def ingest(store, convs) -> None:
    for c in convs:
        store.add(c.records)


def table(rows: dict[str, dict]) -> str:
    ref = rows.get(REFERENCE)
    lines = [
        "| configuration | options | n | evidence recall | recall - rag-k8 [95% CI] | context tokens (mean) | tokens vs rag-k8 | overhead p50 ms | overhead p95 ms | reranker declined |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for label, r in rows.items():
        rel = f"{r['context_tokens_mean'] / ref['context_tokens_mean']:.0%}" if ref else "-"
        opts = ", ".join(f"{k}={v}" for k, v in r["options"].items()) or "-"
        d = r.get("d_recall_vs_ref")
        diff = f"{d['mean']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}]" if d and d.get("n") else "-"
        lines.append(
            f"| {label} | {opts} | {r['n']} | {r['evidence_recall']:.3f} | {diff} | {r['context_tokens_mean']:.0f} | {rel} | "
            f"{r['overhead_ms_p50']:.1f} | {r['overhead_ms_p95']:.1f} | {r.get('rerank_declined', '-')} |"
        )
    return "\n".join(lines)


def plot(rows: dict[str, dict], title: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5.5))
    families = {
        "rag-turns": ("tab:red", "rag-turns (chosen on train)"),
        "rag-": ("tab:blue", "chunks (rag)"),
        "turns-": ("tab:orange", "turns"),
        "oracle": ("tab:green", "oracle"),
    }
    seen = set()
    for label, r in rows.items():
        fam = next(f for f in families if label.startswith(f))
        color, name = families[fam]
        ax.scatter(r["context_tokens_mean"], r["evidence_recall"], color=color, label=None if fam in seen else name)
        seen.add(fam)
        ax.annotate(
            label,
            (r["context_tokens_mean"], r["evidence_recall"]),
            fontsize=7,
            xytext=(3, 3),
            textcoords="offset points",
        )
    if REFERENCE in rows:
        ref = rows[REFERENCE]
        ax.axvline(0.4 * ref["context_tokens_mean"], color="grey", ls=":", lw=1, label="40% of rag-k8 tokens")
        ax.axhline(ref["evidence_recall"], color="grey", ls="--", lw=1, label="rag-k8 recall")
    ax.set_xscale("log")
    ax.set_xlabel("context tokens handed to the answerer (mean per question, log)")
    ax.set_ylabel("evidence recall (mean)")
    ax.set_title(title)
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(
        description="Evidence recall against the answerer's context tokens, per retrieval configuration (no LLM)."
    )
    ap.add_argument(
        "--sets",
        nargs="+",
        default=["locomo-train", "locomo-test", "longmemeval"],
        help="locomo-train (the training pool: tune here), locomo-test (report only), longmemeval (default: all "
        "three), longmemeval_s-train (LongMemEval_S's training split: tune here)",
    )
    ap.add_argument("--only", nargs="+", default=None, help="configuration labels (default: all)")
    ap.add_argument("--lme-limit", type=int, default=100, help="LongMemEval questions sampled (0: skip)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the LongMemEval sample")
    ap.add_argument("--s-limit", type=int, default=30, help="LongMemEval_S training questions (the frontier's slice)")
    ap.add_argument(
        "--s-store", default=None, help="the store holding them (e.g. a frontier's OUT/store; default under --stores)"
    )
    ap.add_argument("--stores", default=str(ROOT / "runs" / "retrieval"), help="where the stores are built (reused)")
    ap.add_argument("--out", default=str(ROOT / "results" / "retrieval"), help="where retrieval.{json,md} and plots go")
    ap.add_argument(
        "--merge", nargs="+", default=None, help="retrieval.json files of runs over different sets: write them as one"
    )
    args = ap.parse_args()
    if args.merge:
        return merge(args.merge, Path(args.out))
    labels = args.only or list(CONFIGS)
    unknown = [x for x in labels if x not in CONFIGS]
    if unknown:
        ap.error(f"unknown configurations {unknown}; choose from {list(CONFIGS)}")

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    args.code = git_commit()  # the code measured: the commit when the run started, not when it writes
    count_tokens, tokenizer = answerer_tokenizer()
    embedder = MiniLMEmbedder()
    results: dict[str, dict] = {}
    files: dict[str, Path] = {}
    loc_sets = [s for s in args.sets if s.startswith("locomo")]
    if loc_sets:
        files["locomo"] = data_root() / DATASET_FILES["locomo"]
        convs = load_locomo(files["locomo"])
        store = open_store(Path(args.stores) / "locomo", embedder)
        ingest(store, convs)
        env = MemoryEnv(store=store, llm=None, answer_llm=None)
        for s in loc_sets:
            part = locomo_split(convs, s.split("-", 1)[1])
            print(f"{s}: {sum(len(c.questions) for c in part)} questions", flush=True)
            save = partial(saved, results, s, out, files, args, embedder, tokenizer)
            asyncio.run(run_set(env, part, labels, count_tokens, save))
        store.close()
    measure = partial(measure_set, results, out, files, args, embedder, tokenizer, labels, count_tokens)
    if "longmemeval_s-train" in args.sets and args.s_limit > 0:
        files["longmemeval_s"] = data_root() / DATASET_FILES["longmemeval_s"]
        convs = load_longmemeval_s(files["longmemeval_s"], "train")
        picked = {q.conversation_id for q in select_questions(convs, args.s_limit, 42)}
        where = Path(args.s_store) if args.s_store else Path(args.stores) / "longmemeval_s"
        measure("longmemeval_s-train", [c for c in convs if c.id in picked], where)
    if "longmemeval" in args.sets and args.lme_limit > 0:
        files["longmemeval"] = data_root() / DATASET_FILES["longmemeval"]
        convs = longmemeval_sample(load_longmemeval(files["longmemeval"]), args.lme_limit, args.seed)
        measure("longmemeval", convs, Path(args.stores) / "longmemeval")


def measure_set(results, out, files, args, embedder, tokenizer, labels, count_tokens, name, convs, where) -> None:
    """Set ``name``: ``convs`` added to the store at ``where`` (kept), then every configuration."""
    store = open_store(where, embedder)
    try:
        ingest(store, convs)
        env = MemoryEnv(store=store, llm=None, answer_llm=None)
        print(f"{name}: {len(convs)} questions", flush=True)
        save = partial(saved, results, name, out, files, args, embedder, tokenizer)
        asyncio.run(run_set(env, convs, labels, count_tokens, save))
    finally:
        store.close()


def saved(results: dict, name: str, out: Path, files, args, embedder, tokenizer, rows: dict) -> None:
    """Keep set ``name``'s rows so far and write everything measured (a stopped run keeps its rows)."""
    results[name] = dict(rows)
    write(out, results, files, args, embedder, tokenizer)


def merge(paths: list[str], out: Path) -> None:
    """One ``retrieval.json`` / markdown / plots from runs that measured different sets (each set
    keeps its own run's provenance, under ``provenance_by_set``)."""
    out.mkdir(parents=True, exist_ok=True)
    docs = [json.loads(Path(p).read_text()) for p in paths]
    results, by_set = {}, {}
    for d in docs:
        for s, rows in d["results"].items():
            results[s], by_set[s] = rows, d["provenance"]
    lme = max(d.get("lme_limit", 0) for d in docs)
    doc = {"provenance_by_set": by_set, "lme_limit": lme, "reference": REFERENCE, "results": results}
    write_json_atomic(out / "retrieval.json", doc)
    commits = sorted({p.get("commit", "?") for p in by_set.values()})
    tokenizer = next(iter(by_set.values()))["models"]["context_tokenizer"]
    seed = by_set.get("longmemeval", {}).get("seed", 0)
    render(out, results, tokenizer, lme, seed, f"runs merged with --merge; commits {', '.join(commits)}")


def write(out: Path, results: dict, files: dict, args, embedder, tokenizer) -> None:
    """The JSON, markdown and plots of the sets measured so far."""

    prov = provenance(
        # the file relative to the data root (the same on every machine), as the trainers record it
        data={name: {"file": DATASET_FILES[name], "sha256": sha256_file(f)} for name, f in files.items()},
        seed=args.seed,
        models={"embedder": embedder.model_id, "context_tokenizer": tokenizer},
        **args.code,
    )
    doc = {"provenance": prov, "lme_limit": args.lme_limit, "reference": REFERENCE, "results": results}
    write_json_atomic(out / "retrieval.json", doc)
    cmd = f"python benchmarks/bench_retrieval.py --sets {' '.join(args.sets)} --lme-limit {args.lme_limit}"
    render(out, results, tokenizer, args.lme_limit, args.seed, f"`{cmd}`; commit {prov.get('commit', '?')}")


def render(out: Path, results: dict, tokenizer: str, lme_limit: int, seed: int, how: str) -> None:
    md = [
        "# Retrieval: evidence recall vs context tokens",
        "",
        "No LLM: each configuration's context (the `rag` strategy's, through the shared hybrid search) "
        "scored by evidence recall (gold evidence turns present in the context) against its size in "
        f"the answerer's tokens ({tokenizer}). Overhead: wall time of the context step per question "
        "(query embedding, search, context building) on this machine, shared with other jobs. Reranker "
        "declined: questions whose candidates the turn reranker left in the fused order (outside its "
        "training range). "
        f"Made by {how}; provenance in retrieval.json.",
    ]
    titles = {
        "locomo-train": "LoCoMo training pool (8 conversations, categories 1-4)",
        "locomo-test": "LoCoMo test split (conv-49, conv-50, categories 1-4)",
        "longmemeval": f"LongMemEval oracle ({lme_limit} sampled questions, seed {seed})",
        "longmemeval_s-train": "LongMemEval_S training split (the frontier's --split train slice, seed 42)",
    }
    for s, rows in results.items():
        md += ["", f"## {titles[s]}", "", table(rows), "", f"![recall vs tokens](recall_tokens_{s}.png)"]
        plot(rows, titles[s], out / f"recall_tokens_{s}.png")
    (out / "retrieval.md").write_text("\n".join(md) + "\n")
    print(f"wrote {out}/retrieval.json, retrieval.md and plots")


if __name__ == "__main__":
    main()
