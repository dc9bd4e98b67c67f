"""Excerpts of long turns (memfrontier.retrieve.excerpt), counted in words to be checked by hand,
and on a real store with MiniLM's tokens through rag's turn context."""

import pytest

from memfrontier.retrieve.excerpt import GAP, excerpt, sentences

WORDS = lambda t: len(t.split())  # noqa: E731 - a token count one can do by hand

ANSWER = (
    "Here are some ideas for your trip. "  # 7 words
    "Lisbon has trams and custard tarts. "  # 6
    "For the hike, book the Sintra train early. "  # 8
    "The Sintra palace opens at nine in summer. "  # 8
    "Pack water and sunscreen."  # 4
)


def test_a_text_that_fits_is_kept_whole():
    assert excerpt(ANSWER, "when does the palace open?", 33, WORDS) == ANSWER
    assert sentences("One. Two!\n\nThree? four") == ["One.", "Two!", "Three?", "four"]


def test_the_best_matching_sentence_grows_toward_the_better_side():
    # "palace", "open" (stemmed: opens) match sentence 4 only; with 20 words: sentence 4 (8) with its
    # gap marks (2) = 10; then sentence 3 (8 words, "sintra"? no question term: 0) and sentence 5 (4, 0
    # terms): a tie, so the later side first: 3 + 8 + 4 ... "… S4 S5" = 1 + 8 + 4 = 13; then S3: 21 > 20
    got = excerpt(ANSWER, "When does the palace open?", 20, WORDS)
    assert got == f"{GAP} The Sintra palace opens at nine in summer. Pack water and sunscreen."
    # the question names the train too: sentence 3 has 2 terms (sintra, train), sentence 4 has 3
    # (sintra, palace, open): start at 4, then 3 (2 terms) before 5 (0): "… S3 S4 …" = 1+8+8+1 = 18
    got = excerpt(ANSWER, "Which Sintra train gets me to the palace before it opens?", 20, WORDS)
    assert got == f"{GAP} For the hike, book the Sintra train early. The Sintra palace opens at nine in summer. {GAP}"
    assert WORDS(got) <= 20


def test_no_matching_word_starts_at_the_first_sentence():
    got = excerpt(ANSWER, "xyzzy?", 15, WORDS)  # S1 (7) + S2 (6) + " …" = 14; + S3 would be 22
    assert got == f"Here are some ideas for your trip. Lisbon has trams and custard tarts. {GAP}"


def test_a_sentence_longer_than_the_limit_keeps_its_leading_words():
    text = "Intro. " + " ".join(f"w{i}" for i in range(50)) + " palace."
    got = excerpt(text, "the palace", 10, WORDS)
    assert got == f"{GAP} w0 w1 w2 w3 w4 w5 w6 w7 {GAP}" and WORDS(got) == 10
    assert excerpt("a b c d e", "q", 1, WORDS) == GAP  # not even one word fits beside the mark
    with pytest.raises(ValueError, match="at least 1"):
        excerpt(ANSWER, "q", 0, WORDS)
