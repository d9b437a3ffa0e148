"""The package's import graph: no cycle, and no import against the direction that
docs/architecture.md states (a lower layer never imports a higher one, and siblings of one
layer never import each other).

The graph is read from the source with `ast` (and, for Cython, from its Python-level
`import` lines), lazy imports inside functions included: a lazy import still ties two
modules together.
"""

import ast
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "lc_cfr"

# docs/architecture.md, "Import direction": area -> layer. An area is a subpackage of
# lc_cfr or a top-level module; it may import its own modules and lower layers only.
LAYERS = {
    "game": 0,
    "compile_cache": 0,
    "bots": 1,
    "nets": 1,
    "memory": 1,
    "traversal": 2,
    "learn": 2,
    "search": 3,
    "eval": 4,
    "spiel": 4,
    "train": 5,
    "terminal_game": 6,
    "web": 7,
    "main": 8,
    "evaluate": 8,
    "export": 8,
    "play": 8,
    "report": 8,
    "serve": 8,
}
# the package's own __init__ imports nothing; listed so that every area is accounted for
TOP = ""


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _modules() -> dict[str, pathlib.Path]:
    files = [*PACKAGE.rglob("*.py"), *PACKAGE.rglob("*.pyx")]
    return {_module_name(path): path for path in files if "__pycache__" not in path.parts}


def _imports(path: pathlib.Path, known: set[str]) -> set[str]:
    """The lc_cfr modules `path` imports (a name imported from a package counts as the
    submodule when one of that name exists)."""
    source = path.read_text()
    names: list[str] = []
    if path.suffix == ".pyx":  # cimports are C-level; Python imports are plain lines
        for line in source.splitlines():
            match = re.match(r"\s*from\s+(lc_cfr[\w.]*)\s+import\s+(?!\()(.*)", line)
            if match and "cimport" not in line:
                names.append(match.group(1))
            match = re.match(r"\s*import\s+(lc_cfr[\w.]*)", line)
            if match:
                names.append(match.group(1))
    else:
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    names.append(full if full in known else node.module)
            elif isinstance(node, ast.Import):
                names.extend(alias.name for alias in node.names)
    return {name for name in names if name == "lc_cfr" or name.startswith("lc_cfr.")}


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {name: _imports(path, known) & known for name, path in modules.items()}


def _area(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else TOP


def test_every_area_has_a_layer():
    areas = {_area(module) for module in _modules()} - {TOP}
    assert areas <= set(LAYERS), f"place {sorted(areas - set(LAYERS))} in LAYERS and the doc"


def test_no_import_runs_against_the_layers():
    wrong = []
    for module, targets in _graph().items():
        source = _area(module)
        for target in targets:
            if _area(target) in (source, TOP):
                continue
            if LAYERS[_area(target)] >= LAYERS[source]:
                wrong.append(f"{module} -> {target}")
    assert not wrong, "imports against docs/architecture.md:\n" + "\n".join(sorted(wrong))


def test_the_import_graph_has_no_cycle():
    graph = _graph()
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if target == node:
                continue
            if state.get(target) == 1:
                return stack[stack.index(target) :] + [target]
            if target not in state:
                cycle = visit(target)
                if cycle:
                    return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            assert cycle is None, "import cycle: " + " -> ".join(cycle)


# Who may load the training loop: the command line that trains, and the package's lazy
# `lc_cfr.train.Trainer` (loaded on first use); readers of a saved run import
# `train.setup` and `train.run_format` instead.
LOOP = "lc_cfr.train.trainer"
LOOP_IMPORTERS = {"lc_cfr.main", "lc_cfr.train"}


def test_only_the_trainer_command_loads_the_training_loop():
    importers = {module for module, targets in _graph().items() if LOOP in targets}
    assert importers <= LOOP_IMPORTERS, sorted(importers - LOOP_IMPORTERS)


def test_the_checker_sees_a_planted_violation(tmp_path):
    """The parser finds imports in every form the package uses (so a pass means something)."""
    planted = tmp_path / "planted.py"
    planted.write_text(
        "from lc_cfr.train import trainer\n"
        "import lc_cfr.eval.api\n"
        "def lazy():\n"
        "    from lc_cfr.traversal.api import Networks\n"
    )
    known = set(_modules())
    assert _imports(planted, known) == {
        "lc_cfr.train.trainer",
        "lc_cfr.eval.api",
        "lc_cfr.traversal.api",
    }


def _section_numbers(document: pathlib.Path) -> set[str]:
    return set(re.findall(r"^#+ (\d+(?:\.\d+)*)\b", document.read_text(), flags=re.M))


def test_every_design_citation_names_an_existing_section():
    """ "docs/design.md section 3.4" (or "sections 3.3 and 3.4") anywhere in the code,
    tests, scripts, configs or docs must name a heading of docs/design.md."""
    sections = _section_numbers(ROOT / "docs" / "design.md")
    citation = re.compile(r"design\.md,? sections? ((?:\d+(?:\.\d+)*(?:,? (?:and )?)?)+)")
    places = [*PACKAGE.rglob("*.py"), *PACKAGE.rglob("*.pyx"), *(ROOT / "tests").glob("*.py")]
    places += [*(ROOT / "scripts").glob("*.py"), *(ROOT / "configs").glob("*.py")]
    places += [*(ROOT / "docs").glob("*.md"), ROOT / "README.md"]
    cited, missing = 0, []
    for path in places:
        for match in citation.finditer(path.read_text()):
            for number in re.findall(r"\d+(?:\.\d+)*", match.group(1)):
                cited += 1
                if number not in sections:
                    missing.append(f"{path.relative_to(ROOT)}: section {number}")
    assert cited > 20, "the pattern no longer finds the citations"
    assert not missing, "\n".join(missing)


def test_relative_links_of_the_docs_resolve():
    broken = []
    for page in [*(ROOT / "docs").glob("*.md"), ROOT / "README.md"]:
        for target in re.findall(r"\]\(([^)#:\s]+)(?:#[^)]*)?\)", page.read_text()):
            if not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert not broken, "\n".join(broken)
