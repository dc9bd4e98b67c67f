"""Unit tests of model-output parsing (pure text; no model)."""

from __future__ import annotations

import pytest

from memfrontier.core.ledger import Ledger, use_ledger
from memfrontier.llm.parsing import (
    ParseError,
    extract_tag,
    find_tag,
    parse_json,
    parse_or_count,
    strip_think,
)


# --- JSON: well-formed but wrapped -------------------------------------------------------------
def test_fenced_json_block():
    text = 'Here you go:\n```json\n{"name": "Alice", "age": 31}\n```\nAnything else?'
    r = parse_json(text, expect="object")
    assert r.ok and not r.truncated and not r.repaired and r.error is None
    assert r.value == {"name": "Alice", "age": 31}


def test_fence_without_language_and_array():
    r = parse_json("```\n[1, 2, 3]\n```", expect="array")
    assert r.ok and r.value == [1, 2, 3]


def test_fence_content_preferred_over_prose_json():
    text = 'Example format: {"x": 0}\n```json\n{"x": 1, "y": 2}\n```'
    assert parse_json(text, expect="object").value == {"x": 1, "y": 2}


def test_prose_before_and_after():
    text = 'Sure! The facts are {"facts": ["a cat", "a dog"], "n": 2} -- hope this helps.'
    r = parse_json(text, expect="object")
    assert r.ok and r.value == {"facts": ["a cat", "a dog"], "n": 2}


def test_prose_bracket_citation_loses_to_real_array():
    text = 'As noted in [1], the answer is: [{"q": "who", "a": "Bob"}]'
    r = parse_json(text, expect="array")
    assert r.ok and r.value == [{"q": "who", "a": "Bob"}]


def test_braces_inside_strings_and_escapes():
    text = '{"s": "br}ace[", "t": "q\\"x"}'
    assert parse_json(text, expect="object").value == {"s": "br}ace[", "t": 'q"x'}


def test_expect_none_accepts_whole_text_scalar_but_not_prose_number():
    assert parse_json("42").value == 42
    assert parse_json('  "yes" ').value == "yes"
    r = parse_json("The answer is 42")
    assert not r.ok and r.value is None and "no JSON" in r.error


def test_expect_type_mismatch_is_not_ok():
    r = parse_json('{"a": 1}', expect="array")
    assert not r.ok and r.value is None and "JSON array" in r.error


def test_repairable_json_is_flagged():
    r = parse_json("{'a': 1, 'b': [1, 2,],}", expect="object")
    assert r.ok and r.repaired and r.value == {"a": 1, "b": [1, 2]}


def test_think_block_is_ignored():
    r = parse_json('<think>maybe {"z": 0}?</think>\n{"a": 1}', expect="object")
    assert r.ok and r.value == {"a": 1}


# --- truncation -------------------------------------------------------------------------------
def test_truncated_array_keeps_complete_items_only():
    text = '[{"fact": "Alice likes tea"}, {"fact": "Bob owns a dog"}, {"fact": "Carol w'
    r = parse_json(text, expect="array")
    assert r.ok and r.truncated
    assert r.value == [{"fact": "Alice likes tea"}, {"fact": "Bob owns a dog"}]


def test_truncated_array_of_scalars_drops_possibly_partial_last():
    r = parse_json("[10, 20, 3", expect="array")
    assert r.ok and r.truncated and r.value == [10, 20]
    r = parse_json('```json\n["a", "b", "c', expect="array")  # unclosed fence too
    assert r.ok and r.truncated and r.value == ["a", "b"]


def test_truncated_object_keeps_complete_pairs():
    r = parse_json('{"a": 1, "b": "two", "c": "thr', expect="object")
    assert r.ok and r.truncated and r.value == {"a": 1, "b": "two"}
    r = parse_json('{"a": 1, "b"', expect="object")
    assert r.ok and r.truncated and r.value == {"a": 1}


def test_truncated_nested_keeps_outer_structure():
    text = '{"topic": "pets", "items": [{"a": 1}, {"b": 2}, {"c":'
    r = parse_json(text, expect="object")
    assert r.ok and r.truncated
    assert r.value == {"topic": "pets", "items": [{"a": 1}, {"b": 2}]}


