"""The ``train`` commands (BudgetMem tier router, MemoryCPT LoRA-A / LoRA-B, MemPilot orchestrator, the
``auto`` strategy router, rag's turn reranker) and ``export sft`` (their training data)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Optional

import typer

from ..core.words import plural
from ..train.configs import (
    OrchestratorGRPOConfig,
    QADConfig,
    QARConfig,
    RouterPPOConfig,
    StrategyRouterConfig,
    TurnRerankerConfig,
)
from .app import (
    _fail,
    console,
    err,
    export_app,
    known_errors,
    train_app,
)
from .fields import block, given, model_options, model_values, with_blocks
from .options import _existing_store
from .progress import _question_bar
from .tables import _train_table, tier_table


def train_command(name: str, config_class):
    """``@train_app.command(name)`` whose options are generated from ``config_class``'s fields
    (:func:`~memfrontier.cli.fields.model_options`, plus ``--config FILE`` and ``--set KEY=VALUE``)."""
    return train_app.command(name, cls=with_blocks(config=model_options(config_class)))


def train_config(ctx: typer.Context, config_class):
    """The running train command's config: defaults, ``--config`` file, options, ``--set``; a bad
    value exits 2 naming the field."""
    with known_errors():
        return config_class.model_validate(model_values(config_class, block(ctx, "config"), given(ctx, "config")))


@train_command("qad", QADConfig)
def train_qad_cmd(ctx: typer.Context):
    """LoRA-A: distil the construction roles (SFT on teacher traces, MemoryCPT QAD), then merge it."""
    from ..train.lora_sft import SFTDataError, sft_files, train_lora_sft

    cfg = train_config(ctx, QADConfig)
    with known_errors(extra=(SFTDataError,)):
        files = sft_files(cfg.data)
        err.print(f"training LoRA-A on {plural(len(files), 'file')}: {', '.join(f.name for f in files)}")
        res = train_lora_sft(cfg, on_progress=lambda event, **info: err.print(f"[dim]{event}[/dim] {info}"))
    console.print(
        f"{plural(res.steps, 'step')} on {plural(res.n_train, 'sample')} ({res.n_val} validation, {res.n_too_long} too long) "
        f"in {res.seconds:.0f}s; best validation loss {res.best_val_loss}"
    )
    console.print(f"adapter: {res.adapter_dir}  merged: {res.merged_dir}  log: {res.train_log}")


@train_command("qar", QARConfig)
def train_qar_cmd(ctx: typer.Context):
    """LoRA-B: GRPO-train the query-aware summarizer with the cost-aware reward (MemoryCPT QAR)."""
    from ..api import AsyncMemory
    from ..eval.datasets import load_dataset
    from ..train.qar import train_qar

    cfg = train_config(ctx, QARConfig)
    with known_errors():
        convs = load_dataset(cfg.dataset, cfg.split, data_root=cfg.data_root)
        mem = AsyncMemory.open(cfg.store, llm=cfg.llm, base_url=cfg.base_url, price_book=cfg.price_book)

    def on_progress(event, **info):
        err.print(f"[dim]{event}[/dim] " + " ".join(f"{k}={v}" for k, v in info.items()))

    with known_errors():
        try:
            summary = train_qar(cfg, mem=mem, convs=convs, on_progress=on_progress)
        finally:
            mem.close()
    res = summary["result"]
    for s in summary["steps"]:
        console.print(
            f"step {s['step']}: reward {s['reward_mean']:.3f}  F1 {s['f1_mean']:.3f}  "
            f"summary tokens {s['summary_tokens_mean']:.1f}"
        )
    console.print(
        f"{plural(res['steps'], 'step')} on {plural(summary['pool_size'], 'state')}; LoRA change ||Δφ||₂ = {res['lora_delta_l2']:.4g}"
    )
    console.print(
        f"adapter: {res['adapter_dir']} (use: eval --strategy memorycpt --set summarizer_adapter={res['adapter_dir']})"
    )


@train_command("orchestrator", OrchestratorGRPOConfig)
def train_orchestrator_cmd(ctx: typer.Context):
    """GRPO for the MemPilot policy (decoupled advantages, marginal utility); saves a LoRA adapter."""
    from ..train.mempilot_trainer import train_orchestrator

    cfg = train_config(ctx, OrchestratorGRPOConfig)

    def on_progress(event, **info):
        if event == "step":
            r = info["row"]
            console.print(
                f"step {r['step']}: {r['rollouts']} rollouts · valid {r['valid_share']:.2f} · Q {r['quality_mean']:.3f} · "
                f"r_task {r['task_reward_mean']:.3f} · USD {r['usd_mean']:.2e} · proxy {r['proxy_s_mean']:.2f}s · "
                f"loss {r['loss']:.4f} · KL {r['kl']:.2e} · ||Δφ|| {r['lora_delta_l2']:.3g} · {r['seconds']:.0f}s"
            )
        else:
            err.print(f"[dim]{event}[/dim] " + " ".join(f"{k}={v}" for k, v in info.items()))

    with known_errors():
        summary = asyncio.run(train_orchestrator(cfg, on_progress=on_progress))
    console.print(
        f"adapter: {summary['adapter_dir']} (use: eval --strategy mempilot --set adapter={summary['adapter_dir']}); "
        f"LoRA change ||Δφ||₂ = {summary['lora_delta_l2']:.4g}; {summary['seconds']:.0f}s"
    )


@train_command("router", RouterPPOConfig)
def train_router_cmd(ctx: typer.Context):
    """Train the BudgetMem tier router with PPO on the LoCoMo training pool; logs the reward curve."""
    from ..train.budgetmem_trainer import train_router

    cfg = train_config(ctx, RouterPPOConfig)
    with _question_bar() as bar:
        task = bar.add_task("loading", total=None)

        def on_progress(event, **info):
            if event == "start":
                bar.update(
                    task,
                    total=info["updates"] * info["questions_per_update"],
                    completed=0,
                    description=f"ingesting ({info['train']} train / {info['val']} val questions)",
                )
            elif event == "ingest":
                bar.update(task, description=f"ingested {info['conversation']} (+{plural(info['added'], 'record')})")
            elif event == "question":
                bar.advance(task)
            elif event == "update":
                r = info["row"]
                bar.update(
                    task,
                    description=f"update {r['update']}/{cfg.updates} · reward {r['mean_reward']:.3f} · "
                    f"val {r['val_reward']:.3f}",
                )

        with known_errors(bar):
            summary = asyncio.run(train_router(cfg, on_progress=on_progress))
    console.print(_train_table(cfg.out / "train_log.jsonl"))
    console.print(
        tier_table(summary["final"]["val_tier_ratios"], title="validation tier selection ratio (last update, greedy)")
    )
    console.print(
        f"best update {summary['best_update']} (val reward {summary['best_val_reward']:.4f}); "
        f"module cache {plural(summary['module_cache']['hits'], 'hit')} / {plural(summary['module_cache']['misses'], 'miss', 'misses')}; "
        f"{plural(summary['llm_calls'], 'model call')}, {summary['llm_errors']} failed, "
        f"{plural(summary['fallbacks'], 'module output')} fell back to a lower tier"
    )
    console.print(
        f"wrote {cfg.out / 'router_best.pt'}, {cfg.out / 'router_last.pt'}, {cfg.out / 'train_log.jsonl'}, "
        f"{cfg.out / 'reward_curve.png'}"
    )


@train_command("strategy-router", StrategyRouterConfig)
def train_strategy_router_cmd(ctx: typer.Context):
    """Train the `auto` strategy's router (per configuration: F1, USD, latency and tokens from the question's
    features) on a frontier's per-question records; writes a versioned router file and its validation report."""
    from rich.markdown import Markdown

    from ..train.strategy_router import train_strategy_router

    cfg = train_config(ctx, StrategyRouterConfig)
    with known_errors():
        res = train_strategy_router(cfg)
    console.print(Markdown(res["validation_md"].read_text("utf-8")))
    console.print(
        f"wrote {res['router']}, {res['validation_json']}, {res['validation_md']} "
        f"(use: eval --strategy auto --set router={res['router']} --set preference=balanced)"
    )


