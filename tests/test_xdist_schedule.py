"""tests/xdist_schedule.py: the order and the units scripts/test.sh's workers get."""

from __future__ import annotations

import xdist_schedule as xs


def test_units_go_longest_first_each_kept_whole_and_in_its_order():
    ids = [
        "tests/test_ports.py::a", "tests/test_ports.py::b",
        "tests/test_schemathesis.py::x",
        "tests/k8s/real/test_backend.py::k1",
        "tests/test_many.py::m1", "tests/test_many.py::m2", "tests/test_many.py::m3",
        "tests/hub/test_shared_machine.py::s",
        "tests/k8s/real/test_failures.py::k2",
        "tests/test_ports.py::c",
    ]
    out = xs.longest_first(ids)
    assert sorted(out) == sorted(ids)  # every test, once
    listed = {
        xs.K8S_REAL: ["tests/k8s/real/test_backend.py::k1", "tests/k8s/real/test_failures.py::k2"],
        "tests/test_schemathesis.py": ["tests/test_schemathesis.py::x"],
        "tests/hub/test_shared_machine.py": ["tests/hub/test_shared_machine.py::s"],
    }
    assert out == [
        # listed units by their seconds (tests/k8s/real/ one unit, its files in collection order)
        *(i for unit in sorted(listed, key=lambda u: -xs.SECONDS[u]) for i in listed[unit]),
        # unlisted files by their test counts (3 then 3: collection order breaks the tie)
        "tests/test_ports.py::a", "tests/test_ports.py::b", "tests/test_ports.py::c",
        "tests/test_many.py::m1", "tests/test_many.py::m2", "tests/test_many.py::m3",
    ]


def test_every_file_under_k8s_real_is_one_unit_and_others_their_file():
    assert xs.unit_of("tests/k8s/real/test_backend.py::t[x]") == xs.unit_of("tests/k8s/real/test_server.py::u")
    assert xs.unit_of("tests/k8s/test_cluster_pieces.py::t") == "tests/k8s/test_cluster_pieces.py"
    assert xs.unit_of("tests/test_crash.py::T::t") == "tests/test_crash.py"


def test_every_listed_unit_exists():
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    assert [u for u in xs.SECONDS if not (root / u).exists()] == []
