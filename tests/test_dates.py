"""Date spans of questions and turns (time-aware retrieval, memrl/memory/analysis/dates.py)."""

from __future__ import annotations

from datetime import date

from memrl.memory.analysis.dates import Span, fits, parse_day, question_spans, turn_spans


def day(y: int, m: int, d: int) -> Span:
    return Span(date(y, m, d), date(y, m, d))


def test_question_spans_absolute_dates():
    assert question_spans("What painting did Melanie show on October 13, 2023?") == [day(2023, 10, 13)]
    assert question_spans("What did Gina find on 1 February, 2023?") == [day(2023, 2, 1)]
    assert question_spans("What class did Maria start in December 2023?") == [
        Span(date(2023, 12, 1), date(2023, 12, 31))
    ]
    assert question_spans("How many times has Melanie gone to the beach in 2023?") == [
        Span(date(2023, 1, 1), date(2023, 12, 31))
    ]
    (june,) = question_spans("When did Melanie go camping in June?")
    assert june.any_year and (june.lo.month, june.hi.month, june.hi.day) == (6, 6, 30)
    # "may" the verb and an unanchored "last year" are no dates
    assert question_spans("What may Caroline do next?") == []
    assert question_spans("Where did John explore on a road trip last year?") == []


def test_question_spans_anchored_relative_dates():
    assert question_spans("What did Melanie do the week before 9 June 2023?") == [
        Span(date(2023, 6, 1), date(2023, 6, 9))
    ]
    assert question_spans("What did Maria do last weekend before April 10, 2023?") == [
        Span(date(2023, 4, 2), date(2023, 4, 10))
    ]
    assert question_spans("What did Jon do two days after 3 May 2023?") == [
        Span(date(2023, 5, 3), date(2023, 5, 6))
    ]


def test_turn_spans_resolve_relative_expressions_from_the_session_date():
    said = date(2023, 7, 3)  # a Monday
    assert turn_spans("I went there yesterday", said) == [day(2023, 7, 3), day(2023, 7, 2)]
    assert turn_spans("I went there last Friday", said)[1] == day(2023, 6, 30)
    assert turn_spans("We went camping last month", said)[1] == Span(date(2023, 6, 1), date(2023, 6, 30))
    assert turn_spans("That was 3 years ago", said)[1] == Span(date(2020, 1, 1), date(2020, 12, 31))
    assert turn_spans("last summer was fun", said)[1] == Span(date(2022, 6, 1), date(2022, 8, 31))
    assert turn_spans("last summer was fun", date(2023, 10, 1))[1] == Span(
        date(2023, 6, 1), date(2023, 8, 31)
    )
    assert turn_spans("We moved here in 2019", said)[1] == Span(date(2019, 1, 1), date(2019, 12, 31))
    assert turn_spans("no date here", None) == []


def test_fits_overlap_with_and_without_year():
    june_any = question_spans("When did Melanie go camping in June?")
    assert fits(june_any, turn_spans("camping last month was great", date(2023, 7, 3)))
    assert not fits(june_any, turn_spans("camping was great", date(2023, 7, 3)))
    assert fits(question_spans("What happened in 2022?"), turn_spans("that was last year", date(2023, 2, 1)))
    assert not fits(
        question_spans("What happened in 2021?"), turn_spans("that was last year", date(2023, 2, 1))
    )
    # a span across the year end still fits a month it covers when the year is ignored
    december = question_spans("What did they do in December?")
    assert fits(december, [Span(date(2022, 12, 20), date(2023, 1, 5))])


def test_parse_day():
    assert parse_day("2023-05-08T13:56:00") == date(2023, 5, 8)
    assert parse_day("May 8") is None and parse_day(None) is None
