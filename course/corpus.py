"""The corpus of assignment 08: English-like sentences from a small probabilistic grammar, generated here.

    the old fox chases two mice near a river.
    some children sleep.

Nothing is downloaded. Because the grammar is known, so is the probability of every sentence
(:func:`sentence_probability`) and the entropy of the text per character (:func:`entropy_per_character`): the
cross-entropy no model can beat. A sentence is a subject (a noun phrase), a verb that agrees with the subject's
number, an object for transitive verbs, and sometimes a place; articles read "an" before a vowel. Every word
belongs to exactly one slot, so a sentence has exactly one derivation and its probability is the product of the
choices that made it. Sentences end with ".\\n"; the text is read one character at a time.
"""

import functools
import math
import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

import torch

#: (probability, singular, plural)
NOUNS = ((0.14, "cat", "cats"), (0.13, "dog", "dogs"), (0.11, "fox", "foxes"), (0.10, "owl", "owls"),
         (0.09, "mouse", "mice"), (0.09, "child", "children"), (0.08, "bird", "birds"),
         (0.07, "horse", "horses"), (0.06, "eagle", "eagles"), (0.05, "wolf", "wolves"), (0.04, "ant", "ants"),
         (0.04, "farmer", "farmers"))
ADJECTIVES = ((0.2, "old"), (0.2, "small"), (0.15, "quiet"), (0.15, "brown"), (0.1, "angry"), (0.1, "happy"),
              (0.1, "ugly"))
#: determiners by number; "a" becomes "an" before a vowel
DETERMINERS = {"sg": ((0.5, "the"), (0.3, "a"), (0.1, "every"), (0.1, "this")),
               "pl": ((0.5, "the"), (0.2, "some"), (0.15, "two"), (0.15, "many"))}
NUMBERS = ((0.6, "sg"), (0.4, "pl"))
P_ADJECTIVE = 0.35
#: (probability, third person singular, plural)
INTRANSITIVE = ((0.4, "sleeps", "sleep"), (0.3, "runs", "run"), (0.2, "sings", "sing"), (0.1, "waits", "wait"))
TRANSITIVE = ((0.3, "sees", "see"), (0.25, "chases", "chase"), (0.2, "follows", "follow"), (0.15, "likes", "like"),
              (0.1, "watches", "watch"))
P_TRANSITIVE = 0.6
PLACES = ((0.3, "near"), (0.3, "behind"), (0.2, "under"), (0.2, "above"))
PLACE_NOUNS = ((0.3, "river", "rivers"), (0.3, "tree", "trees"), (0.2, "house", "houses"), (0.2, "hill", "hills"))
P_PLACE = 0.3
END = ".\n"

#: every character the text uses, the newline first; a token id is an index into it
CHARACTERS = "\n ." + "".join(sorted({c for words in (NOUNS, ADJECTIVES, INTRANSITIVE, TRANSITIVE, PLACES,
                                                       PLACE_NOUNS, *DETERMINERS.values())
                                      for entry in words for word in entry[1:] for c in word} | {"n"}))


def encode(text: str) -> list[int]:
    """Token ids of the characters of text."""
    return [CHARACTERS.index(c) for c in text]


def decode(ids: Sequence[int] | torch.Tensor) -> str:
    """The text of a sequence of token ids."""
    return "".join(CHARACTERS[i] for i in (ids.tolist() if isinstance(ids, torch.Tensor) else ids))


# ------------------------------------------------------------------------------------------- the grammar

def _pick(rng: random.Random, table: Sequence[tuple]) -> tuple:
    return rng.choices(table, weights=[entry[0] for entry in table])[0]


def _article(determiner: str, next_word: str) -> str:
    return "an" if determiner == "a" and next_word[0] in "aeiou" else determiner


def _noun_phrase(rng: random.Random, nouns: Sequence[tuple], adjectives: bool) -> str:
    number = _pick(rng, NUMBERS)[1]
    words = [_pick(rng, DETERMINERS[number])[1]]
    if adjectives and rng.random() < P_ADJECTIVE:
        words.append(_pick(rng, ADJECTIVES)[1])
    noun = _pick(rng, nouns)
    words.append(noun[1] if number == "sg" else noun[2])
    words[0] = _article(words[0], words[1])
    return " ".join(words), number


