"""How `make test` splits the suite between its workers (tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import (E2E_KWOK, E2E_REAL_NODE, E2E_REAL_NODE_UNITS, HEAVY_FIRST, MAIN_SERVER, REAL_NODE_SECONDS,
                            REAL_NODE_UNITS_ENV, has_exclusive_tests, main_server_modules, marks_of_tests, module_marks,
                            pytest_xdist_auto_num_workers, real_node_halves, real_node_units, start_order,
                            takes_main_server, work_unit)

TESTS = Path(__file__).resolve().parents[1]
E2E = TESTS / "e2e"


def test_real_node_e2e_modules_are_one_unit_and_kwok_e2e_modules_another(monkeypatch):
    monkeypatch.setenv(REAL_NODE_UNITS_ENV, "1")
    modules = sorted(E2E.glob("test_realnode*.py"))
    assert {work_unit(f"tests/e2e/{m.name}::test_a[x]") for m in modules} == {E2E_REAL_NODE}
    assert work_unit("tests/e2e/test_chart.py::test_b") == E2E_KWOK


def test_with_two_real_node_units_the_real_node_modules_go_to_both_and_kwok_e2e_modules_to_another(monkeypatch):
    monkeypatch.setenv(REAL_NODE_UNITS_ENV, "2")
    modules = sorted(E2E.glob("test_realnode*.py"))
    units = {work_unit(f"tests/e2e/{m.name}::test_a[x]") for m in modules}
    assert units == set(E2E_REAL_NODE_UNITS)
    assert {work_unit(n) for n in ("tests/e2e/test_operator_idle.py::test_a[x]", "tests/e2e/test_chart.py::test_b",
                                   "tests/e2e/test_rollback.py::test_c")} == {E2E_KWOK}


def test_every_module_marked_realnode_is_named_so_its_tests_go_to_a_real_node_unit():
    """A real-node test in the kwok unit would try to start a second real node on another worker."""
    modules = sorted(E2E.glob("test_*.py"))
    assert modules
    for module in modules:
        assert ("realnode" in module_marks(module.read_text())) == module.name.startswith("test_realnode"), module.name


def test_module_marks_reads_the_mark_names_of_pytestmark():
    assert module_marks("import pytest\npytestmark = pytest.mark.realnode\n") == {"realnode"}
    assert module_marks("pytestmark = [pytest.mark.realnode, pytest.mark.timeout(60), pytest.mark.exclusive]\n") \
        == {"realnode", "timeout", "exclusive"}
    assert module_marks("marks = [pytest.mark.realnode]\n") == set()


def test_marks_of_tests_reads_each_tests_decorator_marks_in_source_order():
    source = ("import pytest\n@pytest.mark.exclusive\ndef test_b():\n    pass\n"
              "def helper():\n    pass\n@pytest.mark.timeout(9)\n@other\nasync def test_a():\n    pass\n")
    assert marks_of_tests(source) == [("test_b", {"exclusive"}), ("test_a", {"timeout"})]
    assert has_exclusive_tests(source) and not has_exclusive_tests("def test_a():\n    pass\n")


def test_the_modules_with_exclusive_tests_share_the_first_half_and_the_others_are_balanced_longest_first():
    modules = {"x1": 100.0, "x2": 50.0, "a": 80.0, "b": 60.0, "c": 30.0, "d": 20.0}
    first, second = real_node_halves(modules, frozenset({"x1", "x2"}))
    assert first == {"x1", "x2", "d"} and second == {"a", "b", "c"}  # 150 | a 80, b 60, c 30 -> 170 | d 20 -> 170
    first, second = real_node_halves({**modules, "e": 90.0}, frozenset({"x1", "x2"}))
    assert first == {"x1", "x2", "b"} and second == {"e", "a", "c", "d"}  # 150 | e 90, a 80 -> 170 | b 60 | c, d
    assert real_node_halves({"a": 1.0}, frozenset({"gone"})) == ({"a"}, set())


def test_two_real_node_units_unless_the_variable_says_one(monkeypatch):
    monkeypatch.delenv(REAL_NODE_UNITS_ENV, raising=False)
    assert real_node_units() == 2
    monkeypatch.setenv(REAL_NODE_UNITS_ENV, "1")
    assert real_node_units() == 1


def test_make_tests_workers_are_three_with_one_real_node_unit_and_four_with_two(monkeypatch):
    monkeypatch.setenv(REAL_NODE_UNITS_ENV, "1")
    assert pytest_xdist_auto_num_workers(None) == 3
    monkeypatch.setenv(REAL_NODE_UNITS_ENV, "2")
    assert pytest_xdist_auto_num_workers(None) == 4


def test_the_tests_that_stop_or_restart_node_processes_are_exclusive_last_in_their_modules_and_in_the_first_unit(
        monkeypatch):
    """From a module's first exclusive test to its end its worker holds the cluster alone, so a test
    after it would run alone for nothing."""
    monkeypatch.setenv(REAL_NODE_UNITS_ENV, "2")
    sources = {m.stem: m.read_text() for m in E2E.glob("test_*.py")}
    exclusive = {m for m, source in sources.items() if has_exclusive_tests(source)}
    assert exclusive == {"test_realnode", "test_realnode_faults"}
    assert not any("exclusive" in module_marks(source) for source in sources.values())
    for module in exclusive:
        flags = ["exclusive" in marks for _, marks in marks_of_tests(sources[module])]
        assert flags == sorted(flags), f"{module}: a test without the mark comes after an exclusive one"
    assert {work_unit(f"tests/e2e/{m}.py::t") for m in exclusive} == {E2E_REAL_NODE_UNITS[0]}


def test_every_real_node_module_has_a_measured_duration():
    """A module missing from REAL_NODE_SECONDS is balanced as 40 s whatever it takes."""
    assert {m.stem for m in E2E.glob("test_realnode*.py")} == set(REAL_NODE_SECONDS)


def test_a_module_takes_the_main_server_by_a_test_or_fixture_argument_unless_it_defines_its_own():
    assert takes_main_server("def test_a(server):\n    pass\n")
    assert takes_main_server("async def test_a(tmp_path, main_server):\n    pass\n")
    assert takes_main_server("import pytest\n@pytest.fixture\ndef client(server):\n    pass\n")
    assert not takes_main_server("def test_a(tiny_native, tmp_path):\n    server = 1\n")
    assert not takes_main_server("def helper(server):\n    pass\n")  # a plain function: no fixture request
    assert not takes_main_server("import pytest\n@pytest.fixture(scope='module')\ndef server(tmp_path):\n    pass\n"
                                 "def test_a(server):\n    pass\n")  # its own `server` shadows the session's


def test_every_server_module_that_takes_the_main_server_is_in_its_unit_and_no_other_module_is():
    """A module left out would start a second main server on another worker; one put in for nothing
    would only lengthen the unit."""
    modules = sorted((TESTS / "server").glob("test_*.py"))
    using = main_server_modules()
    assert "tests/server/test_http_ocr.py" in using  # its first test reads the server's loading state
    for module in modules:
        name = str(module.relative_to(TESTS.parent))
        takes = takes_main_server(module.read_text())
        assert (name in using) == takes, name
        assert work_unit(f"{name}::test_x[a]") == (MAIN_SERVER if takes else name), name


def test_other_tests_go_with_their_module():
    assert work_unit("tests/server/test_tls.py::test_a[a::b]") == "tests/server/test_tls.py"
    assert work_unit("tests/unit/chart/test_chart_render.py::test_x") == "tests/unit/chart/test_chart_render.py"
    assert work_unit("tests/e2e_like/test_x.py::test_y") == "tests/e2e_like/test_x.py"


def test_the_heaviest_units_start_first_and_the_rest_keep_their_order():
    units = ["tests/unit/a.py", E2E_REAL_NODE_UNITS[1], "tests/server/b.py", E2E_KWOK, E2E_REAL_NODE_UNITS[0],
             "tests/server/test_engine_equivalence.py", E2E_REAL_NODE]
    assert start_order(units) == [*HEAVY_FIRST, "tests/unit/a.py", "tests/server/b.py"]
    assert start_order(["tests/unit/a.py", E2E_KWOK]) == [E2E_KWOK, "tests/unit/a.py"]
