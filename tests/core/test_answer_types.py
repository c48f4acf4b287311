"""What kind of answer a question part asks for, and which sentences supply it."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from deepresearch_dagster.core.heuristics.answer_types import asked_kinds, supplies


@pytest.mark.parametrize(
    "part, kinds",
    [
        ("When was the Harrow Tunnel built", {"date"}),
        ("how large is the Harrow Tunnel", {"measure"}),
        ("how often do the ferries run", {"measure"}),
        ("how is the Harrow Tunnel funded", {"money"}),
        ("what did the repairs cost", {"money"}),
        ("who led the inquiry", {"person"}),
        ("What caused the 2015 landslip", {"cause"}),
        ("how many passengers did it carry", {"count"}),
        ("What are the main problems with the line today", set()),
    ],
)
def test_the_kind_a_part_asks_for(part, kinds):
    assert asked_kinds(part) == kinds


@pytest.mark.parametrize(
    "sentence, kind",
    [
        ("The line opened to passengers on 14 June 1887.", "date"),
        ("The tunnel is 25 km long and 7.2 m wide.", "measure"),
        ("Trains run every 30 minutes.", "measure"),
        ("The repairs cost £18.6 million.", "money"),
        ("Repairs cost 41 million pounds.", "money"),
        ("The inquiry is led by Dr Helen Okafor.", "person"),
        ("The response was led by Chief Superintendent Colm Reddan.", "person"),
        ("The dredging was carried out by Nordhaven Dredging BV.", "person"),  # an organisation
        ("The work went to Harrowgate Civils Ltd in October.", "person"),
        ("The failure was caused by blocked drains.", "cause"),
        ("The slope failed because a culvert was blocked.", "cause"),
        # "Why was X replaced?": the state that forced it, or what it was for
        ("In 2016 inspectors rated the old span structurally deficient.", "cause"),
        ("By 2015 it carried twice its design capacity.", "cause"),
        ("The delay was attributed to a shortage of cables.", "cause"),
        ("The weir was raised in order to protect the town from floods.", "cause"),
        ("The licence was granted seven months after the date assumed.", "measure"),
        ("Month: TOTAL; heat delivered MWh: 18950; homes connected: 1150", "measure"),
        ("Month: TOTAL; heat delivered MWh: 18950; homes connected: 1150", "count"),
    ],
)
def test_a_sentence_that_supplies_the_kind(sentence, kind):
    assert supplies(sentence, {kind}) == 1


@pytest.mark.parametrize(
    "sentence, kind",
    [
        ("The line is popular with walkers.", "date"),
        ("The board approved the plan.", "money"),
        ("The line was very busy.", "measure"),
        ("The slope was steep.", "cause"),
        ("The new span opened in 2022 with four lanes.", "cause"),
        # a label's number, a year and money count nothing
        ("All Phase 1 homes connected: summer 2024.", "count"),
        ("Route 41 carries most of the traffic.", "count"),
        ("The final capital cost of Phase 1 is £38.4 million.", "count"),
    ],
)
def test_a_sentence_without_the_kind(sentence, kind):
    assert supplies(sentence, {kind}) == 0


@given(st.text(max_size=200))
def test_any_text_is_read_without_error(text):
    assert asked_kinds(text) <= {"date", "measure", "money", "count", "person", "cause"}
    assert 0 <= supplies(text, asked_kinds(text)) <= len(asked_kinds(text))


@pytest.mark.parametrize(
    "part, kinds",
    [
        ("how much heat did the network deliver between October 2024 and March 2025", {"measure"}),
        ("How much did the upgrade cost", {"money"}),
        ("How much money was raised", {"money"}),
        ("By how much did the network exceed its budget", {"money"}),
    ],
)
def test_how_much_asks_for_money_only_when_it_asks_for_no_other_quantity(part, kinds):
    assert asked_kinds(part) == kinds
