"""The ``sweep`` commands: BudgetMem (lambda, fixed tiers, K), MemPilot (preferences), MemoryCPT (alpha,
depth, ablations), run under one progress bar."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Optional

import typer

from ..core.words import plural
from .app import (
    RESUME_HINT,
    _fail,
    console,
    err,
    known_errors,
    sweep_app,
)
from .fields import block, with_blocks
from .options import (
    STRATEGY_BLOCK,
    _check_router,
    _float_list,
    run_block,
    run_options,
    strategy_options,
)
from .progress import IngestRow, _question_bar


def _run_sweep_with_progress(base, runs) -> list[dict]:
    """Run a sweep's points (:func:`memfrontier.eval.sweeps.base.run_sweep`) under one progress bar;
    every point's options are validated by the strategy's config before the first run starts."""
    from ..eval.sweeps.base import run_sweep
    from ..strategies import strategy_config

    with known_errors():
        for r in runs:
            strategy_config(base.strategy, r.options)
    with _question_bar() as bar:
        task = bar.add_task("loading", total=None)
        ingest_row = IngestRow(bar)

        def on_progress(event, **info):
            ingest_row.prefix = f"{info.get('run', '')}: "
            ingest_row.on_event(event, info)
            if event == "run":
                bar.update(task, description=f"{info['run']}: starting", total=None, completed=0)
            elif event == "build":
                bar.update(task, description=f"{info['run']}: building memories of {info['conversation']}")
            elif event == "start":
                bar.update(task, total=info["total"], completed=info["done"], description=f"{info['run']}: ingesting")
            elif event == "question":
                bar.update(task, advance=1, description=f"{info['run']}: answering")

        with known_errors(bar, interrupted=RESUME_HINT):
            return asyncio.run(run_sweep(base, runs, on_progress=on_progress))


def _print_sweep(title: str, rows: list[dict], cols: tuple[str, ...], written: dict) -> None:
    from rich.table import Table

    t = Table(title=title)
    for c in cols:
        t.add_column(c, justify="left" if c in ("run", "kind", "label") else "right")
    for row in rows:
        t.add_row(
            *("-" if row[c] is None else (f"{row[c]:.4f}" if isinstance(row[c], float) else str(row[c])) for c in cols)
        )
    console.print(t)
    console.print("wrote " + ", ".join(str(p) for p in written.values()))


@sweep_app.command(
    "budgetmem",
    cls=with_blocks(
        run=run_block(
            Path("runs/budgetmem/sweep"),
            "Sweep directory: one sub-folder per run, sweep.csv, sweep.md, pareto.png, tier_ratios.png, k_sweep.png.",
        ),
        strategy_args=STRATEGY_BLOCK,
    ),
)
def sweep_budgetmem(
    ctx: typer.Context,
    lambdas: str = typer.Option(
        "0,0.1,0.3,0.5,0.9",
        help="Comma-separated lambdas; each uses ROUTER_DIR/lambda_L/router_best.pt (skipped, and reported, when missing).",
    ),
    ks: str = typer.Option("1,3,5,8,10", help="Comma-separated retrieval sizes K for the K sweep (empty: no K sweep)."),
    router_dir: Path = typer.Option(
        Path("runs/budgetmem/routers"), help="Folder of routers trained by `train router` (one lambda_L/ per lambda)."
    ),
    k_router: Optional[Path] = typer.Option(
        None, help="K sweep with this router checkpoint instead of all-Mid fixed tiers."
    ),
    k: int = typer.Option(5, min=1, help="K of the lambda runs and the fixed-tier baselines."),
):
    """BudgetMem sweep: routers over lambda, fixed-tier baselines (all low/mid/high) and K; resumable.
    --set / --strategy-config options apply to every run (e.g. `--set tiering=reasoning`, which must match the routers' training)."""
    run, strategy_args = run_options(ctx), block(ctx, "strategy_args")
    from ..eval.sweeps.budgetmem import (
        plan_budgetmem_sweep,
        table_row,
        write_sweep_report,
    )

    lams = _float_list("--lambdas", lambdas)
    kvals = [int(v) for v in _float_list("--ks", ks)] if ks.strip() else []
    if any(v < 1 for v in kvals):
        _fail(f"--ks must be positive integers, got {ks!r}")
    options = strategy_options("budgetmem", strategy_args)
    if k_router is not None:
        _check_router(k_router)
    runs, missing = plan_budgetmem_sweep(lams, kvals, router_dir=router_dir, k=k, k_router=k_router, options=options)
    for p in missing:
        err.print(
            f"[yellow]skipped:[/yellow] no router checkpoint {p} (train one with `memfrontier train router --lambda ...`)"
        )
    for r in runs:
        if "router" in r.options:
            _check_router(Path(r.options["router"]))
    results = _run_sweep_with_progress(run.eval_config("budgetmem"), runs)
    written = write_sweep_report(results, run.out, missing)
    _print_sweep(
        f"BudgetMem sweep ({plural(len(results), 'run')})",
        [table_row(r) for r in results],
        ("run", "n", "f1", "judge", "usd_x1e4", "qpc"),
        written,
    )


@sweep_app.command(
    "mempilot",
    cls=with_blocks(
        run=run_block(
            Path("runs/mempilot/sweep"),
            "Sweep folder: one sub-folder per preference, sweep.md/csv, model_share.csv, pareto_cost.png, pareto_latency.png.",
        ),
        strategy_args=STRATEGY_BLOCK,
    ),
)
def sweep_mempilot(
    ctx: typer.Context,
    preferences: str = typer.Option(
        "perf,balanced,cost",
        help="Preference presets, comma-separated: perf | balanced | cost. (One run with weights of your own: `eval --strategy mempilot --set preference.quality=1 --set preference.cost=0.5 ...`.)",
    ),
    adapters: Optional[Path] = typer.Option(
        None, help="Folder with PREFERENCE/adapter from `train orchestrator` (missing: the untrained policy)."
    ),
):
    """MemPilot preference sweep: cost-quality and latency-quality frontiers and model-selection shares; resumable.
    --set / --strategy-config options apply to every run."""
    run, strategy_args = run_options(ctx), block(ctx, "strategy_args")
    from ..eval.sweeps.mempilot import (
        plan_mempilot_sweep,
        table_row,
        write_mempilot_report,
    )
    from ..strategies import strategy_config

    prefs = [x.strip() for x in preferences.split(",") if x.strip()]
    for pref in prefs:
        with known_errors():
            strategy_config("mempilot", preference=pref)
    if not prefs:
        _fail("--preferences is empty")
    runs = plan_mempilot_sweep(prefs, adapters=adapters, options=strategy_options("mempilot", strategy_args))
    results = _run_sweep_with_progress(run.eval_config("mempilot"), runs)
    written = write_mempilot_report(results, run.out, run.dataset)
    _print_sweep(
        f"MemPilot preference sweep ({plural(len(results), 'run')}, {run.dataset})",
        [table_row(r) for r in results],
        (
            "label",
            "policy",
            "n",
            "f1",
            "usd_x1e4",
            "proxy_s",
            "delegate_calls",
            "image_accesses",
            "retrieve_calls",
            "curate_calls",
        ),
        written,
    )


@sweep_app.command(
    "memorycpt",
    cls=with_blocks(
        run=run_block(Path("runs/sweep-memorycpt"), "Sweep folder: one sub-folder per run, sweep.md/csv, pareto.png."),
        strategy_args=STRATEGY_BLOCK,
    ),
)
def sweep_memorycpt(
    ctx: typer.Context,
    what: str = typer.Option(
        "depth,ablation,alpha", help="Which sweeps: any of depth, ablation, alpha (comma-separated)."
    ),
    alphas: str = typer.Option("0.2,0.4,0.6,0.8,1.0", help="alpha values whose LoRA-B adapters to compare."),
    adapters: Path = typer.Option(
        Path("runs/qar"), help="Folder with alpha_A/adapter from `train qar --alpha A --out runs/qar/alpha_A`."
    ),
):
    """MemoryCPT sweeps: LoRA-B reward weight alpha, RRF depth, and the QAD/QAR/FS ablations; resumable.
    --set / --strategy-config options apply to every run."""
    run, strategy_args = run_options(ctx), block(ctx, "strategy_args")
    from ..eval.sweeps.memorycpt import (
        ABLATIONS,
        DEPTHS,
        table_row,
        write_memorycpt_report,
    )
    from ..eval.sweeps.memorycpt import plan_memorycpt_sweep as plan

    chosen = {w.strip() for w in what.split(",") if w.strip()}
    if not chosen or chosen - {"depth", "ablation", "alpha"}:
        _fail(f"--what takes depth, ablation and/or alpha; got {what!r}")
    options = strategy_options("memorycpt", strategy_args)
    runs, missing = plan(
        _float_list("--alphas", alphas) if "alpha" in chosen else [],
        DEPTHS if "depth" in chosen else [],
        ABLATIONS if "ablation" in chosen else [],
        adapters=adapters,
        options=options,
    )
    for p in missing:
        err.print(f"[yellow]skipped:[/yellow] no LoRA-B adapter {p}")
    if not runs:
        _fail("nothing to run")
    results = _run_sweep_with_progress(run.eval_config("memorycpt"), runs)
    written = write_memorycpt_report(results, run.out, missing)
    _print_sweep(
        f"MemoryCPT sweep ({plural(len(results), 'run')})",
        [table_row(r) for r in results],
        ("kind", "label", "n", "f1", "usd_x1e4", "amortized_314_x1e4", "qpc"),
        written,
    )
