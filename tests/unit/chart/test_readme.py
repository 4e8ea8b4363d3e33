"""README.md stays true: its OcrService reference is the CRD's, and what it names exists."""

import importlib.util
import re

from tests.unit.chart.helm import ROOT

README = ROOT / "README.md"


def _generator():
    spec = importlib.util.spec_from_file_location("gen_crd_reference", ROOT / "hack" / "gen-crd-reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_readme_ocrservice_reference_is_generated_from_the_crd():
    gen = _generator()
    readme = README.read_text()
    assert gen.splice(readme, gen.render(gen.load_crd())) == readme, (
        "README.md's OcrService reference is stale: run .venv/bin/python hack/gen-crd-reference.py --write"
    )


def test_reference_has_a_row_with_the_description_of_every_spec_and_status_field():
    gen = _generator()
    crd = gen.load_crd()
    root = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    readme = README.read_text()
    missing = []

    def walk(schema, path):
        for name, sub in (schema.get("properties") or {}).items():
            field = f"{path}.{name}"
            row = next((line for line in readme.splitlines() if line.startswith(f"| `{field}`")), None)
            if row is None or " ".join(sub.get("description", "").split())[:40] not in row.replace("\\|", "|"):
                missing.append(field)
            walk(sub.get("items", sub) if sub.get("type") == "array" else sub, field + ("[]" if sub.get("type") == "array" else ""))

    walk(root["properties"]["spec"], "spec")
    walk(root["properties"]["status"], "status")
    assert missing == []


def test_generator_reports_a_changed_description():
    gen = _generator()
    crd = gen.load_crd()
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    spec["properties"]["image"]["description"] = "Something else entirely."
    readme = README.read_text()
    assert gen.splice(readme, gen.render(crd)) != readme


def test_every_repository_path_the_readme_links_exists():
    readme = re.sub(r"`[^`\n]*`", "", README.read_text())  # code spans hold regexes, not links
    links = re.findall(r"\]\(((?!https?:|#)[^)\s]+)\)", readme)
    assert links, "no relative links found"
    assert [link for link in links if not (ROOT / link).exists()] == []


def test_every_make_target_the_readme_names_exists():
    targets = set(re.findall(r"^([a-z][a-z0-9-]*):", (ROOT / "Makefile").read_text(), re.M))
    named = set(re.findall(r"\bmake ([a-z][a-z0-9-]+)", README.read_text()))
    assert named and named - targets == set()


def test_readme_keeps_the_sections_newcomers_and_the_harness_need():
    headings = re.findall(r"^## (.+)$", README.read_text(), re.M)
    for heading in ["The two commands", "Architecture", "Install into a real cluster with Helm", "OcrService",
                    "GPU autoscaling in production", "How rollback behaves", "Configuration of the server",
                    "Tests", "Local cluster", "Troubleshooting"]:
        assert heading in headings
