"""Tables that fit a terminal: a rich table squeezed below its natural width cuts a header word with
"…" (``cate…``, ``USD×1…``). :func:`fit_columns` gives every column the width of the longest word
of its header and cells (up to :data:`MAX_WORD`) as a minimum, lets longer text wrap at spaces and
fold, and drops the table's outer edge; the tables' headers are short enough for these minimums to
fit 80 columns, so a narrow terminal wraps rather than cuts."""

from __future__ import annotations

from rich.table import Table

#: The longest word of a cell a column is kept wide enough for; a longer one (a path, an error)
#: folds. Header words are always whole.
MAX_WORD = 8


def _longest_word(text) -> int:
    return max((len(w) for w in str(text).split()), default=0)


def fit_columns(table: Table) -> Table:
    """``table`` with every column's ``min_width`` the longest word of its header and cells
    (a cell's at most :data:`MAX_WORD`), cells folded rather than cut, and no outer edge or edge
    padding; returns it."""
    table.show_edge, table.pad_edge = False, False
    for col in table.columns:
        cells = max((_longest_word(c) for c in col._cells if isinstance(c, str)), default=0)
        col.min_width = max(col.min_width or 0, _longest_word(col.header), min(cells, MAX_WORD))
        if not col.no_wrap:
            col.overflow = "fold"
    return table
