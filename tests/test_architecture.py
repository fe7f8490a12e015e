"""The package's shape: imports flow one way through the layers (docs/architecture.md), every module
says what it owns and what it may import, and the SQL ships inside the package."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "dpngram"
MODULES = sorted(p for p in PACKAGE.rglob("*.py"))


def test_import_contracts_hold() -> None:
    """import-linter's contracts (pyproject [tool.importlinter]): the layers, stages independent of
    each other, and mechanisms/lm free of the run plumbing. A new upward import fails here."""
    lint = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run(
        [str(lint), "--config", str(ROOT / "pyproject.toml")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "0 broken" in result.stdout


def test_the_contract_names_every_layer_folder() -> None:
    """A new top-level folder or module under src/dpngram must be placed in a layer."""
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]
    layers = next(c for c in config["contracts"] if c["type"] == "layers")["layers"]
    named = {name.strip() for layer in layers for name in layer.split("|")}
    present = {
        f"dpngram.{p.stem if p.is_file() else p.name}"
        for p in PACKAGE.iterdir()
        if (p.is_dir() and (p / "__init__.py").exists()) or (p.suffix == ".py" and p.stem != "__init__")
    }
    assert present == named


def test_stages_are_independent_of_each_other() -> None:
    config_text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    stages = {p.stem for p in (PACKAGE / "stages").glob("*.py") if p.stem != "__init__"}
    for stage in stages:
        assert f'"dpngram.stages.{stage}"' in config_text, f"stage {stage} is missing from the contract"


#: The release modules each lower layer may import (docs/architecture.md, "The rule"): the forbidden
#: contracts must forbid every other one, so a new release module is forbidden to them by default.
RELEASE_ALLOWED = {
    "dpngram.mechanisms": {"dpngram.release.layout"},
    "dpngram.lm": {"dpngram.release.layout", "dpngram.release.identity"},
}


@pytest.mark.parametrize("source", sorted(RELEASE_ALLOWED))
def test_release_contracts_forbid_every_release_module_but_the_allowed(source: str) -> None:
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]
    release = {
        f"dpngram.release.{p.stem}" for p in (PACKAGE / "release").glob("*.py") if p.stem != "__init__"
    }
    forbidden = {
        module
        for c in config["contracts"]
        if c["type"] == "forbidden" and source in c["source_modules"]
        for module in c["forbidden_modules"]
        if module.startswith("dpngram.release.")
    }
    assert forbidden == release - RELEASE_ALLOWED[source]


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_every_module_says_what_it_owns_and_may_import(path: Path) -> None:
    docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
    assert docstring, f"{path} has no module docstring"
    assert "Owns:" in docstring and "Imports:" in docstring, path


def test_no_comment_refers_to_issue_numbers() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in MODULES
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if "issue " in line.lower() and any(ch.isdigit() for ch in line.lower().split("issue ", 1)[1][:3])
    ]
    assert not offenders, offenders


def test_sql_ships_as_package_data() -> None:
    """Every SQL statement is reachable through the installed package (a non-editable install has no
    repository to read sql/ from)."""
    files = sorted((ROOT / "sql").glob("*/*.sql"))
    assert files
    packaged = resources.files("dpngram.sql")
    for path in files:
        relative = path.relative_to(ROOT / "sql").as_posix()
        assert packaged.joinpath(relative).read_text(encoding="utf-8") == path.read_text(encoding="utf-8")


#: A module longer than this is split along a seam; one longer than EXPLAIN_LINES says in its
#: docstring why it is one module ("Why one module").
MAX_LINES, EXPLAIN_LINES = 800, 600
#: Over EXPLAIN_LINES without the note yet (none now).
NOT_YET_EXPLAINED: set[str] = set()


def test_no_module_is_too_long_to_find_ones_way_in() -> None:
    too_long, unexplained = [], []
    for path in MODULES:
        text = path.read_text(encoding="utf-8")
        lines, name = text.count("\n"), path.relative_to(PACKAGE).as_posix()
        if lines > MAX_LINES:
            too_long.append(f"{name}: {lines} lines")
        elif lines > EXPLAIN_LINES and name not in NOT_YET_EXPLAINED:
            if "Why one module" not in (ast.get_docstring(ast.parse(text)) or ""):
                unexplained.append(f"{name}: {lines} lines")
    assert not too_long, f"split along a seam: {too_long}"
    assert not unexplained, f"say in the docstring why it is one module: {unexplained}"


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _is_package_module(dotted: str) -> bool:
    relative = PACKAGE.joinpath(*dotted.split(".")[1:])
    return relative.with_suffix(".py").is_file() or (relative / "__init__.py").is_file()


def private_reach_ins(modules: list[Path]) -> list[str]:
    """A module reaching for another module's private name: ``from dpngram.x import _name`` (or a
    relative ``from .x import _name``), or ``x._name`` on a module bound by ``import dpngram.x``,
    ``import dpngram.x as x`` or ``from dpngram import x``."""
    found = []
    for path in modules:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        module_names: dict[str, str] = {}  # local name -> the dpngram module it is bound to
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("dpngram")):
                for alias in node.names:
                    if _is_private(alias.name):
                        found.append(f"{path.name}:{node.lineno}: {node.module}.{alias.name}")
                    elif not node.level and _is_package_module(f"{node.module}.{alias.name}"):
                        module_names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("dpngram"):
                        module_names[alias.asname or "dpngram"] = alias.name if alias.asname else "dpngram"
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and _is_private(node.attr):
                root = node.value
                while isinstance(root, ast.Attribute):
                    root = root.value
                if isinstance(root, ast.Name) and root.id in module_names:
                    found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_module_imports_another_modules_private_names(tmp_path) -> None:
    """What modules share has a public name: no module under src/dpngram imports an ``_``-prefixed
    name from another one, nor reads one off an imported module (issue 27). The check catches
    planted reach-ins, absolute, relative and by attribute, and lets public names, dunders and a
    private attribute of anything but a module through."""
    assert private_reach_ins(MODULES) == []
    planted = tmp_path / "planted.py"
    planted.write_text(
        "from dpngram.mechanisms.dpne import level_size, _scalar\n"
        "from .ngram_tables import _context\n"
        "from dpngram import __version__\n"
        "import dpngram.lm.ngram_tables\n"
        "import dpngram.mechanisms.dpne as dpne_module\n"
        "from dpngram.lm import build\n"
        "dpngram.lm.ngram_tables._context(1)\n"
        "dpne_module._scalar(2)\n"
        "build.build_route(build._seed)\n"
        "dpne_module.level_size(self._private)\n",
        encoding="utf-8",
    )
    assert private_reach_ins([planted]) == [
        "planted.py:1: dpngram.mechanisms.dpne._scalar",
        "planted.py:2: ngram_tables._context",
        "planted.py:7: dpngram.lm.ngram_tables._context",
        "planted.py:8: dpne_module._scalar",
        "planted.py:9: build._seed",
    ]


def diagram_modules(text: str) -> dict[str, set[str]]:
    """The modules docs/architecture.md's diagram names, by layer: ``{"cli": {"main", ...}, ...}``;
    a top-level module (``demo.py``) under ``""``. Read from the boxed lines of the first code
    block; notes in parentheses and the ``|`` between siblings are not names."""
    block = text.split("```", 2)[1]
    boxed = [line.strip() for line in block.splitlines()]
    inner = "\n".join(line[1:-1] for line in boxed if line.startswith("|") and line.endswith("|"))
    inner = re.sub(r"\([^)]*\)", " ", inner)
    named: dict[str, set[str]] = {"": set()}
    layer = ""
    for token in inner.split():
        if token == "|":
            continue
        if token.endswith("/"):
            layer = token.removesuffix("/")
            named.setdefault(layer, set())
        elif token.endswith(".py"):
            named[""].add(token.removesuffix(".py"))
        else:
            named[layer].add(token)
    return named


def test_the_architecture_diagram_lists_every_module() -> None:
    """docs/architecture.md's diagram names every module under src/dpngram in its layer, and no
    module that is gone: a new or moved module updates the diagram."""
    present: dict[str, set[str]] = {"": set()}
    for path in MODULES:
        parts = path.relative_to(PACKAGE).parts
        if len(parts) == 1:
            if path.stem != "__init__":
                present[""].add(path.stem)
        elif path.stem != "__init__":
            present.setdefault(parts[0], set()).add(path.stem)
    documented = diagram_modules((ROOT / "docs" / "architecture.md").read_text(encoding="utf-8"))
    assert documented == present


def test_the_diagram_check_notices_a_missing_module() -> None:
    text = "```\n |  lm/  arpa build  (a note)  |\n |  demo.py  |  validation.py |\n```\n"
    assert diagram_modules(text) == {"": {"demo", "validation"}, "lm": {"arpa", "build"}}


# ----------------------------------------------------------------------------------------------
# Reviewability (docs/architecture.md, "Why this order"): privacy events come from mechanisms, the
# budgeted stages are declared once, functions are short enough to check one at a time.
# ----------------------------------------------------------------------------------------------
def constructions_of(modules: list[Path], cls: str) -> list[str]:
    """Calls of ``cls(...)`` (by name or attribute) in ``modules``."""
    found = []
    for path in modules:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                func = node.func
                name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
                if name == cls:
                    found.append(f"{path.name}:{node.lineno}")
    return found


def test_no_stage_constructs_a_privacy_event() -> None:
    """A stage only wires: the mechanism that drew the noise builds its events, next to its
    calibration (docs/architecture.md, "Where do I add a new mechanism")."""
    stages = sorted((PACKAGE / "stages").glob("*.py"))
    assert constructions_of(stages, "PrivacyEvent") == []


def test_only_engines_build_a_warehouse() -> None:
    """Every caller gets the run's engine with the configured memory limit (engines/select.py)."""
    outside = [p for p in MODULES if p.parent.name != "engines"]
    assert constructions_of(outside, "Warehouse") == []


