"""What a reader reads of a memory (memrl.memory.records.reading.shown_text) and the dates it understands
(memrl.datetimes): one date per line, never two, in the forms the data sets write."""

from __future__ import annotations

from datetime import datetime

from memrl.datetimes import format_date, parse_date, shown_date
from memrl.memory.records.reading import shown_text
from memrl.memory.records.types import MemoryItem

SESSION = {"date_text": "1:56 pm on 8 May, 2023"}


def item(content: str, metadata=None) -> MemoryItem:
    return MemoryItem("m1", "alice", "episodic", content, dict(SESSION if metadata is None else metadata))


def test_dates_of_every_data_set_parse():
    assert parse_date("1:56 pm on 8 May, 2023") == datetime(2023, 5, 8, 13, 56)  # LoCoMo sessions
    assert parse_date("8 May, 2023") == datetime(2023, 5, 8)  # LoCoMo's event summaries
    assert parse_date("2023/05/20 (Sat) 02:21") == datetime(2023, 5, 20, 2, 21)  # LongMemEval
    assert parse_date("May 12, 2022") == datetime(2022, 5, 12)  # PerLTQA
    assert parse_date("2022-05-12") == datetime(2022, 5, 12)
    assert parse_date("31 Smarch, 2023") is None and parse_date("30 February 2023") is None
    assert parse_date("Caroline") is None and parse_date("2023") is None


def test_a_shown_date_reads_back_as_the_same_date():
    for when in (datetime(2023, 5, 8, 13, 56), datetime(2023, 5, 8)):
        assert parse_date(format_date(when)) == when
    assert shown_date({"date": "8 May, 2023"}) == "8 May 2023"


def test_the_reader_sees_one_date_per_memory():
    assert shown_text(item("Caroline went to a support group.")) == (
        "[1:56 pm on 8 May, 2023] Caroline went to a support group."
    )
    # MemBuilder's episodes carry their date: not shown twice
    assert shown_text(item("8 May, 2023: Caroline went to a support group.")) == (
        "8 May, 2023: Caroline went to a support group."
    )
    assert shown_text(item("[8 May 2023] Caroline went.")) == "[8 May 2023] Caroline went."
    # a prefix that is not a date is text: the date is shown before it
    assert shown_text(item("Note: Caroline went.")) == "[1:56 pm on 8 May, 2023] Note: Caroline went."
    assert shown_text(item("10:37 am call")) == "[1:56 pm on 8 May, 2023] 10:37 am call"
    assert shown_text(item("Caroline went.", {})) == "Caroline went."  # no date known: none shown
