"""The translation task of assignment 07: dates written many ways, to be rewritten in ISO form.

"3rd of March 2021", "Mar 3, '21", "03/03/2021" and "Wednesday 3 March 2021" all become "2021-03-03".
Everything is generated here from a seed: nothing is downloaded. Numeric dates are written day first, and a
two-digit year yy means 19yy for yy >= 50 and 20yy otherwise, so every input has exactly one translation.
The held-out test set is split off by *date*: no date of it appears in training, in any format.
"""

import datetime
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch

PAD, BOS, EOS = 0, 1, 2
SPECIALS = ("<pad>", "<bos>", "<eos>")

FIRST_DATE = datetime.date(1950, 1, 1)
LAST_DATE = datetime.date(2049, 12, 31)

MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December")
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


def ordinal(n: int) -> str:
    """1 -> '1st', 2 -> '2nd', 3 -> '3rd', 11 -> '11th', 22 -> '22nd'."""
    if 11 <= n % 100 <= 13:
        return f"{n}th"
    return f"{n}{ {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th') }"


def _month(d: datetime.date) -> str:
    return MONTHS[d.month - 1]


def _mon(d: datetime.date) -> str:
    return MONTHS[d.month - 1][:3]


def _weekday(d: datetime.date) -> str:
    return WEEKDAYS[d.weekday()]


def _yy(d: datetime.date) -> str:
    return f"{d.year % 100:02d}"


#: name -> how a date is written; the examples are 2021-03-03, a Wednesday
FORMATS: dict[str, Callable[[datetime.date], str]] = {
    "ordinal of": lambda d: f"{ordinal(d.day)} of {_month(d)} {d.year}",  # 3rd of March 2021
    "short US, 'yy": lambda d: f"{_mon(d)} {d.day}, '{_yy(d)}",  # Mar 3, '21
    "dd/mm/yyyy": lambda d: f"{d.day:02d}/{d.month:02d}/{d.year}",  # 03/03/2021
    "weekday long": lambda d: f"{_weekday(d)} {d.day} {_month(d)} {d.year}",  # Wednesday 3 March 2021
    "long": lambda d: f"{d.day} {_month(d)} {d.year}",  # 3 March 2021
    "long US": lambda d: f"{_month(d)} {d.day}, {d.year}",  # March 3, 2021
    "dd-Mon-yyyy": lambda d: f"{d.day:02d}-{_mon(d)}-{d.year}",  # 03-Mar-2021
    "d.m.yy": lambda d: f"{d.day}.{d.month}.{_yy(d)}",  # 3.3.21
    "weekday short": lambda d: f"{_weekday(d)[:3]}, {d.day} {_mon(d)} {d.year}",  # Wed, 3 Mar 2021
    # Wednesday, March 3rd, 2021
    "weekday US ordinal": lambda d: f"{_weekday(d)}, {_month(d)} {ordinal(d.day)}, {d.year}",
    "upper": lambda d: f"{d.day} {_mon(d).upper()} {d.year}",  # 3 MAR 2021
    "d/m/yy": lambda d: f"{d.day}/{d.month}/{_yy(d)}",  # 3/3/21
}


def iso(d: datetime.date) -> str:
    """The target form: '2021-03-03'."""
    return d.isoformat()


@dataclass(frozen=True)
class Vocabulary:
    """Characters <-> ids, with <pad> = 0, <bos> = 1, <eos> = 2 and the characters after them."""

    chars: str

    def __len__(self) -> int:
        return len(SPECIALS) + len(self.chars)

    @property
    def tokens(self) -> list[str]:
        return [*SPECIALS, *self.chars]

    def encode(self, text: str, bos_eos: bool = False) -> list[int]:
        """Ids of the characters, wrapped in <bos> ... <eos> if asked."""
        ids = [len(SPECIALS) + self.chars.index(c) for c in text]
        return [BOS, *ids, EOS] if bos_eos else ids

    def decode(self, ids: Sequence[int] | torch.Tensor) -> str:
        """The text of a sequence of ids: <bos> and <pad> are skipped, and it ends at the first <eos>."""
        out = []
        for i in (ids.tolist() if isinstance(ids, torch.Tensor) else ids):
            if i == EOS:
                break
            if i >= len(SPECIALS):
                out.append(self.chars[i - len(SPECIALS)])
        return "".join(out)


