"""One evaluation run's settings (:class:`EvalConfig`) and its identity: the fields that must match
for a resumed run to be the same run."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field, field_validator, model_validator

from ..core.pricebook import PriceBook
from ..core.provenance import sha256_file
from ..strategies import StrategyConfig, resolve_named, strategy_config
from . import datasets
from .fallbacks import DEFAULT_THRESHOLD
from .metrics import DEFAULT_SCORER, Scorer

#: Fields of a run's identity recorded in ``run.json`` only when they differ from these defaults, so a
#: ``run.json`` written before the field existed still names the same run.
IDENTITY_DEFAULTS = {"scorer": DEFAULT_SCORER}


class EvalConfig(BaseModel):
    """One evaluation run. ``strategy_options`` are the options of the strategy's config (e.g.
    ``{"k": 8}`` for :class:`~memfrontier.strategies.rag.RagConfig`), given as a dict or as the
    config itself; they are validated when the EvalConfig is made (a ValidationError names the
    key and the allowed values)."""

    dataset: str = "locomo"
    #: None: the dataset's default split (:func:`~memfrontier.eval.datasets.default_split`: ``test``
    #: where it has one, else ``all``)
    split: str | None = None
    strategy: str = "rag"
    strategy_options: dict = Field(default_factory=dict)
    limit: int | None = None
    llm: str = "local"
    base_url: str | None = None
    judge: bool = False
    judge_llm: str | None = None
    out: Path = Path("runs/latest")
    #: a store directory, or a PostgreSQL URL (kept as a string)
    store: Path | str | None = None
    data_root: Path | None = None
    #: a file in the dataset's format read instead of the data root's default (e.g. LongMemEval S/M)
    data_file: Path | None = None
    seed: int = 42
    #: How answers are read into words for F1 and EM (:func:`~memfrontier.eval.metrics.normalize_answer`):
    #: ``locomo``, the official LoCoMo scorer (ASCII), or ``unicode`` (any script). Recorded in
    #: ``summary.json`` (``config.scorer``, ``provenance.scorer``) and, when not the default, in
    #: ``run.json`` (another scorer is another run; :data:`IDENTITY_DEFAULTS`).
    scorer: Scorer = DEFAULT_SCORER
    concurrency: int = 1
    #: Run ingest/construction (one task per conversation) and the questions (one task each) on
    #: Ray: ``"local"`` starts Ray on this machine, ``"auto"`` joins the running cluster, or a
    #: cluster address (``"ray://host:10001"``). ``concurrency`` is then the number of Ray workers,
    #: each a process with its own models. ``None``: in this process (asyncio). Not part of the
    #: run's identity: both give the same results (:mod:`memfrontier.eval.ray_pool`).
    ray: str | None = None
    price_book: Path | None = None
    allow_unpriced: bool = False
    price_as: str | None = None
    #: A run whose error or fallback share of any role is above ``fallback_threshold`` raises
    #: :class:`~memfrontier.eval.fallbacks.FallbackError` (after writing its summary) unless
    #: ``allow_fallbacks``. Neither changes the run's results, so neither is part of its identity.
    allow_fallbacks: bool = False
    fallback_threshold: float = Field(default=DEFAULT_THRESHOLD, ge=0.0, le=1.0)

    @field_validator("out")
    @classmethod
    def _out_is_a_folder(cls, v: Path) -> Path:
        for p in (v, *v.parents):  # the nearest existing path must be a folder (it is created below it)
            if p.exists():
                if not p.is_dir():
                    raise ValueError(f"{p} is a file, not a folder" + (f" (in {v})" if p != v else ""))
                break
        return v

    @field_validator("store", mode="before")
    @classmethod
    def _store_location(cls, v):
        from ..store.postgres import is_postgres_url

        return v if v is None or is_postgres_url(v) else Path(v)

    @field_validator("strategy_options", mode="before")
    @classmethod
    def _config_as_options(cls, v):
        return v.as_json() if isinstance(v, StrategyConfig) else v

    @model_validator(mode="after")
    def _named_configuration(self):
        """A named configuration (``rag-turns-rr``) is run as its strategy and options: the same
        run, and the same ``run.json`` identity, as one that spells them out."""
        self.strategy, self.strategy_options = resolve_named(self.strategy, self.strategy_options)
        return self

    @field_validator("ray")
    @classmethod
    def _ray_address(cls, v):
        if v is not None and not v.strip():
            raise ValueError("ray must be 'local', 'auto' or a cluster address such as ray://head:10001")
        return v

    @model_validator(mode="after")
    def _default_split(self):
        if self.split is None:
            self.split = datasets.default_split(self.dataset)
        return self

    @model_validator(mode="after")
    def _valid_strategy_options(self):
        self.strategy_config()
        return self

    def strategy_config(self) -> StrategyConfig:
        """The strategy's validated config (raises ValueError naming a rejected option)."""
        return strategy_config(self.strategy, self.strategy_options)

    def identity(self) -> dict:
        """The fields that must match for a resumed run to be the same run, and the price book's
        version (a changed price book is another run). A strategy option that
        names a file (e.g. a router checkpoint) also contributes the file's sha256, so a retrained
        file at the same path is a different run."""
        ident = self.model_dump(
            mode="json",
            include={
                "dataset",
                "split",
                "strategy",
                "strategy_options",
                "llm",
                "base_url",
                "seed",
                "limit",
                "judge",
                "judge_llm",
                "price_as",
            },
        )
        # prices and latency profiles are part of every recorded call: a resumed run under another
        # price-book version would mix two books in one summary
        ident["price_book_version"] = PriceBook.load(self.price_book).version
        files = {
            k: sha256_file(v)
            for k, v in sorted(self.strategy_options.items())
            if isinstance(v, (str, Path)) and str(v) and Path(v).is_file()
        }
        if files:
            ident["strategy_option_sha256"] = files
        ident.update({k: getattr(self, k) for k, v in IDENTITY_DEFAULTS.items() if getattr(self, k) != v})
        if self.data_file is not None:  # another data file is another run (absent: the default file)
            ident["data_file_sha256"] = sha256_file(self.data_file) if Path(self.data_file).is_file() else None
        return ident
