"""core/units.py: the one rule for bytes, FLOPs and seconds as text (js/units.ts is held to it by the
contract fixture, tests/test_contract.py)."""

import pytest

from bwd_widgets.core import units


@pytest.mark.parametrize(
    ("count", "text"),
    [
        (0, "0 B"),
        (512, "512 B"),
        (999, "999 B"),
        (1000, "1.00 KB"),
        (2048, "2.05 KB"),
        (16_384, "16.4 KB"),
        (99_950, "100 KB"),
        (999_499, "999 KB"),
        (999_500, "1.00 MB"),  # 999.5 KB rounds to 1000: the next unit up
        (1_446_656, "1.45 MB"),
        (10**9, "1.00 GB"),
        (-1500, "-1.50 KB"),
        (5e18, "5000 PB"),
    ],
)
def test_bytes_three_significant_digits_in_decimal_units(count, text):
    assert units.format_bytes(count) == text


def test_flops_and_seconds_by_the_same_rule():
    assert [units.format_flops(n) for n in (0, 524_288, 27_262_976)] == ["0 FLOP", "524 kFLOP", "27.3 MFLOP"]
    seconds = [0, 5e-7, 0.0005, 0.0034, 0.0162, 0.9996, 12.34, 1234.5]
    texts = ["0 s", "0.000500 ms", "0.500 ms", "3.40 ms", "16.2 ms", "1.00 s", "12.3 s", "1235 s"]
    assert [units.format_seconds(s) for s in seconds] == texts


def test_three_significant_digits_across_a_power_of_ten():
    values = [0.05, 0.9996, 9.994, 9.996, 99.94, 99.96, 999.4, 999.6]
    assert [units.three_digits(v) for v in values] == ["0.0500", "1.00", "9.99", "10.0", "99.9", "100", "999", "1000"]


def test_ties_round_up_from_the_exact_value_as_javascript_does():
    assert units.fixed(0.125, 2) == "0.13"  # 0.125 is exact: a tie, rounded up (Python's round gives 0.12)
    assert units.fixed(1.005, 2) == "1.00"  # 1.005 is 1.00499999999999989...: no tie
    assert units.format_bytes(1005) == "1.00 KB" and units.format_bytes(1015) == "1.01 KB"
