"""Release notebooks open in JupyterLab without being marked modified: they already carry what JupyterLab writes
into a notebook when its kernel starts. tests/test_browser.py opens one in JupyterLab itself."""

import json

import nbformat
import pytest
from jupyter_client.kernelspec import KernelSpecManager

from autograder import course_dir
from autograder.build import _same_but_python_patch, kernel_language_info

RELEASE = sorted((course_dir.ROOT / "release").rglob("*.ipynb"))


def _minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


@pytest.mark.parametrize("path", RELEASE, ids=lambda p: p.parent.name)
def test_release_notebook_carries_the_language_info_its_kernel_reports(path):
    info = json.loads(path.read_text())["metadata"]["language_info"]
    kernel = kernel_language_info()
    # The patch version is the building machine's; JupyterLab records another one on a first save elsewhere.
    assert {**info, "version": _minor(info["version"])} == {**kernel, "version": _minor(kernel["version"])}


@pytest.mark.parametrize("path", RELEASE, ids=lambda p: p.parent.name)
def test_release_notebook_names_the_installed_kernel_in_the_current_format(path):
    nb = json.loads(path.read_text())
    spec = KernelSpecManager().get_kernel_spec("python3")
    assert nb["metadata"]["kernelspec"] == {"name": "python3", "display_name": spec.display_name,
                                           "language": spec.language}
    assert (nb["nbformat"], nb["nbformat_minor"]) == (nbformat.current_nbformat, nbformat.current_nbformat_minor)
    assert all(cell.get("id") for cell in nb["cells"]), "JupyterLab gives cells without an id one, and saves it"


def test_a_build_on_another_python_patch_version_is_not_drift():
    text = RELEASE[0].read_text()
    info = json.loads(text)["metadata"]["language_info"]
    patch = info["version"]
    other_patch = _minor(patch) + ".99"
    assert _same_but_python_patch(text, text.replace(f'"version": "{patch}"', f'"version": "{other_patch}"'))
    assert not _same_but_python_patch(text, text.replace(f'"version": "{patch}"', '"version": "3.99.0"'))
    assert not _same_but_python_patch(text, text.replace('"cell_type": "markdown"', '"cell_type": "raw"', 1))
    assert not _same_but_python_patch(text, text[: len(text) // 2])
