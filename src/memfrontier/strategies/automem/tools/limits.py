"""Caps on what each tool may return or spend (characters, hits, rows, seconds, tokens)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class ToolLimits(BaseModel):
    """Per-call caps of the four tools. Units are in the names (``_chars``, ``_s``, ``_tokens``).
    An unknown cap name is an error (a misspelt cap would otherwise be silently ignored)."""

    model_config = ConfigDict(extra="forbid")

    rg_max_patterns: int = Field(6, ge=1)
    rg_pattern_chars: int = Field(200, ge=1)
    rg_max_hits: int = Field(20, ge=1)
    rg_max_chars: int = Field(4000, ge=200)
    rg_context_chars: int = Field(120, ge=0)
    rg_timeout_s: float = Field(1.0, gt=0)

    read_max_ids: int = Field(10, ge=1)
    read_record_chars: int = Field(1500, ge=50)
    read_max_chars: int = Field(6000, ge=200)

    dump_max_tokens: int = Field(6000, ge=64)
    dump_answer_tokens: int = Field(96, ge=8)

    index_max_rows: int = Field(50, ge=1)
    index_render_rows: int = Field(20, ge=1)
    index_cell_chars: int = Field(300, ge=20)
    index_max_chars: int = Field(4000, ge=200)
    index_timeout_s: float = Field(2.0, gt=0)