def test_truncated_with_an_empty_partial_container_drops_its_key():
    r = parse_json('{"name": "x", "items": [', expect="object")
    assert r.ok and r.truncated and r.value == {"name": "x"}


def test_truncated_before_any_item_is_not_ok():
    r = parse_json('[{"fact": "Ali', expect="array")
    assert not r.ok and r.truncated and r.value is None
    assert "truncated" in r.error


# --- failures ---------------------------------------------------------------------------------
@pytest.mark.parametrize("text", ["", "   \n\t ", None])
def test_empty_output(text):
    r = parse_json(text, expect="object")
    assert not r.ok and r.value is None and "empty" in r.error


def test_only_think_is_empty():
    r = parse_json("<think>I will answer later</think>")
    assert not r.ok and "empty" in r.error


@pytest.mark.parametrize(
    "text,expect",
    [
        ("hello world, no json here", None),
        ("[see below]", "array"),  # json_repair would invent ["see below"]
        ("{foo}", "object"),
        ("I cannot answer that.", "object"),
    ],
)
def test_garbage_is_never_ok(text, expect):
    r = parse_json(text, expect=expect)
    assert not r.ok and r.value is None and r.error


def test_parse_or_count_counts_failures_and_truncations():
    led = Ledger()
    with use_ledger(led):
        assert parse_or_count('{"a": 1}', "parse_error.router", expect="object").value == {"a": 1}
        assert not parse_or_count("nope", "parse_error.router", expect="object").ok
        r = parse_or_count("[1, 2, 3", "parse_error.router", expect="array")
        assert r.ok and r.truncated and r.value == [1, 2]
        with pytest.raises(ParseError) as ei:
            parse_or_count("", "parse_error.judge", raise_on_error=True)
    assert ei.value.result is not None and "empty" in ei.value.result.error
    assert led.events == {"parse_error.router": 1, "parse_error.router.truncated": 1, "parse_error.judge": 1}


def test_parse_or_count_without_ledger_is_fine():
    assert not parse_or_count("nope", "parse_error.x").ok


# --- tags -------------------------------------------------------------------------------------
def test_extract_tag_closed():
    assert extract_tag("Reasoning... <answer> Paris </answer> done", "answer") == "Paris"


def test_extract_tag_takes_last_and_is_case_insensitive():
    text = "I will write <answer>X</answer> at the end.\n<ANSWER>Berlin</ANSWER>"
    assert extract_tag(text, "answer") == "Berlin"


def test_extract_tag_unclosed_final_tag_is_flagged():
    led = Ledger()
    with use_ledger(led):
        assert extract_tag("Thinking. <answer>The 3rd of May, 20", "answer") == "The 3rd of May, 20"
    assert led.events == {"unclosed_tag.answer": 1}
    m = find_tag("<answer>The 3rd of May", "answer")
    assert m.text == "The 3rd of May" and m.closed is False and m.opened is True


def test_extract_tag_empty_unclosed_falls_back_to_last_closed():
    m = find_tag("<answer>42</answer> then again <answer>", "answer")
    assert m.text == "42" and m.closed


def test_extract_tag_only_closing_tag():
    m = find_tag("Paris</answer>", "answer")
    assert m.text == "Paris" and m.closed and not m.opened


def test_extract_tag_absent():
    assert extract_tag("no tags here", "answer") is None
    assert extract_tag("", "answer") is None
    assert find_tag(None, "answer") is None


# --- think ------------------------------------------------------------------------------------
def test_strip_think_basic():
    assert strip_think("<think>2+2 is 4</think>\nThe answer is 4.") == ("2+2 is 4", "The answer is 4.")


def test_strip_think_multiple_blocks():
    rat, rest = strip_think("<think>a</think>X<think>b</think>Y")
    assert rat == "a\n\nb" and rest == "XY"


def test_strip_think_unclosed_and_orphan_close():
    assert strip_think("Answer: <think>still thinking") == ("still thinking", "Answer:")
    assert strip_think("pre-inserted reasoning</think>Final") == ("pre-inserted reasoning", "Final")


def test_strip_think_none():
    assert strip_think("plain") == ("", "plain")
    assert strip_think("") == ("", "")
