"""Writes docs/config.md, the config reference, from configs/default.py.

Descriptions are the comments of `get_config()` (the `#` lines directly above a field joined
with its trailing comment), read with `ast` and `tokenize`; defaults and the fields each
preset changes come from the real `get_config()`, so every value is exact.

    .venv/bin/python scripts/config_reference.py           # rewrite docs/config.md
    .venv/bin/python scripts/config_reference.py --check   # exit 1 if docs/config.md is stale
    .venv/bin/python scripts/config_reference.py --out PATH
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import importlib.util
import io
import pathlib
import re
import sys
import tokenize
import types

ROOT = pathlib.Path(__file__).resolve().parent.parent
CONFIG_PATH = ROOT / "configs" / "default.py"
DEFAULT_OUT = ROOT / "docs" / "config.md"
COMMAND = ".venv/bin/python scripts/config_reference.py"
TOP_LEVEL = "top level"
PRESETS = "presets"
# A trailing comment that only points at the comment above adds nothing once the two are joined.
_SEE_ABOVE = re.compile(r"\s*\(see line above\)|^\s*see line above\.?\s*$", re.IGNORECASE)


@dataclasses.dataclass
class Source:
    """What the reference needs from the text of configs/default.py.

    Attributes:
        descriptions: dotted path ('' excluded) -> joined comment text, for every block and
            field that `get_config()` assigns.
        lines: dotted path -> line of its first assignment, which orders sections and rows.
        presets: preset name -> first docstring paragraph of its function, in the order of
            the `presets` dict in `get_config()`.
    """

    descriptions: dict[str, str]
    lines: dict[str, int]
    presets: dict[str, str]


def _comments(source: str) -> dict[int, tuple[str, bool]]:
    """Line -> (comment text without '#', whether the comment has the line to itself)."""
    comments = {}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            row, column = token.start
            own_line = not token.line[:column].strip()
            comments[row] = (token.string.lstrip("#").strip(), own_line)
    return comments


def _dotted(node: ast.expr) -> str | None:
    """'a.b' for the target `config.a.b`; None for anything not rooted at `config`."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name) and node.id == "config" and parts:
        return ".".join(reversed(parts))
    return None


def _describe(node: ast.stmt, comments: dict[int, tuple[str, bool]]) -> str:
    """The comment lines directly above a statement, then the comments on its own lines."""
    above = []
    line = node.lineno - 1
    # A blank line or a line of code ends the run: comments further up belong to something else.
    while line in comments and comments[line][1]:
        above.append(comments[line][0])
        line -= 1
    above.reverse()
    # A value spread over several lines (a parenthesised string) may carry its comment on any
    # of them, usually the closing one.
    inside = [
        comments[line][0] for line in range(node.lineno, node.end_lineno + 1) if line in comments
    ]
    trailing = _SEE_ABOVE.sub("", " ".join(inside)).strip()
    return " — ".join(part for part in (" ".join(above).strip(), trailing) if part)


def parse_source(source: str) -> Source:
    """Reads the comments, assignment order and preset functions of configs/default.py.

    Args:
        source: the text of configs/default.py.

    Returns:
        The parsed Source.

    Raises:
        ValueError: the file has no `get_config` or no `presets = {...}` dict inside it.
    """
    module = ast.parse(source)
    functions = {node.name: node for node in module.body if isinstance(node, ast.FunctionDef)}
    if "get_config" not in functions:
        raise ValueError("configs/default.py defines no get_config()")
    comments = _comments(source)
    descriptions: dict[str, str] = {}
    lines: dict[str, int] = {}
    preset_functions: dict[str, str] | None = None
    # ast.walk is breadth-first; sorting by position keeps file order even if an assignment
    # ever moves inside an `if`.
    statements = sorted(
        (node for node in ast.walk(functions["get_config"]) if isinstance(node, ast.Assign)),
        key=lambda node: node.lineno,
    )
    for node in statements:
        for target in node.targets:
            if isinstance(target, ast.Name) and target.id == "presets":
                if isinstance(node.value, ast.Dict):
                    preset_functions = {
                        key.value: value.id
                        for key, value in zip(node.value.keys, node.value.values, strict=True)
                        if isinstance(key, ast.Constant) and isinstance(value, ast.Name)
                    }
                continue
            path = _dotted(target)
            if path is None:
                continue
            text = _describe(node, comments)
            if path in descriptions:
                # A field assigned twice keeps its first place and the text of both.
                text = " ".join(part for part in (descriptions[path], text) if part)
            else:
                lines[path] = node.lineno
            descriptions[path] = text
    if preset_functions is None:
        raise ValueError("get_config() in configs/default.py has no `presets = {...}` dict")
    presets = {}
    for name, function in preset_functions.items():
        docstring = ast.get_docstring(functions[function]) if function in functions else None
        # The summaries wrap over several lines, so the first line alone stops mid-sentence.
        paragraph = (docstring or "").split("\n\n")[0]
        presets[name] = " ".join(paragraph.split())
    return Source(descriptions, lines, presets)


