"""The run page's category colours come from one place and cover every category the analysis can store."""

from __future__ import annotations

from analysis.api import IDLE_CATEGORIES
from app.web.palette import IDLE_PALETTE, UNKNOWN


def test_every_idle_category_has_its_own_colour():
    assert set(IDLE_PALETTE) == set(IDLE_CATEGORIES)
    assert len(set(IDLE_PALETTE.values())) == len(IDLE_PALETTE) and UNKNOWN not in IDLE_PALETTE.values()


def test_a_category_the_page_does_not_know_is_drawn_grey():
    assert IDLE_PALETTE["from_a_newer_analysis"] == UNKNOWN
