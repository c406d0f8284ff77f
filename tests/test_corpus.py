"""The text of assignment 08: deterministic, one derivation per sentence, and exact figures that sampling confirms."""

import itertools
import math
import random

import torch

from course import corpus as grammar
from course.corpus import CHARACTERS, corpus, decode, encode, figures, sentence_probability, sentences, windows


def test_the_same_seed_gives_the_same_text_and_another_seed_other_text():
    assert sentences(200, seed=0) == sentences(200, seed=0)
    assert sentences(200, seed=1) != sentences(200, seed=0)
    data = corpus(n_train=300, n_held_out=20)
    assert data.train == "".join(sentences(300, 0)) and data.held_out == tuple(sentences(20, 1))


def test_every_word_belongs_to_one_slot_so_every_sentence_has_one_derivation():
    slots = {
        "determiner": {w for table in grammar.DETERMINERS.values() for _, w in table} | {"an"},
        "adjective": {w for _, w in grammar.ADJECTIVES},
        "noun": {w for _, *forms in grammar.NOUNS for w in forms},
        "verb": {w for table in (grammar.INTRANSITIVE, grammar.TRANSITIVE) for _, *forms in table for w in forms},
        "preposition": {w for _, w in grammar.PLACES},
        "place": {w for _, *forms in grammar.PLACE_NOUNS for w in forms},
    }
    for (a, words_a), (b, words_b) in itertools.combinations(slots.items(), 2):
        assert not words_a & words_b, f"{a} and {b} share {words_a & words_b}"
    forms = [form for table in (grammar.NOUNS, grammar.PLACE_NOUNS, grammar.INTRANSITIVE, grammar.TRANSITIVE)
             for _, *pair in table for form in pair]
    assert len(forms) == len(set(forms)), "singular and plural forms must differ"


def test_probabilities_of_every_table_sum_to_one():
    for table in (grammar.NOUNS, grammar.ADJECTIVES, grammar.NUMBERS, grammar.INTRANSITIVE, grammar.TRANSITIVE,
                  grammar.PLACES, grammar.PLACE_NOUNS, *grammar.DETERMINERS.values()):
        assert math.isclose(sum(entry[0] for entry in table), 1.0), table


def test_every_sentence_has_a_probability_and_non_sentences_have_none():
    for text in sentences(3000, seed=5):
        assert sentence_probability(text) > 0, text
    assert sentence_probability("the cat sleeps.\n") > 0
    for wrong in ("the cat sleep.\n", "the cats sleeps.\n", "a owl runs.\n", "an cat runs.\n", "the cat sees.\n",
                  "the cat sleeps the dog.\n", "the cat sleeps", "cat sleeps.\n", "the cat sleeps near.\n"):
        assert sentence_probability(wrong) == 0, wrong


def test_the_exact_figures_agree_with_a_large_sample():
    """The entropy and the mean length computed from the grammar's tables match their sample averages."""
    exact = figures()
    sample = sentences(40_000, seed=11)
    bits = sum(-math.log2(sentence_probability(s)) for s in sample) / len(sample)
    length = sum(len(s) for s in sample) / len(sample)
    assert abs(bits - exact.bits_per_sentence) < 0.1  # the standard error is about 0.025 bits
    assert abs(length - exact.characters_per_sentence) < 0.15
    assert max(len(s) for s in sample) <= exact.longest_sentence == 68
    assert math.isclose(exact.bits_per_character, exact.bits_per_sentence / exact.characters_per_sentence)


def test_a_sentence_s_probability_is_the_product_of_the_choices_that_made_it():
    """Noun phrases sum to 1; a sentence assembled from random choices gets exactly the product of their
    probabilities, so the probabilities of all sentences sum to 1."""
    parts = grammar._parts()
    assert math.isclose(sum(parts["subject"].values()), 1.0) and math.isclose(sum(parts["place"].values()), 1.0)
    rng = random.Random(0)
    phrases = {name: sorted(part.items()) for name, part in parts.items()}
    for _ in range(2000):
        subject, p = rng.choice(phrases["subject"])
        number = grammar._number_of(subject)
        transitive = rng.random() < 0.5
        table = grammar.TRANSITIVE if transitive else grammar.INTRANSITIVE
        q, *forms = rng.choice(table)
        p *= q * (grammar.P_TRANSITIVE if transitive else 1 - grammar.P_TRANSITIVE)
        words = [subject, forms[0] if number == "sg" else forms[1]]
        if transitive:
            phrase, q = rng.choice(phrases["object"])
            words.append(phrase)
            p *= q
        if rng.random() < 0.5:
            (q, preposition), (phrase, r) = rng.choice(grammar.PLACES), rng.choice(phrases["place"])
            words += [preposition, phrase]
            p *= grammar.P_PLACE * q * r
        else:
            p *= 1 - grammar.P_PLACE
        text = " ".join(words) + grammar.END
        assert math.isclose(sentence_probability(text), p, rel_tol=1e-9), text


def test_characters_round_trip_and_windows_start_after_a_newline():
    text = "".join(sentences(500, seed=3))
    assert decode(encode(text)) == text and CHARACTERS[0] == "\n" and len(CHARACTERS) == 27
    batch = next(windows(text, 72, 16, seed=0))
    assert batch.shape == (16, 72) and batch.dtype == torch.long
    assert bool((batch[:, 0] == 0).all()), "every window starts with the newline that ended a sentence"
    assert torch.equal(batch, next(windows(text, 72, 16, seed=0)))
