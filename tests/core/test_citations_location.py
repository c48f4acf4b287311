"""A local document's reference names the section and page its quote stands in (issue 11)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from deepresearch_dagster.core.roles.citations import locate

PASSAGES = """# Tidewater Robotics

## Source: finance/report.pdf · PDF · dated 2026-01-10 · status: current

## Tidewater Robotics › Funding › Series B, page 3 [passage 4/9]

Tidewater raised 42 million dollars in a Series B round led by Harbor Ventures.

## Tidewater Robotics › Risks, page 7 [passage 8/9]

Supplier concentration: 61 percent of actuators come from one vendor.
"""

WHOLE = """# Price list

## Source: products/pricing.docx · DOCX · status: current

Intro line before any section.

## Hardware (page 2)

The Skiff-4 costs 18,500 euros per unit.
"""


def test_quotes_are_located_in_their_section_and_page():
    assert locate(PASSAGES, "raised 42 million dollars in a Series B round", "Tidewater Robotics") == (
        "Funding › Series B, page 3"
    )
    assert locate(PASSAGES, "61 percent of actuators", "Tidewater Robotics") == "Risks, page 7"
    assert locate(WHOLE, "The **Skiff-4** costs 18,500 euros", "Price list") == "Hardware, page 2"


def test_banner_and_unsectioned_text_give_no_place():
    assert locate(WHOLE, "Intro line before any section.", "Price list") is None
    assert locate(PASSAGES, "a sentence that is not there", "Tidewater Robotics") is None
    assert locate(PASSAGES, None) is None


@given(st.text(max_size=300), st.text(max_size=80))
def test_locate_never_fails_and_names_a_heading_of_the_text(raw, quote):
    where = locate(raw, quote)
    assert where is None or where.split(",")[0].split(" › ")[0].strip() in raw