def sentence(rng: random.Random) -> str:
    """One random sentence, ".\\n" included."""
    subject, number = _noun_phrase(rng, NOUNS, adjectives=True)
    words = [subject]
    if rng.random() < P_TRANSITIVE:
        verb = _pick(rng, TRANSITIVE)
        words += [verb[1] if number == "sg" else verb[2], _noun_phrase(rng, NOUNS, adjectives=True)[0]]
    else:
        verb = _pick(rng, INTRANSITIVE)
        words.append(verb[1] if number == "sg" else verb[2])
    if rng.random() < P_PLACE:
        words += [_pick(rng, PLACES)[1], _noun_phrase(rng, PLACE_NOUNS, adjectives=False)[0]]
    return " ".join(words) + END


def sentences(n: int, seed: int) -> list[str]:
    """n random sentences, the same for the same seed on every machine."""
    rng = random.Random(seed)
    return [sentence(rng) for _ in range(n)]


# ------------------------------------------------------------------------------------------- exact figures

def _noun_phrases(nouns: Sequence[tuple], adjectives: bool) -> dict[str, float]:
    """Every noun phrase the grammar can write, with its probability."""
    out: dict[str, float] = {}
    for p_number, number in NUMBERS:
        adjective_choices = [(1.0, None)] if not adjectives else \
            [(1 - P_ADJECTIVE, None), *((P_ADJECTIVE * p, a) for p, a in ADJECTIVES)]
        for p_det, determiner in DETERMINERS[number]:
            for p_adj, adjective in adjective_choices:
                for p_noun, *forms in nouns:
                    noun = forms[0] if number == "sg" else forms[1]
                    words = [determiner, *([adjective] if adjective else []), noun]
                    words[0] = _article(determiner, words[1])
                    phrase = " ".join(words)
                    out[phrase] = out.get(phrase, 0.0) + p_number * p_det * p_adj * p_noun
    return out


@functools.cache
def _parts() -> Mapping[str, Mapping[str, float]]:
    """Every noun phrase of each slot with its probability (computed once; read-only)."""
    subject = MappingProxyType(_noun_phrases(NOUNS, adjectives=True))
    return MappingProxyType({"subject": subject, "object": subject,
                             "place": MappingProxyType(_noun_phrases(PLACE_NOUNS, adjectives=False))})


def _number_of(phrase: str) -> str:
    noun = phrase.rsplit(" ", 1)[1]
    return "sg" if any(noun == entry[1] for entry in (*NOUNS, *PLACE_NOUNS)) else "pl"


def sentence_probability(text: str) -> float:
    """The probability that the grammar writes exactly this sentence (".\\n" included); 0 if it never does."""
    if not text.endswith(END):
        return 0.0
    words = text[: -len(END)].split(" ")
    parts = _parts()
    verbs = {form: (p, table) for table in (INTRANSITIVE, TRANSITIVE) for p, *forms in table for form in forms}
    for cut in (2, 3):  # the subject is 2 or 3 words
        subject = " ".join(words[:cut])
        if subject not in parts["subject"] or cut >= len(words) or words[cut] not in verbs:
            continue
        p_verb, table = verbs[words[cut]]
        number = _number_of(subject)
        form_index = 1 if number == "sg" else 2
        if not any(entry[form_index] == words[cut] for entry in table):
            return 0.0  # the verb does not agree with the subject
        p = parts["subject"][subject] * p_verb * (P_TRANSITIVE if table is TRANSITIVE else 1 - P_TRANSITIVE)
        rest = words[cut + 1:]
        if table is TRANSITIVE:
            for size in (2, 3):
                if " ".join(rest[:size]) in parts["object"]:
                    p *= parts["object"][" ".join(rest[:size])]
                    rest = rest[size:]
                    break
            else:
                return 0.0
        if not rest:
            return p * (1 - P_PLACE)
        places = dict((word, q) for q, word in PLACES)
        if rest[0] in places and " ".join(rest[1:]) in parts["place"]:
            return p * P_PLACE * places[rest[0]] * parts["place"][" ".join(rest[1:])]
        return 0.0
    return 0.0


