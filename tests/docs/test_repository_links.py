"""Pages point at the repository's own files by relative links or show them inline (snippets),
never by a web address: the project publishes no repository address, so such a link would point at
a page that does not exist."""

from __future__ import annotations

import re

from tests.docs.pages import CONTRIBUTING, MKDOCS, README, ROOT, pages

_WEB = re.compile(r"https?://[^\s)\"'>`]+")


def repository_file_addresses(text: str) -> list[str]:
    """The web addresses in `text` whose path ends with the path of a file of this repository
    (e.g. .../blob/main/examples/batch.yaml): links to our own files made absolute."""
    found = []
    for url in _WEB.findall(text):
        path = url.split("#", 1)[0].split("?", 1)[0]
        parts = path.split("/")[3:]  # after scheme://host/
        if any(len(parts[i:]) >= 2 and (ROOT.joinpath(*parts[i:])).is_file() for i in range(len(parts))):
            found.append(url)
    return found


def test_the_check_reads_a_made_up_address_of_a_repository_file_as_one():
    assert repository_file_addresses("see https://example.invalid/o/r/blob/main/examples/batch.yaml#x") != []
    assert repository_file_addresses("see https://kubernetes.io/docs/concepts/overview/") == []


def test_no_page_names_a_repository_file_by_a_web_address():
    offenders = {}
    for path in [README, CONTRIBUTING, MKDOCS, *pages()]:
        found = repository_file_addresses(path.read_text())
        if found:
            offenders[str(path.relative_to(ROOT))] = found
    assert offenders == {}


def test_the_site_names_no_repository_address():
    """mkdocs.yml's repo_url would put an 'edit this page' link to that address on every page."""
    text = MKDOCS.read_text()
    assert not re.search(r"^(repo_url|edit_uri):", text, re.M)
