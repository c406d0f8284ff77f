"""The date-translation data of assignment 07: deterministic, unambiguous, and split by date."""

import datetime

import torch

from course import dates
from course.dates import BOS, EOS, FORMATS, PAD, SOURCE, TARGET, collate, make_pairs, split_dates, translation_data


def test_the_same_seed_gives_the_same_data_and_another_seed_other_data():
    assert translation_data(n_train=500, n_test=50, seed=0) == translation_data(n_train=500, n_test=50, seed=0)
    assert translation_data(n_train=500, n_test=50, seed=1) != translation_data(n_train=500, n_test=50, seed=0)


def test_no_held_out_date_appears_in_training_in_any_format():
    train_dates, test_dates = split_dates()
    assert not set(train_dates) & set(test_dates)
    assert len(train_dates) + len(test_dates) == len(dates.all_dates())
    train, test = translation_data()
    assert not {target for _, target in train} & {target for _, target in test}


def test_every_input_has_exactly_one_translation():
    translation = {}
    for d in dates.all_dates():
        for write in FORMATS.values():
            source = write(d)
            assert translation.setdefault(source, d.isoformat()) == d.isoformat(), source


def test_the_examples_of_the_issue_are_written_as_promised():
    d = datetime.date(2021, 3, 3)
    written = {write(d) for write in FORMATS.values()}
    assert {"3rd of March 2021", "Mar 3, '21", "03/03/2021", "Wednesday 3 March 2021"} <= written


def test_weekdays_are_correct_and_two_digit_years_pivot_at_50():
    d = datetime.date(2004, 2, 29)
    assert FORMATS["weekday US ordinal"](d) == "Sunday, February 29th, 2004"
    assert FORMATS["d/m/yy"](datetime.date(1950, 1, 2)) == "2/1/50"
    assert FORMATS["d/m/yy"](datetime.date(2049, 12, 31)) == "31/12/49"


def test_ordinals():
    assert [dates.ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 22, 23, 31)] == [
        "1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "23rd", "31st"]


def test_every_character_of_every_format_is_in_the_source_vocabulary():
    for source, target in make_pairs(dates.all_dates(), 5000, seed=3):
        assert SOURCE.decode(SOURCE.encode(source)) == source
        assert TARGET.decode(TARGET.encode(target, bos_eos=True)) == target


def test_vocabularies_start_with_pad_bos_eos():
    for vocabulary in (SOURCE, TARGET):
        assert vocabulary.tokens[:3] == ["<pad>", "<bos>", "<eos>"]
        assert (PAD, BOS, EOS) == (0, 1, 2)
    assert TARGET.decode([BOS, 5, 3, EOS, 7, 7]) == "20"  # stops at <eos>, skips <bos>


def test_a_batch_is_padded_and_carries_its_lengths():
    pairs = [("3.3.21", "2021-03-03"), ("Wednesday 3 March 2021", "2021-03-03")]
    batch = collate(pairs)
    assert batch.src.shape == (2, 22) and batch.src_lengths.tolist() == [6, 22]
    assert bool((batch.src[0, 6:] == PAD).all()) and bool((batch.src[0, :6] != PAD).all())
    assert batch.tgt.shape == (2, 12) and batch.tgt_lengths.tolist() == [12, 12]
    assert bool((batch.tgt[:, 0] == BOS).all()) and bool((batch.tgt[:, -1] == EOS).all())
    assert batch.src.dtype == torch.long


def test_batches_cover_every_pair_once_per_pass():
    pairs = make_pairs(dates.all_dates(), 130, seed=4)
    seen = [SOURCE.decode(row) for batch in dates.batches(pairs, 32, seed=0) for row in batch.src]
    assert sorted(seen) == sorted(source for source, _ in pairs)
