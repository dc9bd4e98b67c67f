"""The ``memfrontier`` command line: eval, score, ingest, ask, search, train, sweep."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

app = typer.Typer(help="memfrontier: long-term memory for LLM agents with measured quality, cost and latency.",
                  no_args_is_help=True, add_completion=False)
# Logs and CI are not terminals: render tables wide there rather than cutting numbers.
console = Console(width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True)

LLM_HELP = "'local' (embedded Gemma 3 270M, no network) or 'openai:MODEL' for any OpenAI-compatible server."
TIERINGS = ("implementation", "reasoning", "capacity")
TIER_NAMES = ("low", "mid", "high")
MEMORYCPT_ABLATIONS = ("none", "no_qad", "no_qar", "no_fs")

train_app = typer.Typer(help="Train learned components: the BudgetMem tier router, MemoryCPT's LoRA-A (qad) and LoRA-B (qar), the MemPilot orchestrator.", no_args_is_help=True)
sweep_app = typer.Typer(help="Sweeps of a strategy's settings, ending in tables and frontier plots.", no_args_is_help=True)
app.add_typer(train_app, name="train")
app.add_typer(sweep_app, name="sweep")


# Options shared by several commands (one definition, one help text).
OPT_LLM = typer.Option("local", help=LLM_HELP)
OPT_BASE_URL = typer.Option(None, help="Base URL of the OpenAI-compatible server (with --llm openai:MODEL).")
OPT_JUDGE_LLM = typer.Option(None, help="Judge model (default: the answer model). " + LLM_HELP)
OPT_DATA_ROOT = typer.Option(None, envvar="MEMFRONTIER_DATA", help="Benchmark data root (default ../shared/data).")
OPT_SEED = typer.Option(42, help="Seed for the question slice.")
OPT_CONCURRENCY = typer.Option(1, min=1, help="Questions in flight at once (the embedded model runs one at a time).")
OPT_PRICE_BOOK = typer.Option(None, help="A price-book YAML (default: the packaged one).")
OPT_ALLOW_UNPRICED = typer.Option(False, help="Record calls to models missing from the price book as unpriced instead of failing.")
OPT_PRICE_AS = typer.Option(None, help="Price every call as this price-book model (e.g. qwen3-14b) to read a local run in hosted dollars.")
OPT_DATASET = typer.Option("locomo", help="locomo | longmemeval | hotpotqa | mem_gallery")
OPT_SPLIT = typer.Option("test", help="locomo: test (conv-49, conv-50, cat 1-4) | train | all; mem_gallery: test | train | val (70/10/20 by conversation, seed 13, no answer-refusal) | all; others: all")


def _fail(msg: str, code: int = 2):
    err.print(f"[red]error:[/red] {msg}")
    raise typer.Exit(code)


def _known_errors():
    from .answerer import BudgetExceededError
    from .core.pricebook import UnpricedModelError
    from .eval.datasets import DatasetError
    from .eval.runner import RunMismatchError
    from .llm.base import LLMError
    from .store.base import StoreError

    return (BudgetExceededError, UnpricedModelError, DatasetError, RunMismatchError, LLMError, StoreError, FileNotFoundError, ValueError)


def _check_router(path: Path) -> None:
    """Fail (exit 2) before any work when ``path`` is not a readable tier-router checkpoint."""
    from .strategies.budgetmem.router import RouterCheckpointError, TierRouter

    try:
        TierRouter.load(path)  # the CLI always embeds with MiniLM (384-d)
    except (FileNotFoundError, RouterCheckpointError) as e:
        _fail(str(e))


def _memorycpt_options(strategy: str, *, episodic_k=None, semantic_k=None, ablation=None, construction_llm=None,
                       summarizer_llm=None, summarizer_adapter=None) -> dict:
    """MemoryCPT's constructor options from the eval/sweep flags; flags given to another strategy fail."""
    opts = {"episodic_k": episodic_k, "semantic_k": semantic_k, "ablation": ablation,
            "construction_llm": construction_llm, "summarizer_llm": summarizer_llm,
            "summarizer_adapter": None if summarizer_adapter is None else str(summarizer_adapter)}
    opts = {name: v for name, v in opts.items() if v is not None}
    if opts and strategy != "memorycpt":
        _fail(f"{', '.join('--' + n.replace('_', '-') for n in opts)} apply to --strategy memorycpt only")
    if ablation is not None and ablation.replace("-", "_") not in MEMORYCPT_ABLATIONS:
        _fail(f"unknown --ablation {ablation!r}; choose {', '.join(a.replace('_', '-') for a in MEMORYCPT_ABLATIONS)}")
    if "ablation" in opts:
        opts["ablation"] = ablation.replace("-", "_")
    if summarizer_adapter is not None and not (Path(summarizer_adapter) / "adapter_config.json").is_file():
        _fail(f"--summarizer-adapter {summarizer_adapter} is not a LoRA adapter directory (no adapter_config.json); "
              "train one with `memfrontier train qar`")
    return opts


def _strategy_options(strategy: str, *, k, router, lam, tiering, tiers, module_topk) -> dict:
    """Constructor options of the strategy from the eval flags; flags that do not apply fail."""
    budgetmem = {"--router": router, "--lambda": lam, "--tiering": tiering, "--tiers": tiers, "--module-topk": module_topk}
    given = [flag for flag, v in budgetmem.items() if v is not None]
    if given and strategy != "budgetmem":
        _fail(f"{', '.join(given)} apply to --strategy budgetmem only")
    if k is not None and strategy not in ("rag", "budgetmem"):
        _fail("--k applies to --strategy rag or budgetmem only")
    if tiering is not None and tiering not in TIERINGS:
        _fail(f"unknown --tiering {tiering!r}; choose {', '.join(TIERINGS)}")
    if tiers is not None and tiers not in TIER_NAMES:
        _fail(f"unknown --tiers {tiers!r}; choose {', '.join(TIER_NAMES)}")
    if router is not None:
        if tiers is not None:
            _fail("give --router or --tiers, not both")
        _check_router(router)
    opts = {"k": k, "router": None if router is None else str(router), "lam": lam, "tiering": tiering,
            "tiers": tiers, "module_topk": module_topk}
    return {name: v for name, v in opts.items() if v is not None}


def _automem_options(strategy: str, *, single_pass: bool) -> dict:
    """automem constructor options from the eval flags (``--single-pass``)."""
    if single_pass and strategy != "automem":
        _fail("--single-pass applies to --strategy automem only")
    return {"single_pass": True} if single_pass else {}