def test_the_event_check_notices_a_stage_that_builds_an_event(tmp_path) -> None:
    bad = tmp_path / "bad_stage.py"
    bad.write_text("from dpngram.core import accounting\nE = accounting.PrivacyEvent('x', 'approx')\n")
    assert constructions_of([bad], "PrivacyEvent") == ["bad_stage.py:2"]


#: Collections keyed by RunConfig's section names (``config.dpne``, ``config.bayes``, ...), a
#: namespace of its own that shares some words with the stage names: not lists of stages.
SECTION_REGISTRIES = {("config/sections.py", "SECTIONS"), ("orchestration/form.py", "CONFIG_SECTIONS")}


def stage_name_declarations(modules: list[Path], names: set[str]) -> list[str]:
    """Second declarations of budgeted stage names: a module- or class-level constant holding one
    (``STAGE = "bayes"``), or a literal collection (dict keys, tuple, list, set) naming two or more,
    outside :data:`SECTION_REGISTRIES`."""

    def is_name(node: ast.AST | None) -> bool:
        return isinstance(node, ast.Constant) and node.value in names

    found = []
    for path in modules:
        relative = path.relative_to(PACKAGE).as_posix() if path.is_relative_to(PACKAGE) else path.name
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for scope in [tree, *(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef))]:
            for node in scope.body:
                value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
                if is_name(value):
                    found.append(f"{relative}:{node.lineno}: constant {value.value!r}")
        for node in ast.walk(tree):
            items = node.keys if isinstance(node, ast.Dict) else getattr(node, "elts", None)
            if not isinstance(node, (ast.Dict, ast.Tuple, ast.List, ast.Set)) or items is None:
                continue
            if sum(is_name(item) for item in items) >= 2:
                found.append(f"{relative}:{node.lineno}: collection of stage names")
    assigned = {
        (path.relative_to(PACKAGE).as_posix(), target.id): node.lineno
        for path in modules
        if path.is_relative_to(PACKAGE)
        for node in ast.parse(path.read_text(encoding="utf-8")).body
        if isinstance(node, (ast.Assign, ast.AnnAssign))
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Name)
    }
    exempt = {f"{module}:{line}: collection of stage names" for (module, name), line in assigned.items()
              if (module, name) in SECTION_REGISTRIES}  # fmt: skip
    return [f for f in found if f not in exempt]


