"""A local document's reference names the section and page its quote stands in (issue 11)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from deepresearch_dagster.core.roles.citations import locate, normalize, table_row_support

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


RISK_REGISTER = """# Risk register 2026

| ID | Risk | Owner | Mitigation |
| --- | --- | --- | --- |
| R04 | BrightPath Solar litigation (claim £1.4m) | N. Hollis | Mediation 24 April 2026 |
| R05 | Leeds depot opening slips beyond June 2026 | C. Price | Weekly steering; interim crews from Birmingham |
"""
ENTRY = {"artifact_file": "risk.txt", "summary": "Risks were reviewed.", "extraction": []}


def test_a_table_row_quoted_with_its_headers_is_verified_even_when_a_cell_holds_a_semicolon():
    from deepresearch_dagster.core.roles.citations import verify_citations

    row = (
        "ID: R05; Risk: Leeds depot opening slips beyond June 2026; Owner: C. Price; "
        "Mitigation: Weekly steering; interim crews from Birmingham"
    )
    # As a Key findings bullet, and run into an executive-summary paragraph after a bold head.
    markdown = f"- {row} [1]\n\n**Risks and legal matters.** {row}. [1]\n"
    _, checks = verify_citations(markdown, {1: [ENTRY]}, {"risk.txt": RISK_REGISTER})
    assert [c.verified for c in checks] == [True, True]
    assert checks[0].quote.startswith("| R05 |")
    # A row whose figure changed is not, nor does the header row support a finding of its names.
    changed = "ID: R05; Risk: Leeds depot opening slips beyond June 2027; Owner: C. Price"
    _, bad = verify_citations(f"- {changed} [1]\n", {1: [ENTRY]}, {"risk.txt": RISK_REGISTER})
    assert [c.verified for c in bad] == [False]
    header = normalize("ID: ID; Risk: Risk; Owner: Owner; Mitigation: Mitigation")
    assert table_row_support(header, RISK_REGISTER) is None