def _mempilot_options(strategy: str, *, preference, pool, answer_mode, adapter, bank_file, max_usd, max_proxy_s) -> dict:
    """mempilot constructor options from the eval flags; they fail for other strategies."""
    flags = {"--preference": preference, "--pool": pool, "--answer-mode": answer_mode, "--adapter": adapter,
             "--bank-file": bank_file, "--max-usd": max_usd, "--max-proxy-s": max_proxy_s}
    given = [f for f, v in flags.items() if v is not None]
    if given and strategy != "mempilot":
        _fail(f"{', '.join(given)} apply to --strategy mempilot only")
    if strategy != "mempilot":
        return {}
    from .strategies.mempilot import ANSWER_MODES, as_preference

    try:
        pref = _parse_preference(preference) if preference is not None else None
        as_preference(pref)
    except ValueError as e:
        _fail(str(e))
    if answer_mode is not None and answer_mode not in ANSWER_MODES:
        _fail(f"unknown --answer-mode {answer_mode!r}; choose {' or '.join(ANSWER_MODES)}")
    for flag, path in (("--adapter", adapter), ("--bank-file", bank_file)):
        if path is not None and not Path(path).exists():
            _fail(f"{flag} {path} does not exist")
    budget = {k: v for k, v in (("max_usd", max_usd), ("max_proxy_s", max_proxy_s)) if v is not None}
    opts = {"preference": pref, "pool": pool, "answer_mode": answer_mode,
            "adapter": None if adapter is None else str(adapter),
            "bank_file": None if bank_file is None else str(bank_file), "bank": "imported" if bank_file else None,
            "budget": budget or None}
    return {k: v for k, v in opts.items() if v is not None}


def _parse_preference(text: str):
    """A preset name (perf | balanced | cost) or explicit weights 'Q,C,L' (e.g. '1,0.25,0.5')."""
    if "," not in text:
        return text
    vals = _float_list("--preference", text)
    if len(vals) != 3:
        _fail(f"--preference weights must be three numbers Q,C,L; got {text!r}")
    return {"quality": vals[0], "cost": vals[1], "latency": vals[2]}