def test_each_budgeted_stage_is_declared_once() -> None:
    """Stage names live in config/stages.py; everything else derives from BUDGETED_STAGES."""
    from dpngram.config.stages import BUDGETED_STAGES

    names = {stage.name for stage in BUDGETED_STAGES}
    modules = [p for p in MODULES if p != PACKAGE / "config" / "stages.py"]
    assert stage_name_declarations(modules, names) == []


def test_the_declaration_check_notices_a_second_list(tmp_path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(
        'STAGE = "bayes"\nORDER = ("dpne", "bayes")\nLABELS = {"synth": 1, "bayes": 2}\nOK = ("dpne",)\n'
    )
    assert stage_name_declarations([bad], {"dpne", "bayes", "synth"}) == [
        "bad.py:1: constant 'bayes'",
        "bad.py:2: collection of stage names",
        "bad.py:3: collection of stage names",
    ]


def long_functions(modules: list[Path]) -> tuple[list[str], list[str]]:
    """Functions over 80 lines, and those over 60 whose docstring does not say why
    (``Over 60 lines:``); decorators and docstring count."""
    too_long, unexplained = [], []
    for path in modules:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                start = node.decorator_list[0].lineno if node.decorator_list else node.lineno
                length, where = node.end_lineno - start + 1, f"{path.name}:{node.lineno} {node.name}"
                if length > 80:
                    too_long.append(f"{where} ({length} lines)")
                elif length > 60 and "Over 60 lines:" not in (ast.get_docstring(node) or ""):
                    unexplained.append(f"{where} ({length} lines)")
    return too_long, unexplained


def test_no_function_is_too_long_to_check() -> None:
    too_long, unexplained = long_functions(MODULES)
    assert too_long == [], "split it into named steps"
    assert unexplained == [], "split it, or say why in its docstring ('Over 60 lines: ...')"


def test_the_length_check_counts_lines(tmp_path) -> None:
    body = "\n".join("    x = 1" for _ in range(59))
    ok = f"def ok():\n{body}\n"  # 60 lines
    explained = f'def explained():\n    """Over 60 lines: one recipe."""\n{body}\n'  # 61
    bad = f"def bad():\n{body}\n    x = 2\n    x = 3\n"  # 62, starting on line 124
    (tmp_path / "f.py").write_text(f"{ok}\n{explained}\n{bad}")
    assert long_functions([tmp_path / "f.py"]) == ([], ["f.py:124 bad (62 lines)"])