@train_command("turn-reranker", TurnRerankerConfig)
def train_turn_reranker_cmd(ctx: typer.Context):
    """Train rag's turn reranker (`--set rerank=true` with unit=turn and max_tokens) on the gold evidence of the
    LoCoMo and LongMemEval training pools; writes the reranker file with its held-out validation per dataset
    (recall@10/@20, fused vs reranked)."""
    from ..train.turn_reranker import train_turn_reranker

    cfg = train_config(ctx, TurnRerankerConfig)
    with known_errors():
        res = train_turn_reranker(cfg, on_progress=lambda event, **info: err.print(f"[dim]{event}[/dim] {info}"))
    console.print(f"{res['questions']} questions in {res['seconds']:.0f}s")
    for name, v in res["validation"].items():
        rec = v["recall"]
        console.print(
            f"{name} ({v['method']}, {v['questions']} questions): recall@10 {rec['fused@10']:.3f} -> "
            f"{rec['reranked@10']:.3f}, recall@20 {rec['fused@20']:.3f} -> {rec['reranked@20']:.3f}"
        )
    console.print(f"wrote {res['out']}")


@export_app.command("sft")
def export_sft_cmd(
    store: Path = typer.Option(
        ..., help="A store directory whose MemoryCPT memories were built (e.g. runs/demo/store)."
    ),
    out: Path = typer.Option(Path("runs/sft"), help="Output directory: one ShareGPT JSONL per construction role."),
    bank: Optional[str] = typer.Option(
        None, help="Only this bank (file name under STORE/banks without .db); default every memorycpt-* bank."
    ),
    include_rejected: bool = typer.Option(
        False, "--include-rejected", help="Also export outputs the validator rejected (not recommended as SFT targets)."
    ),
):
    """Teacher traces of MemoryCPT construction -> per-role ShareGPT JSONL for `train qad` (LoRA-A)."""
    from ..embed.minilm import MiniLMEmbedder
    from ..train.sft_export import export_sft

    root = _existing_store(store) / "banks"
    files = [root / f"{bank}.db"] if bank else sorted(root.glob("memorycpt-*.db"))
    if not files or not all(f.is_file() for f in files):
        _fail(
            f"no MemoryCPT memory bank under {root}; build one with `memfrontier eval --strategy memorycpt --store {store}`"
        )
    counts = export_sft(files, out, MiniLMEmbedder(), include_rejected=include_rejected)
    if not counts:
        _fail(f"the banks in {root} hold no traces{'' if include_rejected else ' of accepted operations'}")
    for role, n in sorted(counts.items()):
        console.print(f"{role}: {plural(n, 'sample')} -> {out / (role + '.jsonl')}")
