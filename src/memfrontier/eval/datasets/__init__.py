"""Benchmark loaders: LoCoMo, LongMemEval, HotpotQA, Mem-Gallery -> :class:`~memfrontier.core.types.Conversation`.

Data lives outside the repo (``../shared/data``, see its README). :func:`data_root` finds it;
every loader also takes an explicit file path. A missing, unreadable or malformed file raises
:class:`DatasetError` naming the path and how to point memfrontier at the data.

A turn with nothing a reader could see (blank text, no image, action or observation; LongMemEval S's
ShareGPT distractor sessions hold some) is skipped as the file is read, and its id listed in the
conversation's ``meta["empty_turns_skipped"]`` (and dropped from the questions' evidence): the
store refuses empty records, a benchmark file is read as its authors publish it.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
from pathlib import Path
from typing import Any

ENV_VAR = "MEMFRONTIER_DATA"

# dataset name -> file path relative to the data root
DATASET_FILES: dict[str, str] = {
    "locomo": "locomo/locomo10.json",
    "longmemeval": "longmemeval/longmemeval_oracle.json",
    "longmemeval_s": "longmemeval/longmemeval_s_dev.json.gz",
    "hotpotqa": "hotpotqa/hotpot_dev_distractor_v1_103.json",
    "mem_gallery": "mem_gallery/dialog",  # a folder of one JSON file per conversation
}

#: The datasets in LongMemEval's format, scored and judged by its protocol (oracle and S settings).
LONGMEMEVAL_DATASETS = ("longmemeval", "longmemeval_s")

SPLITS: dict[str, tuple[str, ...]] = {
    "locomo": ("test", "train", "all"),
    "longmemeval": ("all",),
    "longmemeval_s": ("test", "train", "all"),
    "hotpotqa": ("all",),
    "mem_gallery": ("test", "train", "val", "all"),
}


def default_split(name: str) -> str:
    """The split a run uses when none is given: ``test`` where ``name`` has one (LoCoMo's conv-49 and
    conv-50, Mem-Gallery's held-out conversations), else ``all``. Raises ValueError for an unknown
    dataset."""
    if name not in SPLITS:
        raise ValueError(f"unknown dataset {name!r}; choose one of {sorted(SPLITS)}")
    return "test" if "test" in SPLITS[name] else "all"


class DatasetError(Exception):
    """A benchmark file is missing, unreadable or does not match its documented schema."""


def _repo_data_root() -> Path:
    # src/memfrontier/eval/datasets/__init__.py -> parents[4] is the repo root
    return (Path(__file__).resolve().parents[4] / ".." / "shared" / "data").resolve()


def data_root(explicit: str | os.PathLike | None = None) -> Path:
    """The folder holding ``locomo/``, ``longmemeval/``, ``hotpotqa/``.

    Order: ``explicit`` argument, then ``$MEMFRONTIER_DATA``, then ``./../shared/data`` (relative
    to the working directory) if it exists, then ``<repo>/../shared/data`` if it exists. When
    nothing exists the working-directory candidate is returned (loaders then raise
    :class:`DatasetError` naming it). The folder is not checked for the explicit and env cases.
    """
    if explicit is not None:
        return Path(explicit).expanduser()
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env).expanduser()
    cwd_candidate = Path.cwd() / ".." / "shared" / "data"
    if cwd_candidate.is_dir():
        return cwd_candidate.resolve()
    repo_candidate = _repo_data_root()
    if repo_candidate.is_dir():
        return repo_candidate
    return cwd_candidate.resolve()


_data_root = data_root  # load_dataset's parameter shadows the function name


def how_to_override() -> str:
    return (
        f"set {ENV_VAR}=/path/to/data (the folder holding locomo/, longmemeval/, hotpotqa/), "
        "pass --data-root on the CLI, or give the loader an explicit file path"
    )


def dataset_path(name: str, path: str | os.PathLike | None = None) -> Path:
    """Resolve the file for dataset ``name``: ``path`` may be the file, a data-root folder, or None."""
    if name not in DATASET_FILES:
        raise ValueError(f"unknown dataset {name!r}; choose one of {sorted(DATASET_FILES)}")
    if path is None:
        return data_root() / DATASET_FILES[name]
    p = Path(path).expanduser()
    if p.is_dir():
        return p / DATASET_FILES[name]
    return p


def read_json(path: Path, dataset: str) -> Any:
    """Parse a JSON file, gzip-compressed when its name ends in ``.gz``; raises :class:`DatasetError`
    (missing file, bad gzip, bad UTF-8, bad JSON)."""
    if not path.is_file():
        raise DatasetError(f"{dataset} data file not found: {path} ; {how_to_override()}")
    try:
        opener = gzip.open if path.name.endswith(".gz") else open
        with opener(path, "rt", encoding="utf-8") as fh:
            return json.load(fh)
    except (json.JSONDecodeError, UnicodeDecodeError, gzip.BadGzipFile, EOFError) as exc:
        raise DatasetError(f"{dataset} data file is corrupt or not JSON: {path}: {exc}") from exc
    except OSError as exc:
        raise DatasetError(f"cannot read {dataset} data file {path}: {exc}; {how_to_override()}") from exc


def schema_error(path: Path, dataset: str, exc: BaseException) -> DatasetError:
    """Wrap a KeyError/TypeError/ValueError raised while converting records."""
    return DatasetError(f"{dataset} data file {path} does not match the expected schema: {type(exc).__name__}: {exc}")


def load_conversations(name: str, path: str | os.PathLike | None, convert, keep=None) -> list:
    """Read dataset ``name``'s JSON list and ``convert`` each item into a Conversation (only the items
    for which ``keep(item)`` is true, when ``keep`` is given: a split read without converting the rest).

    Raises :class:`DatasetError` when the file is missing, not JSON, not a list, empty, or an item does
    not match the schema ``convert`` expects (KeyError/TypeError/ValueError/AttributeError).
    """
    p = dataset_path(name, path)
    data = read_json(p, name)
    if not isinstance(data, list):
        raise DatasetError(f"{name} data file {p} does not match the expected schema: top level is not a list")
    if not data:
        raise DatasetError(f"{name} data file {p} holds no items (an empty list): nothing to evaluate")
    try:
        convs = [convert(item) for item in data if keep is None or keep(item)]
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise schema_error(p, name, exc) from exc
    for c in convs:
        c.meta["source"] = str(p)
        skip_empty_turns(c)
    return convs


def skip_empty_turns(conv) -> list[str]:
    """Drop ``conv``'s records with nothing to see (:func:`~memfrontier.store.records.is_empty`) in
    place, and their ids from its questions' ``evidence_ids``; returns the dropped ids, also set as
    ``conv.meta["empty_turns_skipped"]``."""
    from ...store.records import is_empty

    skipped = [r.id for r in conv.records if is_empty(r)]
    conv.meta["empty_turns_skipped"] = skipped
    if skipped:
        gone = set(skipped)
        conv.records = [r for r in conv.records if r.id not in gone]
        for q in conv.questions:
            if gone.intersection(q.evidence_ids):
                q.evidence_ids = [e for e in q.evidence_ids if e not in gone]
    return skipped


def file_sha256(path: str | os.PathLike) -> str:
    """Hex sha256 of a file's bytes (recorded with every result). Raises DatasetError if missing."""
    p = Path(path)
    if not p.is_file():
        raise DatasetError(f"cannot hash {p}: file not found; {how_to_override()}")
    h = hashlib.sha256()
    with p.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def load_dataset(
    name: str,
    split: str = "all",
    data_root: str | os.PathLike | None = None,
    data_file: str | os.PathLike | None = None,
):
    """Load ``name`` (locomo | longmemeval | hotpotqa | mem_gallery) and apply ``split``.

    ``data_file`` reads that file (in the dataset's format, e.g. the official LongMemEval S or M
    file, or another LoCoMo-format file) instead of the data root's default one.

    Splits: locomo ``test`` / ``train`` / ``all`` (see :func:`locomo_split`); mem_gallery ``train`` / ``val`` /
    ``test`` / ``all`` (see :func:`mem_gallery_split`); longmemeval_s (LongMemEval's S setting, ~50
    sessions a question) ``test`` / ``train`` / ``all`` (see :func:`load_longmemeval_s`); the others ``all``.
    Returns ``list[Conversation]``. Raises ValueError for an unknown name or split and
    :class:`DatasetError` for a missing or corrupt file.
    """
    if name not in DATASET_FILES:
        raise ValueError(f"unknown dataset {name!r}; choose one of {sorted(DATASET_FILES)}")
    if split not in SPLITS[name]:
        raise ValueError(f"unknown split {split!r} for {name}; choose one of {list(SPLITS[name])}")
    if data_file is not None:
        path = Path(data_file).expanduser()
        if path.is_dir():
            raise DatasetError(
                f"the data file {path} is a folder: give a {name} file, or the folder that holds "
                f"{DATASET_FILES[name]} as the data root (--data-root / {ENV_VAR})"
            )
        if not path.is_file():
            raise DatasetError(f"{name} data file not found: {path} (the file given as the data file)")
    else:
        path = _data_root(data_root) / DATASET_FILES[name]
    if name == "locomo":
        return locomo_split(load_locomo(path), split)
    if name == "longmemeval":
        return load_longmemeval(path)
    if name == "longmemeval_s":
        return load_longmemeval_s(path, split, data_root=_data_root(data_root))
    if name == "mem_gallery":
        return mem_gallery_split(load_mem_gallery(path), split)
    return load_hotpotqa(path)


# Re-exports (imported last: the loaders import the helpers above).
from .hotpotqa import load_hotpotqa  # noqa: E402
from .locomo import load_locomo, locomo_split  # noqa: E402
from .longmemeval import load_longmemeval, load_longmemeval_s  # noqa: E402
from .mem_gallery import load_mem_gallery, mem_gallery_split  # noqa: E402

__all__ = [
    "DATASET_FILES",
    "DatasetError",
    "ENV_VAR",
    "LONGMEMEVAL_DATASETS",
    "data_root",
    "dataset_path",
    "default_split",
    "file_sha256",
    "load_dataset",
    "load_hotpotqa",
    "load_locomo",
    "load_longmemeval",
    "load_longmemeval_s",
    "load_mem_gallery",
    "mem_gallery_split",
    "locomo_split",
    "skip_empty_turns",
]