def _float_list(flag: str, text: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        _fail(f"{flag} must be comma-separated numbers, got {text!r}")
    if not values or any(v < 0 for v in values):
        _fail(f"{flag} needs at least one value, all >= 0; got {text!r}")
    return values


def _question_bar():
    return Progress(TextColumn("[progress.description]{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), TimeRemainingColumn(), console=err, transient=False)


@app.command("eval")
def eval_cmd(
    dataset: str = OPT_DATASET,
    split: str = OPT_SPLIT,
    strategy: str = typer.Option("rag", help="longctx | rag | oracle | budgetmem | memorycpt | automem | mempilot"),
    limit: Optional[int] = typer.Option(None, min=1, help="Answer a category-balanced slice of this many questions (seeded). Default: all."),
    llm: str = OPT_LLM,
    base_url: Optional[str] = OPT_BASE_URL,
    judge: bool = typer.Option(False, "--judge/--no-judge", help="Also grade answers with the LLM judge."),
    judge_llm: Optional[str] = OPT_JUDGE_LLM,
    k: Optional[int] = typer.Option(None, min=1, help="rag / budgetmem: chunks to retrieve (default 8 / 5)."),
    router: Optional[Path] = typer.Option(None, help="budgetmem: a trained tier-router checkpoint (e.g. router_best.pt from `train router`); it picks each module's tier per question."),
    lam: Optional[float] = typer.Option(None, "--lambda", min=0, help="budgetmem: the cost weight lambda the router was trained with (recorded with the run)."),
    tiering: Optional[str] = typer.Option(None, help="budgetmem: how tiers are realised: implementation (default) | reasoning | capacity."),
    tiers: Optional[str] = typer.Option(None, help="budgetmem without --router: one fixed tier for every module: low | mid | high (default mid)."),
    module_topk: Optional[int] = typer.Option(None, min=1, help="budgetmem: chunks the filter module keeps (default 5)."),
    episodic_k: Optional[int] = typer.Option(None, min=0, help="memorycpt: episodes RRF keeps (default 20)."),
    semantic_k: Optional[int] = typer.Option(None, min=0, help="memorycpt: facts RRF keeps (default 50)."),
    ablation: Optional[str] = typer.Option(None, help="memorycpt: none | no-qad (build with the base model) | no-qar (plain dense top-k, no summary) | no-fs (RRF candidates, no summary)."),
    construction_llm: Optional[str] = typer.Option(None, help="memorycpt: the QAD model, e.g. 'hf:runs/qad/merged' (the merged LoRA-A from `train qad`). Default: --llm."),
    summarizer_llm: Optional[str] = typer.Option(None, help="memorycpt: the Fine Summary model, e.g. 'hf' or 'hf:runs/qad/merged'. Default: --llm ('hf' with --summarizer-adapter)."),
    summarizer_adapter: Optional[Path] = typer.Option(None, help="memorycpt: a LoRA-B adapter directory from `train qar`."),
    single_pass: bool = typer.Option(False, "--single-pass", help="automem: the single-pass variant (one plan of parallel tool calls, no judge, no dump)."),
    preference: Optional[str] = typer.Option(None, help="mempilot: perf | balanced | cost, or weights 'Q,C,L' (default perf)."),
    pool: Optional[str] = typer.Option(None, help="mempilot: model pool: local (every route served by the embedded model, a stand-in; default) | table3 (OpenRouter) | a pool YAML."),
    answer_mode: Optional[str] = typer.Option(None, help="mempilot: decoupled (the answerer reads question + evidence; default) | policy (the policy's answer first)."),
    adapter: Optional[Path] = typer.Option(None, help="mempilot: a LoRA adapter from `train orchestrator` (the policy then runs in transformers)."),
    bank_file: Optional[Path] = typer.Option(None, help="mempilot: import this JSONL as the memory bank instead of compressing the chunks."),
    max_usd: Optional[float] = typer.Option(None, min=0, help="mempilot: hard USD cap per question; curation ends once reached."),
    max_proxy_s: Optional[float] = typer.Option(None, min=0, help="mempilot: hard latency-proxy cap (s) per question; curation ends once reached."),
    out: Path = typer.Option(Path("runs/latest"), help="Output directory: predictions.jsonl, summary.json, store/."),
    store: Optional[Path] = typer.Option(None, help="Store directory to reuse across runs (default OUT/store)."),
    data_root: Optional[Path] = OPT_DATA_ROOT,
    seed: int = OPT_SEED,
    concurrency: int = OPT_CONCURRENCY,
    price_book: Optional[Path] = OPT_PRICE_BOOK,
    allow_unpriced: bool = OPT_ALLOW_UNPRICED,
    price_as: Optional[str] = OPT_PRICE_AS,
):
    """Run the evaluation protocol and print the per-category table. Interrupted runs resume from OUT."""
    from .eval.reports.summary import construction_table, summary_table
    from .eval.runner import EvalConfig, run_eval

    opts = _strategy_options(strategy, k=k, router=router, lam=lam, tiering=tiering, tiers=tiers, module_topk=module_topk)
    opts |= _memorycpt_options(strategy, episodic_k=episodic_k, semantic_k=semantic_k, ablation=ablation,
                               construction_llm=construction_llm, summarizer_llm=summarizer_llm,
                               summarizer_adapter=summarizer_adapter)
    opts |= _automem_options(strategy, single_pass=single_pass)
    opts |= _mempilot_options(strategy, preference=preference, pool=pool, answer_mode=answer_mode, adapter=adapter,
                              bank_file=bank_file, max_usd=max_usd, max_proxy_s=max_proxy_s)
    cfg = EvalConfig(dataset=dataset, split=split, strategy=strategy, strategy_options=opts, limit=limit, llm=llm,
                     base_url=base_url, judge=judge, judge_llm=judge_llm, out=out, store=store, data_root=data_root,
                     seed=seed, concurrency=concurrency, price_book=price_book, allow_unpriced=allow_unpriced,
                     price_as=price_as)
    with _question_bar() as bar:
        task = bar.add_task("loading", total=None)
        f1s: list[float] = []

        def on_progress(event, **info):
            if event == "start":
                bar.update(task, total=info["total"], completed=info["done"], description="ingesting")
            elif event == "build":
                bar.update(task, description=f"building memories of {info['conversation']} (offline, once per store)")
            elif event == "ingest":
                bar.update(task, description=f"ingested {info['conversation']} (+{info['added']} records)")
            elif event == "question":
                f1s.append(info["row"]["f1"])
                bar.update(task, advance=1, description=f"answering · mean F1 {sum(f1s) / len(f1s):.3f}")

        try:
            summary = asyncio.run(run_eval(cfg, on_progress=on_progress))
        except _known_errors() as e:
            bar.stop()
            _fail(str(e))
    console.print(summary_table(summary))
    if any(c.get("calls") for c in summary.get("construction", {}).values()):
        console.print(construction_table(summary))
    if summary.get("choices", {}).get("tiers"):
        console.print(tier_table(summary["choices"]["tiers"]))
    if strategy == "mempilot":
        from .eval.reports.mempilot import read_rows, run_stats, stats_table

        console.print(stats_table(run_stats(read_rows(out / "predictions.jsonl"))))
    if strategy == "automem":
        from .eval.reports.automem import automem_table

        console.print(automem_table(out / "predictions.jsonl"))
    console.print(f"wrote {out / 'predictions.jsonl'} and {out / 'summary.json'}")


def tier_table(ratios: dict, title: str = "tier selection ratio per module"):
    from rich.table import Table

    t = Table(title=title)
    t.add_column("module")
    for tier in TIER_NAMES:
        t.add_column(tier, justify="right")
    for module, r in ratios.items():
        t.add_row(module, *(f"{r.get(tier, 0.0):.2f}" for tier in TIER_NAMES))
    return t


@train_app.command("qad")
def train_qad_cmd(
    data: Path = typer.Option(Path("runs/sft"), help="Folder of per-role ShareGPT JSONL from `export sft` (or one .jsonl file)."),
    out: Path = typer.Option(Path("runs/qad"), help="Output: adapter/, merged/ (serve with --construction-llm hf:OUT/merged), train_log.jsonl."),
    base: Optional[str] = typer.Option(None, help="Base checkpoint directory (default: the packaged Gemma 3 270M, loaded from its GGUF)."),
    rank: int = typer.Option(16, min=1, help="LoRA rank (MemoryCPT: 16)."),
    lora_alpha: float = typer.Option(32, help="LoRA alpha (MemoryCPT: 32)."),
    dropout: float = typer.Option(0.05, min=0, max=1, help="LoRA dropout (MemoryCPT: 0.05)."),
    lr: float = typer.Option(1e-4, help="Learning rate (MemoryCPT: 1e-4)."),
    cutoff_tokens: int = typer.Option(8192, min=16, help="Longer samples are dropped and counted (MemoryCPT: 8192)."),
    epochs: float = typer.Option(1.0, help="Epochs over the training split."),
    max_steps: Optional[int] = typer.Option(None, min=1, help="Stop after this many optimizer steps (smoke runs)."),
    val_fraction: float = typer.Option(0.1, min=0, max=0.9, help="Held-out share; the best validation-loss checkpoint is kept."),
    seed: int = OPT_SEED,
):
    """LoRA-A: distil the construction roles (SFT on teacher traces, MemoryCPT QAD), then merge it."""
    from .train.lora_sft import SFTDataError, train_lora_sft

    files = sorted(data.glob("*.jsonl")) if data.is_dir() else [data]
    if not files or not all(f.is_file() for f in files):
        _fail(f"no SFT data at {data}; write it with `memfrontier export sft --store STORE --out {data}`")
    err.print(f"training LoRA-A on {len(files)} file(s): {', '.join(f.name for f in files)}")
    try:
        res = train_lora_sft(files, out, base=base, rank=rank, alpha=lora_alpha, dropout=dropout, lr=lr,
                             cutoff_tokens=cutoff_tokens, epochs=epochs, max_steps=max_steps,
                             val_fraction=val_fraction, seed=seed,
                             on_progress=lambda event, **info: err.print(f"[dim]{event}[/dim] {info}"))
    except (SFTDataError, *_known_errors()) as e:
        _fail(str(e))
    console.print(f"{res.steps} steps on {res.n_train} samples ({res.n_val} validation, {res.n_too_long} too long) "
                  f"in {res.seconds:.0f}s; best validation loss {res.best_val_loss}")
    console.print(f"adapter: {res.adapter_dir}  merged: {res.merged_dir}  log: {res.train_log}")


@train_app.command("qar")
def train_qar_cmd(
    alpha: float = typer.Option(0.8, min=0, max=1, help="Reward weight of F1 against cost (MemoryCPT Eq. 16; paper: 0.8)."),
    out: Optional[Path] = typer.Option(None, help="Output (default runs/qar/alpha_<A>): adapter/, train_log.jsonl, reward_curve.png, qar_summary.json."),
    store: Path = typer.Option(Path("runs/qar/store"), help="Store for the training conversations' memories (reused across runs)."),
    dataset: str = OPT_DATASET,
    split: str = typer.Option("train", help="locomo: train (the eight non-test conversations) | all"),
    sessions: int = typer.Option(2, min=0, help="Sessions built per conversation (0 = all; construction with the embedded model takes ~30 s per session)."),
    questions: int = typer.Option(16, min=1, help="Training states (questions answerable from the built sessions)."),
    base: Optional[str] = typer.Option(None, help="Policy base checkpoint (default the packaged base; e.g. runs/qad/merged for base_A)."),
    construction_llm: Optional[str] = typer.Option(None, help="The QAD model that builds the memories (e.g. 'hf:runs/qad/merged'); default --llm."),
    llm: str = OPT_LLM,
    base_url: Optional[str] = OPT_BASE_URL,
    max_steps: int = typer.Option(4, min=1, help="GRPO steps (one question x --num-generations summaries each)."),
    num_generations: int = typer.Option(4, min=2, help="Summaries sampled per question (the GRPO group)."),
    beta: float = typer.Option(0.04, min=0, help="KL weight against the frozen base (Eq. 13)."),
    lr: float = typer.Option(1e-5, help="Learning rate."),
    max_summary_tokens: int = typer.Option(64, min=4, help="Longest sampled summary."),
    data_root: Optional[Path] = OPT_DATA_ROOT,
    seed: int = OPT_SEED,
    price_book: Optional[Path] = OPT_PRICE_BOOK,
):
    """LoRA-B: GRPO-train the query-aware summarizer with the cost-aware reward (MemoryCPT QAR)."""
    from .api import AsyncMemory
    from .eval.datasets import load_dataset
    from .eval.sweeps.memorycpt import alpha_dir_name
    from .train.qar import train_qar

    out = out or Path("runs/qar") / alpha_dir_name(alpha)
    try:
        convs = load_dataset(dataset, split, data_root=data_root)
        mem = AsyncMemory.open(store, llm=llm, base_url=base_url, price_book=price_book)
    except _known_errors() as e:
        _fail(str(e))

    def on_progress(event, **info):
        err.print(f"[dim]{event}[/dim] " + " ".join(f"{k}={v}" for k, v in info.items()))

    try:
        summary = train_qar(mem, convs=convs, out=out, dataset=dataset, sessions=sessions, max_questions=questions,
                            alpha=alpha, base=base, construction_llm=construction_llm, max_steps=max_steps,
                            num_generations=num_generations, beta=beta, lr=lr,
                            max_completion_tokens=max_summary_tokens, seed=seed, on_progress=on_progress)
    except _known_errors() as e:
        _fail(str(e))
    finally:
        mem.close()
    res = summary["result"]
    for s in summary["steps"]:
        console.print(f"step {s['step']}: reward {s['reward_mean']:.3f}  F1 {s['f1_mean']:.3f}  "
                      f"summary tokens {s['summary_tokens_mean']:.1f}")
    console.print(f"{res['steps']} steps on {summary['pool_size']} states; LoRA change ||Δφ||₂ = {res['lora_delta_l2']:.4g}")
    console.print(f"adapter: {res['adapter_dir']} (use: eval --strategy memorycpt --summarizer-adapter {res['adapter_dir']})")


@train_app.command("orchestrator")
def train_orchestrator_cmd(
    preference: str = typer.Option("balanced", help="perf | balanced | cost, or weights 'Q,C,L' (MemPilot Eq. 10)."),
    dataset: str = OPT_DATASET,
    split: str = typer.Option("train", help="locomo: train | all; mem_gallery: train (70/10/20, seed 13) | val | all."),
    conversation: Optional[list[str]] = typer.Option(None, help="Train on these conversations (repeatable; default the split's first)."),
    sessions: int = typer.Option(2, min=0, help="Sessions ingested per conversation (0 = all); questions need their evidence inside."),
    steps: int = typer.Option(1, min=1, help="Optimizer steps (one batch of questions x --group-size rollouts each)."),
    questions_per_step: int = typer.Option(1, min=1, help="Queries per step."),
    group_size: int = typer.Option(4, min=2, help="Rollouts per query, G (Table 5: 4)."),
    max_rounds: int = typer.Option(3, min=1, help="Policy turns per rollout (Table 5: 6; smaller at CPU smoke scale)."),
    temperature: float = typer.Option(1.0, min=0.01, help="Rollout temperature (Table 5: 1.0)."),
    lr: float = typer.Option(1e-6, min=0, help="AdamW learning rate (Table 5: 1e-6)."),
    beta: float = typer.Option(0.001, min=0, help="KL-loss coefficient (Table 5: 0.001)."),
    clip: float = typer.Option(0.2, min=0.0001, help="GRPO clipping epsilon (Table 5: 0.2)."),
    eta: float = typer.Option(0.5, min=0, help="Marginal-utility weight (Eq. 13; Table 5: 0.5)."),
    out: Optional[Path] = typer.Option(None, help="Output (default runs/mempilot/orchestrator/<preference>): adapter/, train_log.jsonl, train_summary.json."),
    store: Optional[Path] = typer.Option(None, help="Store for the training conversations (default OUT/store)."),
    data_root: Optional[Path] = OPT_DATA_ROOT,
    seed: int = typer.Option(13, help="Seed of the question order, sampling and LoRA init."),
):
    """GRPO for the MemPilot policy (decoupled advantages, marginal utility); saves a LoRA adapter."""
    from pydantic import ValidationError

    from .train.mempilot_trainer import OrchestratorTrainConfig, train_orchestrator

    pref = _parse_preference(preference)
    name = pref if isinstance(pref, str) else "w_" + "_".join(f"{v:g}" for v in pref.values())
    out = out or Path("runs/mempilot/orchestrator") / name
    try:
        from .strategies.mempilot import as_preference

        as_preference(pref)
        cfg = OrchestratorTrainConfig(dataset=dataset, split=split, preference=pref, conversations=conversation or None,
                                      sessions=sessions or None, steps=steps, questions_per_step=questions_per_step,
                                      group_size=group_size, max_rounds=max_rounds, temperature=temperature, lr=lr,
                                      beta=beta, clip=clip, eta=eta, out=out, store=store, data_root=data_root, seed=seed)
    except (ValidationError, ValueError) as e:
        _fail(str(e))

    def on_progress(event, **info):
        if event == "step":
            r = info["row"]
            console.print(f"step {r['step']}: {r['rollouts']} rollouts · valid {r['valid_share']:.2f} · Q {r['quality_mean']:.3f} · "
                          f"r_task {r['task_reward_mean']:.3f} · USD {r['usd_mean']:.2e} · proxy {r['proxy_s_mean']:.2f}s · "
                          f"loss {r['loss']:.4f} · KL {r['kl']:.2e} · ||Δφ|| {r['lora_delta_l2']:.3g} · {r['seconds']:.0f}s")
        else:
            err.print(f"[dim]{event}[/dim] " + " ".join(f"{k}={v}" for k, v in info.items()))

    try:
        summary = asyncio.run(train_orchestrator(cfg, on_progress=on_progress))
    except _known_errors() as e:
        _fail(str(e))
    console.print(f"adapter: {summary['adapter_dir']} (use: eval --strategy mempilot --adapter {summary['adapter_dir']}); "
                  f"LoRA change ||Δφ||₂ = {summary['lora_delta_l2']:.4g}; {summary['seconds']:.0f}s")


@train_app.command("router")
def train_router_cmd(
    tiering: str = typer.Option("implementation", help="How tiers are realised: implementation (Low rules, Mid MiniLM, High the LLM) | reasoning | capacity."),
    lam: float = typer.Option(0.3, "--lambda", min=0, help="Cost weight lambda of the reward r = r_task + lambda * alpha * r_cost (BudgetMem Eq. 7)."),
    reward: str = typer.Option("f1", help="Task reward r_task: f1 (LoCoMo F1) | judge (LLM judge, 0/1)."),
    align: bool = typer.Option(True, "--align/--no-align", help="Reward-scale alignment alpha = std(r_task)/std(r_cost) (Eq. 10); --no-align sets alpha = 1."),
    updates: int = typer.Option(20, min=1, help="PPO updates (one batch of questions each)."),
    batch_questions: int = typer.Option(32, min=1, help="Questions (episodes) per update."),
    epochs: int = typer.Option(4, min=1, help="PPO epochs over each batch."),
    lr: float = typer.Option(3e-4, min=0, help="Adam learning rate."),
    train_questions: Optional[int] = typer.Option(None, min=1, help="Training questions drawn (stratified by category, seeded) from the pool left after validation. Default: all."),
    val_questions: int = typer.Option(32, min=1, help="Validation questions held out from the training pool (stratified); they pick router_best.pt."),
    conversation: Optional[list[str]] = typer.Option(None, help="Only these training-pool conversations (repeatable; default all eight)."),
    k: int = typer.Option(5, min=1, help="Chunks retrieved per question."),
    module_topk: int = typer.Option(5, min=1, help="Chunks the filter module keeps."),
    max_relations: int = typer.Option(10, min=1, help="Relations per extraction module at most."),
    seed: int = typer.Option(42, help="Seed of the split, the batch order, the router init and tier sampling."),
    out: Optional[Path] = typer.Option(None, help="Output directory (default runs/budgetmem/routers/lambda_<L>): router_best.pt, router_last.pt, train_log.jsonl, reward_curve.png, train_summary.json."),
    store: Optional[Path] = typer.Option(None, help="Store directory for the training conversations, reused across runs (default: OUT/../store)."),
    cache: Optional[Path] = typer.Option(None, help="Module/answer cache file, reused across runs and lambdas (default: OUT/../module_cache.json)."),
    llm: str = OPT_LLM,
    base_url: Optional[str] = OPT_BASE_URL,
    judge_llm: Optional[str] = typer.Option(None, help="With --reward judge: the judge model (default: the answer model). " + LLM_HELP),
    data_root: Optional[Path] = OPT_DATA_ROOT,
    price_book: Optional[Path] = OPT_PRICE_BOOK,
    allow_unpriced: bool = OPT_ALLOW_UNPRICED,
):
    """Train the BudgetMem tier router with PPO on the LoCoMo training pool; logs the reward curve."""
    from pydantic import ValidationError

    from .train.budgetmem_trainer import TrainConfig, router_dir_name, train_router

    if reward not in ("f1", "judge"):
        _fail(f"unknown --reward {reward!r}; choose f1 or judge")
    if tiering not in TIERINGS:
        _fail(f"unknown --tiering {tiering!r}; choose {', '.join(TIERINGS)}")
    out = out or Path("runs/budgetmem/routers") / router_dir_name(lam)
    try:
        cfg = TrainConfig(tiering=tiering, lam=lam, reward=reward, align=align, updates=updates,
                          batch_questions=batch_questions, epochs=epochs, lr=lr, train_questions=train_questions,
                          val_questions=val_questions, conversations=conversation or None, k=k, module_topk=module_topk,
                          max_relations=max_relations, seed=seed, out=out, store=store, cache=cache, llm=llm,
                          base_url=base_url, judge_llm=judge_llm, data_root=data_root, price_book=price_book,
                          allow_unpriced=allow_unpriced)
    except ValidationError as e:
        _fail(str(e))
    with _question_bar() as bar:
        task = bar.add_task("loading", total=None)

        def on_progress(event, **info):
            if event == "start":
                bar.update(task, total=info["updates"] * info["questions_per_update"], completed=0,
                           description=f"ingesting ({info['train']} train / {info['val']} val questions)")
            elif event == "ingest":
                bar.update(task, description=f"ingested {info['conversation']} (+{info['added']} records)")
            elif event == "question":
                bar.advance(task)
            elif event == "update":
                r = info["row"]
                bar.update(task, description=f"update {r['update']}/{cfg.updates} · reward {r['mean_reward']:.3f} · "
                                             f"val {r['val_reward']:.3f}")

        try:
            summary = asyncio.run(train_router(cfg, on_progress=on_progress))
        except _known_errors() as e:
            bar.stop()
            _fail(str(e))
    console.print(_train_table(cfg.out / "train_log.jsonl"))
    console.print(tier_table(summary["final"]["val_tier_ratios"], title="validation tier selection ratio (last update, greedy)"))
    console.print(f"best update {summary['best_update']} (val reward {summary['best_val_reward']:.4f}); "
                  f"module cache {summary['module_cache']['hits']} hits / {summary['module_cache']['misses']} misses; "
                  f"{summary['llm_calls']} model calls")
    console.print(f"wrote {cfg.out / 'router_best.pt'}, {cfg.out / 'router_last.pt'}, {cfg.out / 'train_log.jsonl'}, "
                  f"{cfg.out / 'reward_curve.png'}")


def _train_table(log_path: Path):
    from rich.table import Table

    cols = [("update", "update", 0), ("reward", "mean_reward", 4), ("±", "std_reward", 4), ("r_task", "r_task", 4),
            ("r_cost", "r_cost", 4), ("alpha", "alpha", 3), ("val reward", "val_reward", 4), ("val F1", "val_f1", 4),
            ("val USD×1e4/q", "val_extraction_usd_per_question", 4), ("q/s", "train_questions_per_s", 2)]
    t = Table(title=f"router training ({log_path})")
    for name, _key, _d in cols:
        t.add_column(name, justify="right")
    for line in log_path.read_text("utf-8").splitlines():
        r = json.loads(line)
        cells = []
        for _name, key, d in cols:
            v = r.get(key)
            if key == "val_extraction_usd_per_question" and v is not None:
                v *= 1e4
            cells.append("-" if v is None else (str(v) if d == 0 else f"{v:.{d}f}"))
        t.add_row(*cells)
    return t


def _run_sweep_with_progress(base, runs) -> list[dict]:
    """Run a sweep's points (:func:`memfrontier.eval.sweeps.base.run_sweep`) under one progress bar."""
    from .eval.sweeps.base import run_sweep

    with _question_bar() as bar:
        task = bar.add_task("loading", total=None)

        def on_progress(event, **info):
            if event == "run":
                bar.update(task, description=f"{info['run']}: starting", total=None, completed=0)
            elif event == "build":
                bar.update(task, description=f"{info['run']}: building memories of {info['conversation']}")
            elif event == "start":
                bar.update(task, total=info["total"], completed=info["done"], description=f"{info['run']}: ingesting")
            elif event == "question":
                bar.update(task, advance=1, description=f"{info['run']}: answering")

        try:
            return asyncio.run(run_sweep(base, runs, on_progress=on_progress))
        except _known_errors() as e:
            bar.stop()
            _fail(str(e))


def _print_sweep(title: str, rows: list[dict], cols: tuple[str, ...], written: dict) -> None:
    from rich.table import Table

    t = Table(title=title)
    for c in cols:
        t.add_column(c, justify="left" if c in ("run", "kind", "label") else "right")
    for row in rows:
        t.add_row(*("-" if row[c] is None else (f"{row[c]:.4f}" if isinstance(row[c], float) else str(row[c])) for c in cols))
    console.print(t)
    console.print("wrote " + ", ".join(str(p) for p in written.values()))


@sweep_app.command("budgetmem")
def sweep_budgetmem(
    lambdas: str = typer.Option("0,0.1,0.3,0.5,0.9", help="Comma-separated lambdas; each uses ROUTER_DIR/lambda_<L>/router_best.pt (skipped, and reported, when missing)."),
    ks: str = typer.Option("1,3,5,8,10", help="Comma-separated retrieval sizes K for the K sweep (empty: no K sweep)."),
    router_dir: Path = typer.Option(Path("runs/budgetmem/routers"), help="Folder of routers trained by `train router` (one lambda_<L>/ per lambda)."),
    k_router: Optional[Path] = typer.Option(None, help="K sweep with this router checkpoint instead of all-Mid fixed tiers."),
    k: int = typer.Option(5, min=1, help="K of the lambda runs and the fixed-tier baselines."),
    module_topk: Optional[int] = typer.Option(None, min=1, help="Chunks the filter module keeps (default 5)."),
    tiering: Optional[str] = typer.Option(None, help="implementation (default) | reasoning | capacity; must match the routers' training."),
    dataset: str = OPT_DATASET,
    split: str = OPT_SPLIT,
    limit: Optional[int] = typer.Option(None, min=1, help="Category-balanced slice of this many questions (seeded) per run. Default: all."),
    llm: str = OPT_LLM,
    base_url: Optional[str] = OPT_BASE_URL,
    judge: bool = typer.Option(False, "--judge/--no-judge", help="Also grade answers with the LLM judge (a judge panel on the Pareto plot)."),
    judge_llm: Optional[str] = OPT_JUDGE_LLM,
    out: Path = typer.Option(Path("runs/budgetmem/sweep"), help="Sweep directory: one sub-folder per run, sweep.csv, sweep.md, pareto.png, tier_ratios.png, k_sweep.png."),
    store: Optional[Path] = typer.Option(None, help="Store directory shared by every run (default OUT/store)."),
    data_root: Optional[Path] = OPT_DATA_ROOT,
    seed: int = OPT_SEED,
    concurrency: int = OPT_CONCURRENCY,
    price_book: Optional[Path] = OPT_PRICE_BOOK,
    allow_unpriced: bool = OPT_ALLOW_UNPRICED,
    price_as: Optional[str] = OPT_PRICE_AS,
):
    """BudgetMem sweep: routers over lambda, fixed-tier baselines (all low/mid/high) and K; resumable."""
    from .eval.runner import EvalConfig
    from .eval.sweeps.base import plan_budgetmem_sweep, table_row, write_sweep_report

    lams = _float_list("--lambdas", lambdas)
    kvals = [int(v) for v in _float_list("--ks", ks)] if ks.strip() else []
    if any(v < 1 for v in kvals):
        _fail(f"--ks must be positive integers, got {ks!r}")
    if tiering is not None and tiering not in TIERINGS:
        _fail(f"unknown --tiering {tiering!r}; choose {', '.join(TIERINGS)}")
    if k_router is not None:
        _check_router(k_router)
    options = {name: v for name, v in (("module_topk", module_topk), ("tiering", tiering)) if v is not None}
    runs, missing = plan_budgetmem_sweep(lams, kvals, router_dir=router_dir, k=k, k_router=k_router, options=options)
    for p in missing:
        err.print(f"[yellow]skipped:[/yellow] no router checkpoint {p} (train one with `memfrontier train router --lambda ...`)")
    for r in runs:
        if "router" in r.options:
            _check_router(Path(r.options["router"]))
    base = EvalConfig(dataset=dataset, split=split, strategy="budgetmem", limit=limit, llm=llm, base_url=base_url,
                      judge=judge, judge_llm=judge_llm, out=out, store=store, data_root=data_root, seed=seed,
                      concurrency=concurrency, price_book=price_book, allow_unpriced=allow_unpriced, price_as=price_as)
    results = _run_sweep_with_progress(base, runs)
    written = write_sweep_report(results, out, missing)
    _print_sweep(f"BudgetMem sweep ({len(results)} runs)", [table_row(r) for r in results],
                 ("run", "n", "f1", "judge", "usd_x1e4", "qpc"), written)


export_app = typer.Typer(help="Export training data (teacher traces as SFT data).", no_args_is_help=True)
app.add_typer(export_app, name="export")


@export_app.command("sft")
def export_sft_cmd(
    store: Path = typer.Option(..., help="A store directory whose MemoryCPT memories were built (e.g. runs/demo/store)."),
    out: Path = typer.Option(Path("runs/sft"), help="Output directory: one ShareGPT JSONL per construction role."),
    bank: Optional[str] = typer.Option(None, help="Only this bank (file name under STORE/banks without .db); default every memorycpt-* bank."),
    include_rejected: bool = typer.Option(False, help="Also export outputs the validator rejected (not recommended as SFT targets)."),
):
    """Teacher traces of MemoryCPT construction -> per-role ShareGPT JSONL for `train qad` (LoRA-A)."""
    from .embed.minilm import MiniLMEmbedder
    from .train.sft_export import export_sft

    root = _existing_store(store) / "banks"
    files = [root / f"{bank}.db"] if bank else sorted(root.glob("memorycpt-*.db"))
    if not files or not all(f.is_file() for f in files):
        _fail(f"no MemoryCPT memory bank under {root}; build one with `memfrontier eval --strategy memorycpt --store {store}`")
    counts = export_sft(files, out, MiniLMEmbedder(), include_rejected=include_rejected)
    if not counts:
        _fail(f"the banks in {root} hold no traces{'' if include_rejected else ' of accepted operations'}")
    for role, n in sorted(counts.items()):
        console.print(f"{role}: {n} samples -> {out / (role + '.jsonl')}")


@sweep_app.command("mempilot")
def sweep_mempilot(
    preferences: str = typer.Option("perf,balanced,cost", help="Presets and/or weights 'Q:C:L' (e.g. 'perf,balanced,cost,1:2:1'), comma-separated."),
    adapters: Optional[Path] = typer.Option(None, help="Folder with <preference>/adapter from `train orchestrator` (missing: the untrained policy)."),
    pool: Optional[str] = typer.Option(None, help="Model pool: local (default; every route served by the embedded model, a stand-in) | table3 | a YAML."),
    dataset: str = OPT_DATASET,
    split: str = OPT_SPLIT,
    limit: Optional[int] = typer.Option(None, min=1, help="Questions per run (category-balanced, seeded). Default: all."),
    llm: str = OPT_LLM,
    base_url: Optional[str] = OPT_BASE_URL,
    judge: bool = typer.Option(False, "--judge/--no-judge", help="Also grade answers with the LLM judge."),
    judge_llm: Optional[str] = OPT_JUDGE_LLM,
    out: Path = typer.Option(Path("runs/mempilot/sweep"), help="Sweep folder: one sub-folder per preference, sweep.md/csv, model_share.csv, pareto_cost.png, pareto_latency.png."),
    store: Optional[Path] = typer.Option(None, help="Shared store directory (default OUT/store)."),
    data_root: Optional[Path] = OPT_DATA_ROOT,
    seed: int = OPT_SEED,
    concurrency: int = OPT_CONCURRENCY,
    price_book: Optional[Path] = OPT_PRICE_BOOK,
    allow_unpriced: bool = OPT_ALLOW_UNPRICED,
    price_as: Optional[str] = OPT_PRICE_AS,
):
    """MemPilot preference sweep: cost-quality and latency-quality frontiers and model-selection shares; resumable."""
    from .eval.runner import EvalConfig
    from .eval.sweeps.mempilot import (
        plan_mempilot_sweep,
        table_row,
        write_mempilot_report,
    )

    prefs = []
    for item in (x.strip() for x in preferences.split(",") if x.strip()):
        parsed = _parse_preference(item.replace(":", ",")) if ":" in item else item
        try:
            from .strategies.mempilot import as_preference

            as_preference(parsed)
        except ValueError as e:
            _fail(str(e))
        prefs.append(parsed)
    if not prefs:
        _fail("--preferences is empty")
    runs = plan_mempilot_sweep(prefs, adapters=adapters, options={"pool": pool} if pool else {})
    base = EvalConfig(dataset=dataset, split=split, strategy="mempilot", limit=limit, llm=llm, base_url=base_url,
                      judge=judge, judge_llm=judge_llm, out=out, store=store, data_root=data_root, seed=seed,
                      concurrency=concurrency, price_book=price_book, allow_unpriced=allow_unpriced, price_as=price_as)
    results = _run_sweep_with_progress(base, runs)
    written = write_mempilot_report(results, out, dataset)
    _print_sweep(f"MemPilot preference sweep ({len(results)} runs, {dataset})", [table_row(r) for r in results],
                 ("label", "policy", "n", "f1", "usd_x1e4", "proxy_s", "delegate_calls", "image_accesses",
                  "retrieve_calls", "curate_calls"), written)


@sweep_app.command("memorycpt")
def sweep_memorycpt(
    what: str = typer.Option("depth,ablation,alpha", help="Which sweeps: any of depth, ablation, alpha (comma-separated)."),
    alphas: str = typer.Option("0.2,0.4,0.6,0.8,1.0", help="alpha values whose LoRA-B adapters to compare."),
    adapters: Path = typer.Option(Path("runs/qar"), help="Folder with alpha_<A>/adapter from `train qar --alpha A --out runs/qar/alpha_<A>`."),
    construction_llm: Optional[str] = typer.Option(None, help="The QAD model for every run (e.g. 'hf:runs/qad/merged'); default --llm."),
    dataset: str = OPT_DATASET,
    split: str = OPT_SPLIT,
    limit: Optional[int] = typer.Option(None, min=1, help="Questions per run (category-balanced, seeded). Default: all."),
    llm: str = OPT_LLM,
    base_url: Optional[str] = OPT_BASE_URL,
    judge: bool = typer.Option(False, "--judge/--no-judge", help="Also grade answers with the LLM judge."),
    judge_llm: Optional[str] = OPT_JUDGE_LLM,
    out: Path = typer.Option(Path("runs/sweep-memorycpt"), help="Sweep folder: one sub-folder per run, sweep.md/csv, pareto.png."),
    store: Optional[Path] = typer.Option(None, help="Shared store directory (default OUT/store)."),
    data_root: Optional[Path] = OPT_DATA_ROOT,
    seed: int = OPT_SEED,
    concurrency: int = OPT_CONCURRENCY,
    price_book: Optional[Path] = OPT_PRICE_BOOK,
    allow_unpriced: bool = OPT_ALLOW_UNPRICED,
    price_as: Optional[str] = OPT_PRICE_AS,
):
    """MemoryCPT sweeps: LoRA-B reward weight alpha, RRF depth, and the QAD/QAR/FS ablations; resumable."""
    from .eval.runner import EvalConfig
    from .eval.sweeps.memorycpt import (
        ABLATIONS,
        DEPTHS,
        table_row,
        write_memorycpt_report,
    )
    from .eval.sweeps.memorycpt import plan_memorycpt_sweep as plan

    chosen = {w.strip() for w in what.split(",") if w.strip()}
    if not chosen or chosen - {"depth", "ablation", "alpha"}:
        _fail(f"--what takes depth, ablation and/or alpha; got {what!r}")
    runs, missing = plan(_float_list("--alphas", alphas) if "alpha" in chosen else [],
                         DEPTHS if "depth" in chosen else [], ABLATIONS if "ablation" in chosen else [],
                         adapters=adapters, options={"construction_llm": construction_llm} if construction_llm else {})
    for p in missing:
        err.print(f"[yellow]skipped:[/yellow] no LoRA-B adapter {p}")
    if not runs:
        _fail("nothing to run")
    base = EvalConfig(dataset=dataset, split=split, strategy="memorycpt", limit=limit, llm=llm, base_url=base_url,
                      judge=judge, judge_llm=judge_llm, out=out, store=store, data_root=data_root, seed=seed,
                      concurrency=concurrency, price_book=price_book, allow_unpriced=allow_unpriced, price_as=price_as)
    results = _run_sweep_with_progress(base, runs)
    written = write_memorycpt_report(results, out, missing)
    _print_sweep(f"MemoryCPT sweep ({len(results)} runs)", [table_row(r) for r in results],
                 ("kind", "label", "n", "f1", "usd_x1e4", "amortized_314_x1e4", "qpc"), written)


@app.command()
def score(
    file: Path = typer.Argument(..., help="JSONL with 'prediction', 'answer' (absent for category 5) and 'category' per line."),
    dataset: str = typer.Option("locomo", help="Scoring protocol: locomo (official per-category F1, category 5 as abstention); longmemeval or hotpotqa (plain token F1)."),
    out: Path = typer.Option(Path("runs/scored"), help="Output directory: scored.jsonl and summary.json."),
):
    """Score predictions made by any memory system with our metrics (same protocol, comparable numbers)."""
    if dataset not in ("locomo", "longmemeval", "hotpotqa"):
        _fail(f"unknown --dataset {dataset!r}; choose locomo, longmemeval or hotpotqa")
    from .eval.reports.summary import summary_table
    from .eval.scoring import score_file

    try:
        summary = score_file(file, dataset=dataset, out=out)
    except _known_errors() as e:
        _fail(str(e))
    console.print(summary_table(summary, title=f"scored {file.name} ({dataset})"))
    console.print(f"wrote {out / 'scored.jsonl'} and {out / 'summary.json'}")


@app.command()
def ingest(
    store: Path = typer.Option(..., help="Store directory (created if missing)."),
    dataset: Optional[str] = typer.Option(None, help="Ingest a benchmark: locomo | longmemeval | hotpotqa."),
    conversation: Optional[list[str]] = typer.Option(None, help="Only these conversation ids (repeatable)."),
    file: Optional[Path] = typer.Option(None, help="A JSONL of messages ({role, content, speaker?, timestamp?, session_id?})."),
    user_id: Optional[str] = typer.Option(None, help="Scope for --file."),
    session_id: str = typer.Option("default", help="Session for --file lines without one."),
    data_root: Optional[Path] = typer.Option(None, envvar="MEMFRONTIER_DATA"),
):
    """Add records to a store. Idempotent: ingesting the same data again adds nothing."""
    from .api import Memory

    if (dataset is None) == (file is None):
        _fail("give exactly one of --dataset or --file")
    try:
        with Memory.open(store) as mem:
            if dataset:
                from .eval.datasets import load_dataset

                convs = load_dataset(dataset, "all", data_root=data_root)
                if conversation:
                    convs = [c for c in convs if c.id in set(conversation)]
                    if not convs:
                        _fail(f"no conversation named {conversation} in {dataset}")
                for c in convs:
                    res = mem.aio.store.add(c.records)
                    console.print(f"{c.id}: +{len(res.added)} records, {len(res.skipped)} already present")
            else:
                by_session = _read_messages(file, session_id)  # the whole file is checked before any write
                for sid, msgs in by_session.items():
                    res = mem.add(msgs, user_id=user_id, session_id=sid)
                    console.print(f"session {sid}: +{len(res.added)} records, {len(res.skipped)} already present")
    except _known_errors() as e:
        _fail(str(e))


def _read_messages(file: Path, default_session: str) -> dict[str, list[dict]]:
    """Messages of a JSONL file grouped by session; any bad line fails with file:line, nothing written."""
    from .core.messages import messages_to_records
    from .core.types import Scope

    if not file.is_file():
        _fail(f"no such file: {file}")
    by_session: dict[str, list[dict]] = {}
    for n, line in enumerate(file.read_text("utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            m = json.loads(line)
        except json.JSONDecodeError as e:
            _fail(f"{file}:{n}: not JSON ({e})")
        if not isinstance(m, dict) or not isinstance(m.get("content"), str):
            _fail(f"{file}:{n}: each line must be a JSON object with a string 'content'")
        if not m["content"].strip():
            _fail(f"{file}:{n}: 'content' is empty or whitespace; nothing was written")
        try:  # the same checks as Memory.add (role, timestamp...), here so no session is written first
            messages_to_records([m], scope=Scope(), session_id="-", timestamp=None)
        except ValueError as e:
            _fail(f"{file}:{n}: {e}; nothing was written")
        by_session.setdefault(str(m.pop("session_id", default_session)), []).append(m)
    return by_session


def _existing_store(store: Path) -> Path:
    if not (store / "store.db").is_file():
        _fail(f"no memory store at {store}; create one with `memfrontier ingest --store {store} ...`")
    return store


@app.command()
def ask(
    question: str = typer.Argument(...),
    store: Path = typer.Option(..., help="Store directory."),
    user_id: Optional[str] = typer.Option(None),
    strategy: str = typer.Option("rag", help="longctx | rag | oracle"),
    llm: str = OPT_LLM,
    base_url: Optional[str] = typer.Option(None),
    preference: str = typer.Option("perf", help="perf | balanced | cost"),
    max_usd: Optional[float] = typer.Option(None, help="Hard cap on this question's USD."),
    max_tokens: Optional[int] = typer.Option(None, help="Hard cap on the answer call's prompt+output tokens."),
    price_book: Optional[Path] = OPT_PRICE_BOOK,
    allow_unpriced: bool = OPT_ALLOW_UNPRICED,
    price_as: Optional[str] = typer.Option(None, help="Price the calls as this price-book model."),
    as_json: bool = typer.Option(False, "--json", help="Print the whole Answer as JSON."),
):
    """Answer one question from a store and print the answer with its cost."""
    from .api import Memory
    from .core.types import Budget

    try:
        with Memory.open(_existing_store(store), llm=llm, base_url=base_url, price_book=price_book,
                         allow_unpriced=allow_unpriced, price_as=price_as) as mem:
            ans = mem.ask(question, user_id=user_id, strategy=strategy, preference=preference,
                          budget=Budget(max_usd=max_usd, max_tokens=max_tokens))
    except _known_errors() as e:
        _fail(str(e))
    if as_json:
        console.print_json(ans.model_dump_json())
        return
    q = ans.usage.query
    console.print(f"[bold]{ans.text or '(empty answer)'}[/bold]")
    console.print(f"{q.calls} calls · {q.input_tokens} in / {q.output_tokens} out tokens · "
                  f"${q.usd:.8f} (USD) · latency proxy {q.proxy_s:.2f}s · wall {ans.wall_s:.2f}s · "
                  f"evidence {len(ans.evidence_ids)} records")
    if ans.usage.events:
        console.print(f"events: {ans.usage.events}")


@app.command()
def search(
    query: str = typer.Argument(...),
    store: Path = typer.Option(..., help="Store directory."),
    user_id: Optional[str] = typer.Option(None),
    k: int = typer.Option(5, min=1),
):
    """Hybrid (dense + BM25, RRF) search; prints the top chunks."""
    from .api import Memory

    try:
        with Memory.open(_existing_store(store)) as mem:
            hits = mem.search(query, user_id=user_id, k=k)
    except _known_errors() as e:
        _fail(str(e))
    if not hits:
        console.print(f"no results{f' for user {user_id!r}' if user_id else ''}")
    for i, h in enumerate(hits, 1):
        ranks = ", ".join(f"{name} #{r}" for name, r in h.ranks.items())
        console.print(f"[bold]{i}. RRF {h.score:.4f}[/bold] ({ranks}) [dim]session {h.chunk.session_id}, {h.chunk.timestamp}[/dim]\n"
                      f"{h.chunk.text[:400]}\n")


@app.command("mcp")
def mcp_cmd(
    store: Path = typer.Option(..., help="Store directory to serve."),
    transport: str = typer.Option("stdio", help="stdio | http (streamable HTTP, loopback only)."),
    host: str = typer.Option("127.0.0.1", help="HTTP: a loopback address to bind."),
    port: int = typer.Option(8765, min=1, max=65535, help="HTTP: port."),
    user_id: Optional[str] = typer.Option(None, help="Pin every call to this user (calls naming another are refused)."),
    agent_id: Optional[str] = typer.Option(None, help="Pin every call to this agent."),
    run_id: Optional[str] = typer.Option(None, help="Pin every call to this run."),
    llm: str = OPT_LLM,
    base_url: Optional[str] = OPT_BASE_URL,
    price_book: Optional[Path] = OPT_PRICE_BOOK,
    allow_unpriced: bool = OPT_ALLOW_UNPRICED,
    price_as: Optional[str] = OPT_PRICE_AS,
):
    """Serve the memory over MCP: tools search, rg, read, index_query, ask (each scoped)."""
    from .core.types import Scope
    from .server.mcp import is_loopback, serve

    if transport not in ("stdio", "http"):
        _fail(f"unknown --transport {transport!r}; choose stdio or http")
    if transport == "http" and not is_loopback(host):
        _fail(f"--host {host!r} is not a loopback address")
    serve(_existing_store(store), transport=transport, host=host, port=port,
          pinned=Scope(user_id=user_id, agent_id=agent_id, run_id=run_id), llm=llm, base_url=base_url,
          price_book=price_book, allow_unpriced=allow_unpriced, price_as=price_as)


def main():  # pragma: no cover
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
