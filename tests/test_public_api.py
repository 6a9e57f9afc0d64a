"""``import oahu``: every name in ``__all__`` resolves, lazily."""

from __future__ import annotations

import subprocess
import sys

import oahu


def test_every_exported_name_resolves_to_what_its_module_defines():
    assert oahu.__all__ == sorted(oahu.__all__)
    for name in oahu.__all__:
        value = getattr(oahu, name)
        assert getattr(value, "__name__", name) == name or not callable(value)
    assert oahu.OAHU.__module__ == "oahu.learners.oahu.learner"
    assert set(oahu.__all__) <= set(dir(oahu))


def test_import_oahu_loads_nothing_heavy_until_a_name_is_used():
    probe = (
        "import sys, oahu\n"
        "heavy = ('torch', 'sklearn', 'river', 'faiss')\n"
        "before = [m for m in heavy if m in sys.modules]\n"
        "oahu.LEGO\n"
        "print(before, 'torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[] True"


def test_an_unknown_name_is_an_attribute_error():
    try:
        oahu.nothing_here  # noqa: B018
    except AttributeError as error:
        assert "nothing_here" in str(error)
    else:
        raise AssertionError("no AttributeError")
