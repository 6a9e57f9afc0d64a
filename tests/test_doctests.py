"""The doctests of oahu.streams and oahu.connectors, imported under their installed names.

pytest's ``--doctest-modules`` imports a file by its place in the checkout, which would make
streams/x.py the top-level module ``streams.x``, a second copy beside ``oahu.streams.x``. These
two packages live in top-level folders of the repository but install under ``oahu`` (see
pyproject.toml), so their doctests run here, as the modules users import.
"""

from __future__ import annotations

import doctest
import importlib
import importlib.metadata
import pkgutil
import sysconfig

import pytest

import oahu.connectors
import oahu.streams

PACKAGES = (oahu.streams, oahu.connectors)
MODULES = [p.__name__ for p in PACKAGES] + sorted(
    info.name for p in PACKAGES for info in pkgutil.walk_packages(p.__path__, p.__name__ + ".")
)


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name: str) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed"


def test_the_doctests_are_found() -> None:
    attempted = sum(doctest.testmod(importlib.import_module(n)).attempted for n in MODULES)
    assert attempted > 50


def test_site_packages_gets_one_top_level_package() -> None:
    """streams/ and connectors/ do not install as top-level packages of their own."""
    site_packages = sysconfig.get_paths()["purelib"]  # not a build's leftovers in the checkout
    (installed,) = importlib.metadata.distributions(name="oahu", path=[site_packages])
    top_level = installed.read_text("top_level.txt")
    assert top_level is not None and top_level.split() == ["oahu"]
    assert oahu.streams.__name__ == "oahu.streams"
    assert oahu.connectors.__path__[0].endswith("connectors")


def test_every_subpackage_is_listed_for_installation() -> None:
    """pyproject.toml lists oahu's packages explicitly (streams/ and connectors/ are mapped into
    it); an editable install finds an unlisted one anyway, a wheel would leave it out."""
    import tomllib
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    setuptools = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(setuptools["packages"])
    found = {"oahu.streams", "oahu.connectors"} | {
        ".".join(init.parent.relative_to(root).parts)
        for init in (root / "oahu").rglob("__init__.py")
    }
    # Folders of data (the console's web assets) are listed too, so that setuptools installs
    # them; each holds files its package-data patterns match, and no code.
    data = listed - found
    assert data == {"oahu.service.console.static", "oahu.service.console.static.vendor.uplot"}
    for name in data:
        folder = root.joinpath(*name.split("."))
        assert not (folder / "__init__.py").exists()
        assert all(any(folder.glob(p)) for p in setuptools["package-data"][name]), name
    assert found <= listed
