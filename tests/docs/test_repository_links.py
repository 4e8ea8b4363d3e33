"""No link points at an address that does not exist. Pages point at the repository's own files by
relative links or show them inline (snippets), never by a web address: the project publishes no
repository address, so such a link would point at a page that does not exist. Every other web
address the repository ships (outside its tests) is a placeholder, a local or in-cluster address,
a name reserved for examples, or an external one checked to exist."""

from __future__ import annotations

import re

from tests import repository
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


# Every web address outside tests/ (docs, README, the chart, examples, code, Dockerfiles) is one of:
# a placeholder or in-cluster/local address, a name reserved for examples (RFC 2606/6761), or one
# of these, each an address of someone else's that exists (checked by hand when added: this
# machine may have no network). A new link fails here until it is checked and added; an address
# of this project's own (it publishes none) can never be.
EXTERNAL = frozenset({
    "http://deb.debian.org/debian",
    "http://json-schema.org/draft-07/schema#",
    "http://www.apache.org/licenses/",
    "http://www.apache.org/licenses/LICENSE-2.0",
    "https://download.pytorch.org/whl/cu128",
    "https://github.com/NVIDIA/dcgm-exporter",
    "https://github.com/kubernetes-sigs/prometheus-adapter",
    "https://github.com/versity/versitygw",
    "https://github.com/zegl/kube-score",
    "https://huggingface.co/deepseek-ai/DeepSeek-OCR-2",
    "https://kind.sigs.k8s.io",
    "https://kopf.readthedocs.io",
    "https://kubernetes.io/docs/concepts/security/pod-security-standards/#restricted",
    "https://pypi.org/simple",
    "https://www.mkdocs.org",
})
_ADDRESS = re.compile(r"https?://[^\s)\"'>`\]\\,|]+")
_RESERVED = re.compile(r"(^|\.)(example(\.(com|net|org))?|invalid|test|localhost)$")
_IN_CLUSTER = re.compile(r"(^localhost$|^[\d.]+$|^\[[\da-f:]+\]$|^[^.]+$|\.svc$|\.cluster\.local$)")


def unknown_addresses(text: str) -> list[str]:
    """The web addresses in `text` that are neither placeholders, local or in-cluster, reserved
    example names, nor in EXTERNAL."""
    found = []
    for url in _ADDRESS.findall(text):
        url = url.rstrip(".:;")
        if "{" in url or "$" in url or url in EXTERNAL:
            continue
        host = url.split("/", 3)[2].rsplit("@", 1)[-1]
        host = host if host.startswith("[") else host.split(":", 1)[0]
        if host and not (_RESERVED.search(host) or _IN_CLUSTER.search(host)):  # no host: prose ("https://...")
            found.append(url)
    return found


def shipped_files() -> list:
    """The repository's files (tracked, and new ones not ignored) outside tests/, whose fixtures are
    made-up addresses on purpose and never shown to a user."""
    return [path for path in repository.files() if path.relative_to(ROOT).parts[0] != "tests"]


def test_the_address_check_tells_a_made_up_address_from_an_example_a_placeholder_and_a_known_one():
    assert unknown_addresses("see https://github.com/causalflow/causalflow-ocr/blob/main/docs/x.md.") == [
        "https://github.com/causalflow/causalflow-ocr/blob/main/docs/x.md"]
    assert unknown_addresses("home: https://causalflow.dev") == ["https://causalflow.dev"]
    assert unknown_addresses(
        "https://docs.example.com/ocr/ http://invoices.ocr.svc:8080 https://kubernetes.default.svc "
        "http://127.0.0.1:8080/v1 https://[fd00::1]:6443 http://{host}:{port} https://hooks.example/x "
        "https://kopf.readthedocs.io, http://SVC:8000 (running on https://...)") == []


def test_no_file_outside_the_tests_links_an_address_nobody_checked():
    offenders = {}
    for path in shipped_files():
        try:
            text = path.read_text()
        except (UnicodeDecodeError, OSError):
            continue  # binary
        found = unknown_addresses(text)
        if found:
            offenders[str(path.relative_to(ROOT))] = found
    assert offenders == {}, "a link to an address that may not exist: check it and add it to EXTERNAL"
