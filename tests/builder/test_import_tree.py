"""The modules of prerast import each other as a tree, read from their sources (function-level imports included):
no cycle inside the runtime package nor inside ci/, ci/'s subpackages importing each other only downward (LAYERS),
prerast_meta free of torch and of the runtime package, ci/ and setup.py depending on the package only through
prerast_meta, and the loader's state read through its functions alone."""

import ast
import glob
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUNTIME = os.path.join(ROOT, "package", "prerast")
META = os.path.join(ROOT, "prerast_meta")


def module_files(folder, package):
    """{module name: file} of the package in folder."""
    return {
        f"{package}.{os.path.basename(p)[:-3]}".replace(".__init__", ""): p
        for p in sorted(glob.glob(os.path.join(folder, "*.py")))
    }


def package_tree(folder, package):
    """{module name: file} of the package in folder and of its subpackages, at any depth."""
    found = module_files(folder, package)
    for sub in sorted(glob.glob(os.path.join(folder, "*", "__init__.py"))):
        name = os.path.basename(os.path.dirname(sub))
        found.update(package_tree(os.path.dirname(sub), f"{package}.{name}"))
    return found


MODULES = {**module_files(RUNTIME, "prerast"), **module_files(META, "prerast_meta")}
CI_MODULES = package_tree(os.path.join(ROOT, "ci"), "ci")
ALL_MODULES = set(MODULES) | set(CI_MODULES)
# ci's subpackages, lowest first: each imports only those before it (and itself). ci.__main__ (the command table)
# and ci.cli (its by-path entry point) sit above them all; ci/__init__.py imports nothing.
LAYERS = ["ci.matrix", "ci.toolkit", "ci.builder", "ci.repair", "ci.publish"]


def imported(path, package):
    """Absolute names of the modules a file imports anywhere in it (a string of code, like a child process's
    script, is not an import)."""
    tree = ast.parse(open(path).read(), path)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                )
            # `from pkg import mod` imports pkg.mod; `from pkg import name` needs pkg itself initialised.
            subs = {f"{base}.{a.name}" for a in node.names}
            found |= subs if all(s in ALL_MODULES for s in subs) else subs | {base}
    return found


def graph(modules):
    edges = {}
    for name, path in modules.items():
        package = name if path.endswith("__init__.py") else name.rsplit(".", 1)[0]
        edges[name] = {m for m in imported(path, package) if m in modules and m != name}
    return edges


def cycle(edges):
    """One import cycle as a list of module names, or None."""
    state, stack = {}, []

    def visit(n):
        state[n] = "open"
        stack.append(n)
        for m in sorted(edges[n]):
            if state.get(m) == "open":
                return stack[stack.index(m) :] + [m]
            if m not in state:
                found = visit(m)
                if found:
                    return found
        state[n] = "done"
        stack.pop()
        return None

    for n in sorted(edges):
        if n not in state:
            found = visit(n)
            if found:
                return found
    return None


EDGES = graph(MODULES)
CI_EDGES = graph(CI_MODULES)


def layer(name):
    """The index in LAYERS of a ci module's subpackage; None for ci's own modules (ci, ci.__main__, ci.cli)."""
    return next((i for i, pkg in enumerate(LAYERS) if name == pkg or name.startswith(pkg + ".")), None)


def upward_imports(edges):
    """The imports of a ci module of one subpackage of another one not below it in LAYERS, as 'a -> b'."""
    found = []
    for name, targets in sorted(edges.items()):
        for target in sorted(targets):
            if layer(name) is None:
                if name == "ci" or target in ("ci.__main__", "ci.cli") and name != "ci.cli":
                    found.append(f"{name} -> {target}")
            elif layer(target) is None or layer(target) > layer(name):
                found.append(f"{name} -> {target}")
    return found


def test_finds_a_cycle_when_there_is_one():
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None
    # A function-level import counts as an edge, relative imports resolve to absolute names.
    assert "prerast._ops" in EDGES["prerast._loader"] and "prerast_meta.compat" in EDGES["prerast._loader"]
    # The cycles this tree once had: the ops' registration and the cache fallback importing the loader back.
    for back in ("prerast._ops", "prerast._source_build"):
        assert cycle({**EDGES, back: EDGES[back] | {"prerast._loader"}}) is not None


def test_package_imports_form_a_tree():
    assert cycle(EDGES) is None, " -> ".join(cycle(EDGES))


