"""The article before a figure follows how the figure is read aloud."""

import pytest

from moetune.words import a_figure, article


@pytest.mark.parametrize("figure", ["8", "80.0", "8.5", "800", "11", "11.0", "18", "18.25", "11,000", "18000",
                                    "80,000"])
def test_figures_read_with_a_vowel_take_an(figure):
    assert article(figure) == "an"


@pytest.mark.parametrize("figure", ["1.5", "94.0", "110", "180", "1100", "1,800", "0.8", "141.0", "7", "GPU"])
def test_other_figures_take_a(figure):
    assert article(figure) == "a"


def test_a_figure_puts_the_article_before_the_figure():
    assert a_figure("80.0") == "an 80.0"
    assert a_figure("94.0") == "a 94.0"