SOURCE = Vocabulary("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ ,./-'")
TARGET = Vocabulary("0123456789-")


def all_dates() -> list[datetime.date]:
    """Every day from FIRST_DATE to LAST_DATE, in order."""
    return [FIRST_DATE + datetime.timedelta(days=i) for i in range((LAST_DATE - FIRST_DATE).days + 1)]


def split_dates(test_fraction: float = 0.1, seed: int = 0) -> tuple[list[datetime.date], list[datetime.date]]:
    """(training dates, held-out dates): a random split of the days, so a held-out date is never trained on."""
    dates = all_dates()
    random.Random(seed).shuffle(dates)
    n_test = round(test_fraction * len(dates))
    return dates[n_test:], dates[:n_test]


def make_pairs(dates: Sequence[datetime.date], n: int, seed: int,
               formats: Sequence[str] | None = None) -> list[tuple[str, str]]:
    """n (source, target) pairs: each a random date of `dates` written in a random format (all by default)."""
    rng = random.Random(seed)
    names = list(formats or FORMATS)
    pairs = []
    for _ in range(n):
        d = rng.choice(dates)
        pairs.append((FORMATS[rng.choice(names)](d), iso(d)))
    return pairs


def translation_data(n_train: int = 60_000, n_test: int = 2_000, seed: int = 0
                     ) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(training pairs, held-out pairs), deterministic given the seed; their dates never overlap."""
    train_dates, test_dates = split_dates(seed=seed)
    return make_pairs(train_dates, n_train, seed=seed + 1), make_pairs(test_dates, n_test, seed=seed + 2)


@dataclass
class Batch:
    """Padded id tensors of a batch. src (b, s): characters, then <pad>; tgt (b, t): <bos> characters <eos> <pad>..."""

    src: torch.Tensor
    src_lengths: torch.Tensor  # (b,) number of real source tokens
    tgt: torch.Tensor
    tgt_lengths: torch.Tensor  # (b,) number of real target tokens, <bos> and <eos> included

    def to(self, device: torch.device | str) -> "Batch":
        return Batch(self.src.to(device), self.src_lengths.to(device), self.tgt.to(device), self.tgt_lengths.to(device))


def pad(sequences: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Id lists -> ((b, longest) tensor padded with <pad>, (b,) lengths)."""
    lengths = [len(s) for s in sequences]
    longest = max(lengths)
    rows = [[*s, *[PAD] * (longest - len(s))] for s in sequences]  # one tensor from lists: 4x faster than row by row
    return torch.tensor(rows, dtype=torch.long), torch.tensor(lengths)


def collate(pairs: Sequence[tuple[str, str]]) -> Batch:
    """(source, target) strings -> a padded Batch."""
    src, src_lengths = pad([SOURCE.encode(s) for s, _ in pairs])
    tgt, tgt_lengths = pad([TARGET.encode(t, bos_eos=True) for _, t in pairs])
    return Batch(src, src_lengths, tgt, tgt_lengths)


def batches(pairs: Sequence[tuple[str, str]], batch_size: int, seed: int | None = None) -> Iterator[Batch]:
    """One pass over the pairs in batches, shuffled with the seed (in order if seed is None)."""
    order = list(range(len(pairs)))
    if seed is not None:
        random.Random(seed).shuffle(order)
    for start in range(0, len(order), batch_size):
        yield collate([pairs[i] for i in order[start : start + batch_size]])


def endless_batches(pairs: Sequence[tuple[str, str]], batch_size: int, seed: int = 0) -> Iterator[Batch]:
    """Batches for as long as training asks: pass after pass over the pairs, each shuffled anew."""
    epoch = 0
    while True:
        yield from batches(pairs, batch_size, seed=seed + epoch)
        epoch += 1
