"""The prompt-lookup drafter and the ``ngram:K`` setting."""

from __future__ import annotations

import pytest

from hycache.engine.drafter import SpecDecode, parse_spec_decode, propose, reference_drafter
from hycache.engine.request import EngineRequest
from hycache.errors import ConfigError


def test_the_longest_suffix_match_wins_and_the_most_recent_occurrence() -> None:
    spec = SpecDecode(3)
    # suffix (1, 2, 3) occurs once earlier, followed by 4 5 6; (3,) alone would propose 9
    assert propose([1, 2, 3, 4, 5, 6, 3, 9, 1, 2, 3], spec, 3) == [4, 5, 6]
    # only a 1-gram matches: the most recent earlier occurrence of 7 is followed by 8
    assert propose([7, 5, 7, 8, 1, 7], spec, 3) == [8, 1, 7]


def test_drafts_are_bounded_by_k_the_limit_and_the_context() -> None:
    spec = SpecDecode(4)
    assert propose([5, 6, 7, 8, 9, 5], spec, 2) == [6, 7]
    assert propose([5, 6, 5], spec, 4) == [6, 5]  # the occurrence may overlap the suffix
    assert propose([5, 5, 5, 5], spec, 4) == [5]
    assert propose([1, 2, 3], spec, 4) == []
    assert propose([1, 2, 1], spec, 0) == []


@pytest.mark.parametrize("text", ["ngram", "ngram:", "ngram:x", "ngram:0", "ngram:65", "eagle:4"])
def test_bad_settings_name_the_expected_form(text: str) -> None:
    with pytest.raises(ConfigError, match="--spec-decode"):
        parse_spec_decode(text)


def test_a_setting_parses() -> None:
    assert parse_spec_decode("ngram:4") == SpecDecode(4)
    assert parse_spec_decode("ngram:4").label == "ngram:4"
    assert parse_spec_decode("oracle:2") == SpecDecode(2, drafter="oracle")


def test_reference_drafts_are_wrong_at_a_rotating_index() -> None:
    request = EngineRequest((5, 6, 7), 8)
    draft = reference_drafter(lambda r: [10, 11, 12, 13, 14, 15, 16, 17])
    context = [5, 6, 7, 10]
    assert draft(request, context, 3) == [10, 12, 13]  # index 0 wrong
    assert draft(request, context, 3) == [11, 11, 13]  # index 1 wrong
    assert draft(request, context, 3) == [11, 12, 12]
    assert draft(request, context, 3) == [11, 12, 13]  # all right: a bonus token follows
    assert draft(request, [5, 6, 7, 99], 3) == []  # left the reference: no draft
