"""``specsteer campaign``'s parser against the settings it feeds."""

from __future__ import annotations

from typing import get_args

import pytest

from specsteer.cli.campaign import build_parser
from specsteer.engine.settings import Decoding, GenerationSettings


@pytest.mark.parametrize("decoding", get_args(Decoding))
def test_every_decoding_the_parser_offers_is_one_the_settings_accept(decoding):
    args = build_parser().parse_args(
        ["create", "--name", "c", "--task", "review", "--data", "sample", "--decoding", decoding]
    )
    assert (
        GenerationSettings(pairing="tiny-test", decoding=args.decoding).validate().decoding == decoding
    )  # raises if refused


def test_a_decoding_the_settings_do_not_know_is_refused_by_the_parser(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["create", "--name", "c", "--decoding", "sample"])
    assert "invalid choice" in capsys.readouterr().err
