"""The documentation stays true: the OcrService reference is generated from its models, the README is a short entry
point whose links land on real pages and headings, and what the pages name (make targets, the
generated blocks other tools fill) exists."""

import re

import pytest

from tests.docs.pages import CONTRIBUTING, DOCS, MKDOCS, README, README_LIMIT, ROOT, anchors, code, links, pages, resolve
from hack import crd_reference
from ocr_operator.api.crd import document
from ocr_operator.api.ocrservice import OCRSERVICE
from tests import hack_scripts

REFERENCE = DOCS / "reference" / "ocrservice.md"
SERVER_CONFIGURATION = DOCS / "reference" / "server-configuration.md"


def test_the_ocrservice_reference_page_is_generated_from_the_models():
    gen = hack_scripts.load("generate.py")
    page = REFERENCE.relative_to(ROOT)
    assert gen.PAGES["OcrService"][0] == page
    assert gen.outputs(ROOT)[page] == REFERENCE.read_text(), "docs/reference/ocrservice.md is stale: run make generate"


def test_the_reference_has_a_row_with_the_description_of_every_spec_and_status_field():
    crd = document(OCRSERVICE)
    root = next(v for v in crd["spec"]["versions"] if v.get("storage"))["schema"]["openAPIV3Schema"]
    page = REFERENCE.read_text()
    missing = []

    def walk(schema, path):
        for name, sub in (schema.get("properties") or {}).items():
            field = f"{path}.{name}"
            row = next((line for line in page.splitlines() if line.startswith(f"| `{field}`")), None)
            if row is None or " ".join(sub.get("description", "").split())[:40] not in row.replace("\\|", "|"):
                missing.append(field)
            walk(sub.get("items", sub) if sub.get("type") == "array" else sub, field + ("[]" if sub.get("type") == "array" else ""))

    walk(root["properties"]["spec"], "spec")
    walk(root["properties"]["status"], "status")
    assert missing == []


def test_the_reference_changes_with_a_fields_description():
    crd = document(OCRSERVICE)
    before = crd_reference.render(crd)
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    spec["properties"]["image"]["description"] = "Something else entirely."
    assert "Something else entirely." in crd_reference.render(crd) != before


def test_the_readme_is_a_short_entry_point():
    size = len(README.read_bytes())
    assert size < README_LIMIT, f"README.md is {size} bytes: move detail into docs/ (limit {README_LIMIT})"


def test_the_readme_links_into_the_docs_pages():
    targets = {resolve(README, link)[0] for link in links(README.read_text()) if resolve(README, link)}
    for page in ("index.md", "getting-started.md", "architecture.md", "reference/ocrservice.md",
                 "operations/helm.md", "operations/runbooks.md", "development/tests.md"):
        assert (DOCS / page).resolve() in targets, f"README.md does not link docs/{page}"


@pytest.mark.parametrize("source", [README, CONTRIBUTING], ids=lambda p: p.name)
def test_every_relative_link_of_the_readme_and_contributing_resolves(source):
    """GitHub renders these files as they are: every relative link must name a file of the
    repository and, with an anchor into a Markdown file, one of its headings."""
    broken = []
    found = links(source.read_text())
    assert found, f"no links found in {source.name}"
    for link in found:
        target = resolve(source, link)
        if target is None:
            continue
        path, anchor = target
        if not path.exists():
            broken.append(link)
        elif anchor and path.suffix == ".md" and path.is_relative_to(DOCS) and anchor not in anchors(path):
            broken.append(link)
    assert broken == []


def test_every_docs_page_is_in_the_site_navigation():
    nav = MKDOCS.read_text()
    missing = [str(p.relative_to(DOCS)) for p in pages() if f" {p.relative_to(DOCS).as_posix()}" not in nav]
    assert missing == []


def test_every_make_target_the_docs_name_exists():
    """`make TARGET` in a code span or a code block names a target of the Makefile."""
    targets = set(re.findall(r"^([a-z][a-z0-9-]*):", (ROOT / "Makefile").read_text(), re.M))
    named = set()
    for path in [README, CONTRIBUTING, *pages()]:
        named |= set(re.findall(r"\bmake ([a-z][a-z0-9-]+)", code(path.read_text())))
    assert {"demo", "test", "docs"} <= named
    assert named - targets == set()


def test_the_docs_keep_the_pages_newcomers_operators_and_the_harness_need():
    for page in ["index.md", "getting-started.md", "architecture.md",
                 "concepts/ocrservice.md", "concepts/rollout.md", "concepts/autoscaling.md", "concepts/schedules.md",
                 "reference/ocrservice.md", "reference/server-configuration.md", "reference/server-api.md",
                 "operations/helm.md", "operations/monitoring.md", "operations/alerts.md", "operations/runbooks.md",
                 "operations/troubleshooting.md", "operations/security.md",
                 "development/tests.md", "development/local-cluster.md", "development/images.md",
                 "development/benchmarks.md"]:
        assert (DOCS / page).is_file(), page
    assert {"the-two-commands", "helm-quickstart"} <= anchors(DOCS / "getting-started.md")
    assert {"the-operator-process", "the-server-process", "the-local-cluster-harness", "the-path-of-a-request",
            "the-path-of-a-reconcile"} <= anchors(DOCS / "architecture.md")
    assert {"spec", "status"} <= anchors(REFERENCE)


def test_the_server_configuration_page_has_one_generated_limits_block():
    text = SERVER_CONFIGURATION.read_text()
    begin, end = "<!-- BEGIN GENERATED: server-limits -->", "<!-- END GENERATED: server-limits -->"
    assert text.count(begin) == 1 and text.count(end) == 1
    assert text.index(begin) < text.index(end)
