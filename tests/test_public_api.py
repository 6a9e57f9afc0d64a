"""``import oahu``: every name in ``__all__`` resolves, lazily."""

from __future__ import annotations

import ast
import importlib
import inspect
import subprocess
import sys
from types import ModuleType

import oahu


def _assigned_at_top_level(module: ModuleType) -> set[str]:
    """Names a module binds itself (def, class, assignment), not ones it imports."""
    tree = ast.parse(inspect.getsource(module))
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def test_every_exported_name_resolves_to_what_its_module_defines():
    assert oahu.__all__ == sorted(oahu.__all__)
    assert set(oahu.__all__) == set(oahu._EXPORTS)
    for name in oahu.__all__:
        value = getattr(oahu, name)
        module = importlib.import_module(oahu._EXPORTS[name])
        # The module named for it binds the name itself (not a re-export), and it is that object.
        assert name in _assigned_at_top_level(module), (name, module.__name__)
        assert getattr(module, name) is value, name
        if inspect.isclass(value) or inspect.isfunction(value):
            assert (value.__module__, value.__name__) == (module.__name__, name)
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