def load_config_module(path: pathlib.Path = CONFIG_PATH) -> types.ModuleType:
    """Imports configs/default.py by path (it is not inside a package)."""
    spec = importlib.util.spec_from_file_location("lc_cfr_default_config", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def flatten(tree: dict, prefix: str = "") -> dict:
    """{'a.b': leaf} of a nested dict (a ConfigDict's to_dict()); nested dicts are blocks."""
    flat = {}
    for key, value in tree.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten(value, f"{path}."))
        else:
            flat[path] = value
    return flat


def blocks(tree: dict, prefix: str = "") -> list[str]:
    """Dotted paths of every block (nested dict) of a config's to_dict()."""
    found = []
    for key, value in tree.items():
        if isinstance(value, dict):
            found.append(f"{prefix}{key}")
            found.extend(blocks(value, f"{prefix}{key}."))
    return found


def preset_changes(module: types.ModuleType, name: str) -> dict:
    """{field: value} of every field whose value `name` changes (or adds) in get_config()."""
    default = flatten(module.get_config().to_dict())
    changed = flatten(module.get_config(name).to_dict())
    # repr tells 1 from 1.0 and True from 1, which == does not.
    return {
        path: value
        for path, value in changed.items()
        if path not in default or repr(default[path]) != repr(value)
    }


def _cell(text: str) -> str:
    """Text safe inside a Markdown table cell."""
    return text.replace("|", "\\|")


def _code(value) -> str:
    return _cell(f"`{value!r}`")


def render(config_path: pathlib.Path = CONFIG_PATH) -> str:
    """The text of docs/config.md for the config file at `config_path`."""
    source = parse_source(config_path.read_text())
    module = load_config_module(config_path)
    tree = module.get_config().to_dict()
    fields = flatten(tree)

    def position(path: str) -> tuple:
        # Fields the parser did not see (set some other way) go last, still listed.
        return (source.lines.get(path, float("inf")), path)

    sections = {TOP_LEVEL: []}
    for block in sorted(blocks(tree), key=position):
        sections[block] = []
    for path in sorted(fields, key=position):
        sections[path.rpartition(".")[0] or TOP_LEVEL].append(path)

    out = [
        "# Config reference",
        "",
        f"Generated from the comments and `get_config()` of `configs/default.py` by `{COMMAND}`;"
        " do not edit by hand (`tests/test_config_reference.py` fails when it is stale).",
        "",
        "Set a field with `--config.FIELD=VALUE` (e.g. `--config.traversal.lanes=256`) and"
        " choose presets with `--config=configs/default.py:NAME[,NAME]`"
        f" ([{PRESETS}](#{PRESETS})).",
    ]
    for section, paths in sections.items():
        if not paths:
            continue
        out += ["", f"## {section}", ""]
        if source.descriptions.get(section):
            out += [source.descriptions[section], ""]
        out += ["| field | default | what it does |", "| --- | --- | --- |"]
        for path in paths:
            description = _cell(source.descriptions.get(path, ""))
            out.append(f"| `{path}` | {_code(fields[path])} | {description} |")

    out += [
        "",
        f"## {PRESETS}",
        "",
        "Each preset overrides the defaults above; presets combine left to right"
        " (`:small,classic`). The fields are those whose value differs from the default.",
        "",
        "| preset | what it is | fields it changes |",
        "| --- | --- | --- |",
    ]
    for name, summary in source.presets.items():
        changed = preset_changes(module, name)
        changes = "<br>".join(
            f"`{path}` = {_code(changed[path])}" for path in sorted(changed, key=position)
        )
        out.append(f"| `{name}` | {_cell(summary)} | {changes} |")
    return "\n".join(out) + "\n"


def _display(path: pathlib.Path) -> str:
    try:
        return str(path.resolve().relative_to(pathlib.Path.cwd()))
    except ValueError:
        return str(path)


def check(out: pathlib.Path, text: str) -> str | None:
    """None if `out` holds `text`, else a message naming the first line that differs."""
    command = COMMAND if out.resolve() == DEFAULT_OUT else f"{COMMAND} --out {_display(out)}"
    if not out.exists():
        return f"{_display(out)} does not exist; run `{command}` to write it."
    expected, found = text.splitlines(), out.read_text().splitlines()
    for number in range(1, max(len(expected), len(found)) + 1):
        want = expected[number - 1] if number <= len(expected) else "(end of file)"
        got = found[number - 1] if number <= len(found) else "(end of file)"
        if want != got:
            break
    else:
        if out.read_text() == text:
            return None
        # Same lines, different line endings or final newline.
        number, want, got = len(expected), "(line endings as generated)", "(other line endings)"
    return (
        f"{_display(out)} is out of date with configs/default.py: first difference at line "
        f"{number}\n  expected: {want}\n  found:    {got}\n"
        f"Run `{command}` to regenerate it."
    )


def main(argv: list[str] | None = None) -> int:
    """Writes the reference, or with --check compares it; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path, default=DEFAULT_OUT, help="reference path")
    parser.add_argument(
        "--check", action="store_true", help="exit 1 if --out differs from the generated text"
    )
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        message = check(args.out, text)
        if message:
            print(message, file=sys.stderr)
            return 1
        print(f"{_display(args.out)} is up to date")
        return 0
    args.out.write_text(text)
    print(f"wrote {_display(args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