def _entropy_bits(distribution: Mapping[str, float] | Sequence[float]) -> float:
    probabilities = distribution.values() if isinstance(distribution, Mapping) else distribution
    return -sum(p * math.log2(p) for p in probabilities if p > 0)


def _mean_length(distribution: Mapping[str, float]) -> float:
    return sum(p * len(phrase) for phrase, p in distribution.items())


@dataclass(frozen=True)
class Figures:
    """Exact figures of the grammar: bits per sentence, mean and largest characters per sentence (".\\n" included)."""

    bits_per_sentence: float
    characters_per_sentence: float
    longest_sentence: int

    @property
    def bits_per_character(self) -> float:
        return self.bits_per_sentence / self.characters_per_sentence


def figures() -> Figures:
    """The entropy of a sentence and its mean length, computed from the grammar (no sampling).

    A sentence is subject, verb, [object], [place] — independent choices given the subject's number (the verb's
    form is fixed by it), and every sentence has one derivation, so the entropies of the parts add up.
    """
    parts = _parts()
    h_verb = (_entropy_bits([P_TRANSITIVE, 1 - P_TRANSITIVE])
              + P_TRANSITIVE * _entropy_bits([p for p, *_ in TRANSITIVE])
              + (1 - P_TRANSITIVE) * _entropy_bits([p for p, *_ in INTRANSITIVE]))
    h_place = _entropy_bits([P_PLACE, 1 - P_PLACE]) + P_PLACE * (_entropy_bits([p for p, _ in PLACES])
                                                                + _entropy_bits(parts["place"]))
    bits = _entropy_bits(parts["subject"]) + h_verb + P_TRANSITIVE * _entropy_bits(parts["object"]) + h_place

    def mean_verb_length(table: Sequence[tuple]) -> float:
        p_sg = dict((n, p) for p, n in NUMBERS)["sg"]
        return sum(p * (p_sg * len(sg) + (1 - p_sg) * len(pl)) for p, sg, pl in table)

    length = (_mean_length(parts["subject"]) + 1
              + P_TRANSITIVE * (mean_verb_length(TRANSITIVE) + 1 + _mean_length(parts["object"]))
              + (1 - P_TRANSITIVE) * mean_verb_length(INTRANSITIVE)
              + P_PLACE * (1 + sum(p * len(w) for p, w in PLACES) + 1 + _mean_length(parts["place"]))
              + len(END))
    longest = (max(map(len, parts["subject"])) + 1 + max(len(v) for _, *forms in TRANSITIVE for v in forms) + 1
               + max(map(len, parts["object"])) + 1 + max(len(w) for _, w in PLACES) + 1
               + max(map(len, parts["place"])) + len(END))
    return Figures(bits, length, longest)


def entropy_per_character() -> float:
    """Bits per character of the grammar's text: the cross-entropy no model can go below, on average."""
    return figures().bits_per_character


# ------------------------------------------------------------------------------------------- data

@dataclass(frozen=True)
class Corpus:
    """The training text, and held-out sentences never used for training (fresh draws from the grammar)."""

    train: str
    held_out: tuple[str, ...]


def corpus(n_train: int = 40_000, n_held_out: int = 2_000, seed: int = 0) -> Corpus:
    """The notebook's data, deterministic: n_train sentences of training text, n_held_out held-out sentences."""
    return Corpus("".join(sentences(n_train, seed)), tuple(sentences(n_held_out, seed + 1)))


def windows(text: str, length: int, batch_size: int, seed: int = 0) -> Iterator[torch.Tensor]:
    """Endless batches (batch_size, length) of token ids: windows of text starting at a sentence's first
    character, preceded by the newline that ended the sentence before it (so position 0 always holds "\\n")."""
    ids = torch.tensor(encode(text), dtype=torch.long)
    starts = torch.nonzero(ids[: len(ids) - length] == 0).squeeze(1)  # (n,) positions of "\n"
    generator = torch.Generator().manual_seed(seed)
    offsets = torch.arange(length)
    while True:
        chosen = starts[torch.randint(len(starts), (batch_size,), generator=generator)]  # (b,)
        yield ids[chosen.unsqueeze(1) + offsets]  # (b, length)
