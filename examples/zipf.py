"""A seeded Zipf corpus: sentences over a vocabulary whose word frequencies follow Zipf's law.

Real text is like this: a few words are very common, most are rare (the ``r``-th most frequent
word occurs about ``1 / r**s`` as often as the first). The vocabulary is made of pronounceable
pseudo-words, distinct and deterministic for a seed, so a run is the same in every process.

    >>> corpus = zipf_sentences(3, vocab=50, seed=1)
    >>> len(corpus), all(len(s.split()) == 10 for s in corpus)
    (3, True)
    >>> corpus == zipf_sentences(3, vocab=50, seed=1)
    True
"""

from __future__ import annotations

import functools
import itertools
import random

_ONSETS = ["b", "c", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "z"]
_VOWELS = ["a", "e", "i", "o", "u", "ai", "ou"]
_CODAS = ["", "n", "r", "s", "t", "l"]


def vocabulary(size: int, seed: int = 0) -> list[str]:
    """``size`` distinct pseudo-words, shuffled by ``seed`` (rank 1 first)."""
    syllables = ["".join(p) for p in itertools.product(_ONSETS, _VOWELS, _CODAS)]
    words: list[str] = []
    for n in itertools.count(1):
        words.extend("".join(p) for p in itertools.product(syllables, repeat=n))
        words = list(dict.fromkeys(words))  # two syllable splits may spell one word
        if len(words) >= size:
            break
    chosen = random.Random(f"vocab/{seed}").sample(words, size)
    return chosen


def zipf_sentences(
    count: int, vocab: int = 10_000, seed: int = 0, words_per_sentence: int = 10, s: float = 1.0
) -> list[str]:
    """``count`` sentences of ``words_per_sentence`` words drawn with Zipf weights."""
    words = vocabulary(vocab, seed)
    weights = list(itertools.accumulate(1.0 / (rank**s) for rank in range(1, vocab + 1)))
    rng = random.Random(f"zipf/{seed}")
    drawn = rng.choices(words, cum_weights=weights, k=count * words_per_sentence)
    k = words_per_sentence
    return [" ".join(drawn[i * k : (i + 1) * k]) for i in range(count)]


@functools.lru_cache(maxsize=2)
def cached_corpus(count: int, vocab: int, seed: int = 0) -> tuple[str, ...]:
    """``zipf_sentences(count, vocab, seed)``, made once per process (a Spark worker's too)."""
    return tuple(zipf_sentences(count, vocab, seed))
