"""Fitting text into a token budget (core/fit.py), with hand-counted tokens."""

import pytest

from memfrontier.core.fit import fit_lines, shrink_to_fit


def words(s: str) -> int:
    """A word tokenizer: one token per whitespace-separated word."""
    return len(s.split())


def test_fit_lines_keeps_the_leading_lines_that_fit_one_token_each_for_the_newline():
    lines = ["Alice likes tea", "Bob runs", "Carol sings loudly today"]  # 3+1, 2+1, 4+1 tokens
    assert fit_lines(lines, 7, words) == (["Alice likes tea", "Bob runs"], 7)  # exactly full
    assert fit_lines(lines, 6, words) == (["Alice likes tea"], 4)
    assert fit_lines(lines, 12, words) == (lines, 12)
    assert fit_lines(lines, 3, words) == ([], 0)


def test_fit_lines_stops_at_the_first_line_that_does_not_fit():
    # "b" (2 tokens) would fit after the 5-token line is skipped, but the order is the priority
    assert fit_lines(["aaaa", "b"], 4, len) == ([], 0)
    assert fit_lines(["ab", "cdefgh", "i"], 9, len) == (["ab"], 3)


def test_fit_lines_of_nothing_and_of_empty_lines():
    assert fit_lines([], 10, len) == ([], 0)
    assert fit_lines(["", "", ""], 2, len) == (["", ""], 2)  # an empty line still costs its newline
    assert fit_lines(iter(["xy", "z"]), 5, len) == (["xy", "z"], 5)  # any iterable


def test_shrink_to_fit_cuts_geometrically_by_the_factor():
    counted = []

    def count(s: str) -> int:
        counted.append(len(s))
        return len(s)

    # 0.9: 10 -> 9 -> 8 -> 7 characters; 0.85: 10 -> 8 -> 6 (overshoots 7: not the longest prefix)
    assert shrink_to_fit("abcdefghij", 7, count, 0.9) == "abcdefg"
    assert counted == [10, 9, 8, 7]
    counted.clear()
    assert shrink_to_fit("abcdefghij", 7, count, 0.85) == "abcdef"
    assert counted == [10, 8, 6]


def test_shrink_to_fit_returns_fitting_text_unchanged_and_empty_when_nothing_fits():
    assert shrink_to_fit("Alice likes tea", 3, words) == "Alice likes tea"
    assert shrink_to_fit("abc", 0, len) == ""  # 3 -> 2 -> 1 -> 0 characters
    assert shrink_to_fit("", 0, len) == ""


@pytest.mark.parametrize("factor", [0.0, 1.0, 1.5, -0.1])
def test_shrink_to_fit_rejects_a_factor_outside_0_1(factor):
    with pytest.raises(ValueError, match="factor must be in"):
        shrink_to_fit("abc", 1, len, factor)
