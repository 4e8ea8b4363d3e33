"""How `make test` splits the suite between its two workers (tests/conftest.py)."""

from __future__ import annotations

from tests.conftest import work_unit


def test_every_e2e_test_is_one_unit_of_work_so_one_worker_holds_the_cluster():
    units = {work_unit(n) for n in ("tests/e2e/test_rollback.py::test_a[x]", "tests/e2e/test_chart.py::test_b",
                                    "tests/e2e/test_realnode.py::TestNode::test_c")}
    assert units == {"tests/e2e"}


def test_other_tests_go_with_their_module():
    assert work_unit("tests/server/test_tls.py::test_a[a::b]") == "tests/server/test_tls.py"
    assert work_unit("tests/unit/chart/test_chart_render.py::test_x") == "tests/unit/chart/test_chart_render.py"
    assert work_unit("tests/e2e_like/test_x.py::test_y") == "tests/e2e_like/test_x.py"
