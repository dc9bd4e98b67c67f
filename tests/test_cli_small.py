"""Small things of the command line a first try meets: counts in words, proxy prices labelled,
bool options as flags, no warning on stderr."""



from memfrontier.cli.pricing import run_proxy_caption, usd_label
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
