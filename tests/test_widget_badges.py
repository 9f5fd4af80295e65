"""The ``%%gpujob`` widget's state badge is readable: its white text on the badge's own background
is at least 4.5:1 (WCAG AA) for every state (issue 34 item 5: Pending 3.21, Running 3.16,
Admitted 3.68, Cancelled 4.0, Succeeded 4.06 : 1 before). The badge brings its background, so the
ratio is the same in light and dark themes; it is read from the HTML the widget renders."""

from __future__ import annotations

import re

import pytest

pytest.importorskip("ipywidgets")

from jupyter_gpuqueue.widget import GpuJobWidget  # noqa: E402


def _luminance(rgb: tuple[int, int, int]) -> float:
    def f(v: float) -> float:
        v /= 255
        return v / 12.92 if v <= 0.03928 else ((v + 0.055) / 1.055) ** 2.4

    r, g, b = rgb
    return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b)


def _rgb(colour: str) -> tuple[int, int, int]:
    named = {"white": "#ffffff"}
    h = named.get(colour, colour).lstrip("#")
    return tuple(int(h[i:i + 2], 16) for i in (0, 2, 4))


@pytest.mark.parametrize("state", ["Pending", "Admitted", "Running", "Succeeded", "Failed", "Cancelled"])
def test_every_state_badge_meets_4_5_to_1(state):
    widget = GpuJobWidget({"namespace": "team-a", "name": "train", "state": state, "podSets": []})
    m = re.search(r"<span style='background:([^;]+);color:([^;]+);[^']*'>" + state + "</span>", widget.header.value)
    assert m, widget.header.value
    bg, fg = (_luminance(_rgb(c)) for c in m.groups())
    ratio = (max(bg, fg) + 0.05) / (min(bg, fg) + 0.05)
    assert ratio >= 4.5, f"{state}: {ratio:.2f}:1 for {m.group(2)} on {m.group(1)}"


def test_money_is_rounded_as_the_panel_rounds_it():
    """Issue 34 item 10: $0.625 is "$0.63" in the panel (Intl.NumberFormat: half away from zero on
    the float's shortest decimal form) and was "$0.62" in the widget (Python rounds half to even)."""
    from jupyter_gpuqueue.widget import _money

    assert _money(0.625) == "$0.63"
    assert _money(0.125) == "$0.13"
    assert _money(1.005) == "$1.01"  # as Intl.NumberFormat (node: (1.005).toLocaleString(…) is "1.01")
    assert _money(1234.5) == "$1,234.50"
    assert _money(0.004) == "< $0.01" and _money(0) == "$0.00" and _money(None) == "-"


def test_the_widget_writes_times_as_the_panel_does():
    """Issue 34 item 10: the widget said "02:00" next to the panel's "2:00 AM"."""
    from datetime import datetime

    from jupyter_gpuqueue.widget import clock_time

    at = datetime(2026, 11, 28, 2, 0).timestamp()
    assert clock_time(at, now=at) == "2:00 AM"
    assert clock_time(at + 12.5 * 3600, now=at + 12.5 * 3600) == "2:30 PM"
    assert clock_time(datetime(2026, 11, 28, 0, 5).timestamp(), now=at) == "12:05 AM"
