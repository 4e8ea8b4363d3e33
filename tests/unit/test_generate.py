"""What is committed is what `make generate` writes: the CRDs from the typed API models, the chart's
copies, and the generated parts of docs/reference."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests import hack_scripts

ROOT = Path(__file__).resolve().parents[2]


def _generate():
    return hack_scripts.load("generate.py")


def test_every_generated_file_in_the_repository_is_what_the_generator_writes():
    gen = _generate()
    stale = [str(path) for path, text in gen.outputs(ROOT).items() if (ROOT / path).read_text() != text]
    assert stale == [], f"stale: {stale}; run make generate"


def _checkout(tmp: Path) -> Path:
    """A copy of the generator's inputs and outputs, to run it on."""
    gen = _generate()
    for path in [*gen.outputs(ROOT), *gen.HAND_WRITTEN]:
        (tmp / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / path, tmp / path)
    return tmp


def test_the_check_reports_a_stale_file_and_generating_rewrites_it_byte_for_byte(tmp_path, capsys):
    gen = _generate()
    root = _checkout(tmp_path)
    crd = root / "crds" / "ocr.causalflow.dev_ocrservices.yaml"
    crd.write_text(crd.read_text().replace("maximum: 64\n", "maximum: 65\n", 1))
    (root / gen.CHART_FILES / "ocr.causalflow.dev_ocrbatches.yaml").unlink()
    assert gen.main(["--check", "--root", str(root)]) == 1
    assert "crds/ocr.causalflow.dev_ocrservices.yaml" in capsys.readouterr().out
    assert gen.main(["--root", str(root)]) == 0
    for path in gen.outputs(ROOT):
        assert (root / path).read_bytes() == (ROOT / path).read_bytes(), path
    assert gen.main(["--check", "--root", str(root)]) == 0


def test_the_chart_copies_the_hand_written_admission_policy_as_it_is(tmp_path):
    gen = _generate()
    root = _checkout(tmp_path)
    policy = root / "crds" / "ocr.causalflow.dev_replicas-policy.yaml"
    policy.write_text(policy.read_text() + "# edited\n")
    gen.main(["--root", str(root)])
    assert (root / gen.CHART_FILES / policy.name).read_text() == policy.read_text()
