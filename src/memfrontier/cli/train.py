"""The ``train`` commands (BudgetMem tier router, MemoryCPT LoRA-A / LoRA-B, MemPilot orchestrator, the
``auto`` strategy router) and ``export sft`` (their training data)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Optional

import typer

from .app import (
    LLM_HELP,
    OPT_ALLOW_UNPRICED,
    OPT_BASE_URL,
    OPT_DATA_ROOT,
    OPT_DATASET,
    OPT_LLM,
    OPT_PRICE_BOOK,
    OPT_SEED,
    _fail,
    console,
    err,
    export_app,
    known_errors,
    train_app,
)
from .options import _existing_store, _parse_preference, store_location
from .progress import _question_bar
from .tables import _train_table, tier_table


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
    from ..train.lora_sft import SFTDataError, train_lora_sft

    files = sorted(data.glob("*.jsonl")) if data.is_dir() else [data]
    if not files or not all(f.is_file() for f in files):
        _fail(f"no SFT data at {data}; write it with `memfrontier export sft --store STORE --out {data}`")
    err.print(f"training LoRA-A on {len(files)} file(s): {', '.join(f.name for f in files)}")
    with known_errors(extra=(SFTDataError,)):
        res = train_lora_sft(files, out, base=base, rank=rank, alpha=lora_alpha, dropout=dropout, lr=lr,
                             cutoff_tokens=cutoff_tokens, epochs=epochs, max_steps=max_steps,
                             val_fraction=val_fraction, seed=seed,
                             on_progress=lambda event, **info: err.print(f"[dim]{event}[/dim] {info}"))
    console.print(f"{res.steps} steps on {res.n_train} samples ({res.n_val} validation, {res.n_too_long} too long) "
                  f"in {res.seconds:.0f}s; best validation loss {res.best_val_loss}")
    console.print(f"adapter: {res.adapter_dir}  merged: {res.merged_dir}  log: {res.train_log}")


@train_app.command("qar")
def train_qar_cmd(
    alpha: float = typer.Option(0.8, min=0, max=1, help="Reward weight of F1 against cost (MemoryCPT Eq. 16; paper: 0.8)."),
    out: Optional[Path] = typer.Option(None, help="Output (default runs/qar/alpha_A): adapter/, train_log.jsonl, reward_curve.png, qar_summary.json."),
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
    from ..api import AsyncMemory
    from ..eval.datasets import load_dataset
    from ..eval.sweeps.memorycpt import alpha_dir_name
    from ..train.qar import train_qar

    out = out or Path("runs/qar") / alpha_dir_name(alpha)
    with known_errors():
        convs = load_dataset(dataset, split, data_root=data_root)
        mem = AsyncMemory.open(store, llm=llm, base_url=base_url, price_book=price_book)

    def on_progress(event, **info):
        err.print(f"[dim]{event}[/dim] " + " ".join(f"{k}={v}" for k, v in info.items()))

    with known_errors():
        try:
            summary = train_qar(mem, convs=convs, out=out, dataset=dataset, sessions=sessions, max_questions=questions,
                                alpha=alpha, base=base, construction_llm=construction_llm, max_steps=max_steps,
                                num_generations=num_generations, beta=beta, lr=lr,
                                max_completion_tokens=max_summary_tokens, seed=seed, on_progress=on_progress)
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
    out: Optional[Path] = typer.Option(None, help="Output (default runs/mempilot/orchestrator/PREFERENCE): adapter/, train_log.jsonl, train_summary.json."),
    store: Optional[Path] = typer.Option(None, help="Store for the training conversations (default OUT/store)."),
    data_root: Optional[Path] = OPT_DATA_ROOT,
    seed: int = typer.Option(13, help="Seed of the question order, sampling and LoRA init."),
):
    """GRPO for the MemPilot policy (decoupled advantages, marginal utility); saves a LoRA adapter."""
    from pydantic import ValidationError

    from ..train.mempilot_trainer import OrchestratorTrainConfig, train_orchestrator

    pref = _parse_preference(preference)
    name = pref if isinstance(pref, str) else "w_" + "_".join(f"{v:g}" for v in pref.values())
    out = out or Path("runs/mempilot/orchestrator") / name
    try:
        from ..strategies.mempilot import as_preference

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

    with known_errors():
        summary = asyncio.run(train_orchestrator(cfg, on_progress=on_progress))
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
    out: Optional[Path] = typer.Option(None, help="Output directory (default runs/budgetmem/routers/lambda_L): router_best.pt, router_last.pt, train_log.jsonl, reward_curve.png, train_summary.json."),
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

    from ..train.budgetmem_trainer import TrainConfig, router_dir_name, train_router

    if reward not in ("f1", "judge"):
        _fail(f"unknown --reward {reward!r}; choose f1 or judge")
    from ..strategies.budgetmem.config import TIERINGS

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

        with known_errors(bar):
            summary = asyncio.run(train_router(cfg, on_progress=on_progress))
    console.print(_train_table(cfg.out / "train_log.jsonl"))
    console.print(tier_table(summary["final"]["val_tier_ratios"], title="validation tier selection ratio (last update, greedy)"))
    console.print(f"best update {summary['best_update']} (val reward {summary['best_val_reward']:.4f}); "
                  f"module cache {summary['module_cache']['hits']} hits / {summary['module_cache']['misses']} misses; "
                  f"{summary['llm_calls']} model calls, {summary['llm_errors']} failed, "
                  f"{summary['fallbacks']} module outputs fell back to a lower tier")
    console.print(f"wrote {cfg.out / 'router_best.pt'}, {cfg.out / 'router_last.pt'}, {cfg.out / 'train_log.jsonl'}, "
                  f"{cfg.out / 'reward_curve.png'}")


@train_app.command("strategy-router")
def train_strategy_router_cmd(
    frontier_dir: Path = typer.Option(..., "--from", help="A frontier output folder (configs/LABEL/predictions.jsonl) run on the training pool (--split train); never the test split."),
    out: Path = typer.Option(Path("runs/auto/router.json"), help="The router file to write; the validation report goes next to it (NAME.validation.json / .md)."),
    val_share: float = typer.Option(0.2, min=0.0, max=1.0, help="Share of the questions held out for validation (category-balanced)."),
    seed: int = typer.Option(42, help="Seed of the validation split and the cross-validation folds."),
    only: Optional[str] = typer.Option(None, help="Comma-separated configuration labels to route among (default: every finished configuration except the oracle anchor and refused runs)."),
    store: Optional[str] = typer.Option(None, help="The store the frontier ran on (default: the one its runs recorded)."),
):
    """Train the `auto` strategy's router (per configuration: F1, USD, latency and tokens from the question's
    features) on a frontier's per-question records; writes a versioned router file and its validation report."""
    from rich.markdown import Markdown

    from ..train.strategy_router import train_strategy_router

    labels = [x.strip() for x in only.split(",") if x.strip()] if only else None
    with known_errors():
        res = train_strategy_router(frontier_dir, out, val_share=val_share, seed=seed, labels=labels,
                                    store=store_location(store))
    console.print(Markdown(res["validation_md"].read_text("utf-8")))
    console.print(f"wrote {res['router']}, {res['validation_json']}, {res['validation_md']} "
                  f"(use: eval --strategy auto --router {res['router']} --preference balanced)")

