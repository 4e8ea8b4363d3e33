"""The OcrBatch reference page is generated from its typed models (`make generate`)."""

from tests import hack_scripts
from tests.docs.pages import DOCS, MKDOCS, ROOT


def test_the_ocrbatch_reference_page_is_generated_from_its_models():
    gen = hack_scripts.load("generate.py")
    page = DOCS / "reference" / "ocrbatch.md"
    assert gen.PAGES["OcrBatch"][0] == page.relative_to(ROOT)
    text = page.read_text()
    assert gen.outputs(ROOT)[page.relative_to(ROOT)] == text, "docs/reference/ocrbatch.md is stale: run make generate"
    assert "| `spec.limits.maxPagesPerDocument` | integer | `1000` |" in text


def test_the_ocrbatch_reference_is_in_the_navigation():
    assert "reference/ocrbatch.md" in MKDOCS.read_text()