def test_ci_imports_form_a_tree_in_declared_layers():
    assert {layer(n) for n in CI_MODULES} - {None} == set(range(len(LAYERS))), "a layer of LAYERS has no module"
    assert {n for n in CI_MODULES if layer(n) is None} == {"ci", "ci.__main__", "ci.cli"}, (
        "a module of ci/ outside its subpackages: put it in the one whose job it does (LAYERS)"
    )
    assert cycle(CI_EDGES) is None, " -> ".join(cycle(CI_EDGES))
    assert upward_imports(CI_EDGES) == []


def test_a_planted_ci_cycle_or_upward_import_is_found():
    # The cycles ci/ once had: the verdict on a cell importing the cells back (ci.builder.local -> cells -> local),
    # and the release's upload importing the publish plan, which imports the release.
    assert "ci.builder.cross" in CI_EDGES["ci.builder.buildable"]  # (a function-level import counts too)
    assert cycle({**CI_EDGES, "ci.builder.local": CI_EDGES["ci.builder.local"] | {"ci.builder.buildable"}}) is not None
    assert cycle({**CI_EDGES, "ci.publish.release": CI_EDGES["ci.publish.release"] | {"ci.publish.upload"}})
    # The matrix importing the wheel builder (as ci/matrix/cibw.py once did for the repository's root).
    planted = {**CI_EDGES, "ci.matrix.cibw": CI_EDGES["ci.matrix.cibw"] | {"ci.builder.wheel"}}
    assert upward_imports(planted) == ["ci.matrix.cibw -> ci.builder.wheel"]
    assert upward_imports({**CI_EDGES, "ci.toolkit.redist": {"ci.__main__"}}) == ["ci.toolkit.redist -> ci.__main__"]


def test_the_leaves_are_leaves():
    """The compatibility rules and the build metadata schema import nothing of the runtime package, nor torch. The
    one exception is setup.py's compile step of the kernel libraries, which is setuptools' build_ext."""
    for name, path in module_files(META, "prerast_meta").items():
        outside = {m.split(".")[0] for m in imported(path, "prerast_meta")} - {"prerast_meta"}
        allowed = {"setuptools"} if name == "prerast_meta.kernel_build" else set()
        assert outside <= set(sys.stdlib_module_names) | allowed, (name, outside - set(sys.stdlib_module_names))


def test_ci_and_the_package_depend_one_way():
    """ci/ and setup.py may import prerast_meta, never the runtime package (importing it loads the plugin); the
    package never imports ci/."""
    for name, path in list(CI_MODULES.items()) + [("setup", os.path.join(ROOT, "setup.py"))]:
        names = {m.split(".")[0] for m in imported(path, name)}
        assert "prerast" not in names, path
    assert "ci.builder.smoke" in CI_MODULES  # (the subpackages are read too)
    for name, path in MODULES.items():
        assert "ci" not in {m.split(".")[0] for m in imported(path, name)}, name


@pytest.mark.parametrize("folder", ["package/prerast", "prerast_meta", "ci", "benchmarks", "tests"])
def test_only_the_loader_touches_its_state(folder):
    """Others read it through status(), loaded_info() and require(); a test may still set an entry of it
    (monkeypatch.setitem(_loader._state, ...))."""
    for path in glob.glob(os.path.join(ROOT, folder, "**", "*.py"), recursive=True):
        if path.endswith(os.path.join("prerast", "_loader.py")):
            continue
        tree = ast.parse(open(path).read(), path)
        set_in_tests = {
            id(c.args[0])
            for c in ast.walk(tree)
            if folder == "tests"
            and isinstance(c, ast.Call)
            and isinstance(c.func, ast.Attribute)
            and c.func.attr == "setitem"
            and c.args
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr == "_state":
                assert id(node) in set_in_tests, f"{path}:{node.lineno} reads the loader's _state"


def test_no_module_of_the_project_is_loaded_by_path():
    """Where a plain import can do, there is one: the by-path loads left are of scripts that are not modules of
    a package (benchmark files) and of the cache module in a child process that must not import torch."""
    allowed = {"benchmarks/run.py", "tests/core/ops/test_cuda_equivalence.py", "tests/runtime/test_source_build.py"}
    found = set()
    for path in glob.glob(os.path.join(ROOT, "**", "*.py"), recursive=True):
        rel = os.path.relpath(path, ROOT)
        if rel.startswith((".venv", "build", "docs/_build", "dist")) or rel == "tests/builder/test_import_tree.py":
            continue
        if "spec_from_file_location" in open(path).read():
            found.add(rel)
    assert found <= allowed, found - allowed