@export_app.command("sft")
def export_sft_cmd(
    store: Path = typer.Option(..., help="A store directory whose MemoryCPT memories were built (e.g. runs/demo/store)."),
    out: Path = typer.Option(Path("runs/sft"), help="Output directory: one ShareGPT JSONL per construction role."),
    bank: Optional[str] = typer.Option(None, help="Only this bank (file name under STORE/banks without .db); default every memorycpt-* bank."),
    include_rejected: bool = typer.Option(False, "--include-rejected", help="Also export outputs the validator rejected (not recommended as SFT targets)."),
):
    """Teacher traces of MemoryCPT construction -> per-role ShareGPT JSONL for `train qad` (LoRA-A)."""
    from ..embed.minilm import MiniLMEmbedder
    from ..train.sft_export import export_sft

    root = _existing_store(store) / "banks"
    files = [root / f"{bank}.db"] if bank else sorted(root.glob("memorycpt-*.db"))
    if not files or not all(f.is_file() for f in files):
        _fail(f"no MemoryCPT memory bank under {root}; build one with `memfrontier eval --strategy memorycpt --store {store}`")
    counts = export_sft(files, out, MiniLMEmbedder(), include_rejected=include_rejected)
    if not counts:
        _fail(f"the banks in {root} hold no traces{'' if include_rejected else ' of accepted operations'}")
    for role, n in sorted(counts.items()):
        console.print(f"{role}: {n} samples -> {out / (role + '.jsonl')}")
