"""docs/config.md, the reference generated from configs/default.py, stays complete and in sync."""

import importlib.util
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "config_reference.py"
REFERENCE = ROOT / "docs" / "config.md"
PRESET_NAMES = {"small", "tiny", "smoke", "classic", "wide", "plain"}
# Fields with no comment of their own: the "Annealing" comment above traversal.epsilon_decay
# describes all three, but the generator attaches a comment to the one field below it.
# Comment them in configs/default.py and drop them from here; never add to this set.
KNOWN_UNCOMMENTED: set[str] = set()  # fields allowed without a comment (none)


def _load(name: str, path: pathlib.Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    # dataclasses looks its module up in sys.modules while building the class.
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


reference = _load("config_reference", SCRIPT)
default = _load("config_default_for_reference_test", ROOT / "configs" / "default.py")


def _flatten(tree: dict, prefix: str = "") -> dict:
    # Written again here rather than borrowed from the script, so a bug there cannot hide.
    flat = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _tables(text: str) -> dict[str, list[list[str]]]:
    """Section heading -> body rows of its table, cells stripped and `\\|` unescaped."""
    tables: dict[str, list[list[str]]] = {}
    section = None
    for line in text.splitlines():
        if line.startswith("## "):
            section = line[3:]
            tables[section] = []
        elif section and line.startswith("|"):
            cells = re.split(r"(?<!\\)\|", line.strip()[1:-1])
            cells = [cell.strip().replace("\\|", "|") for cell in cells]
            if cells[0] not in ("field", "preset", "---"):
                tables[section].append(cells)
    return tables


def _code(cell: str) -> str:
    assert cell.startswith("`") and cell.endswith("`"), cell
    return cell[1:-1]


def test_reference_is_in_sync():
    assert REFERENCE.read_text() == reference.render(), (
        "docs/config.md is stale: run `.venv/bin/python scripts/config_reference.py`"
    )


def test_every_field_is_listed_once_with_its_default_and_a_description():
    fields = _flatten(default.get_config().to_dict())
    rows = [
        row
        for section, body in _tables(reference.render()).items()
        if section != reference.PRESETS
        for row in body
    ]
    listed = [_code(row[0]) for row in rows]
    assert sorted(listed) == sorted(fields), "each get_config() field must appear exactly once"
    uncommented = set()
    for row in rows:
        field, value, description = _code(row[0]), _code(row[1]), row[2]
        assert value == repr(fields[field]), field
        if not description:
            uncommented.add(field)
    assert not uncommented - KNOWN_UNCOMMENTED, (
        f"fields without a comment in configs/default.py: {sorted(uncommented - KNOWN_UNCOMMENTED)}"
    )
    assert not KNOWN_UNCOMMENTED - uncommented, (
        f"now described, remove from KNOWN_UNCOMMENTED: {sorted(KNOWN_UNCOMMENTED - uncommented)}"
    )


def test_preset_table_lists_exactly_the_changed_fields():
    rows = _tables(reference.render())[reference.PRESETS]
    assert {_code(row[0]) for row in rows} == PRESET_NAMES
    base = _flatten(default.get_config().to_dict())
    for name_cell, summary, changes in rows:
        name = _code(name_cell)
        preset = _flatten(default.get_config(name).to_dict())
        expected = {
            field: repr(value)
            for field, value in preset.items()
            if field not in base or repr(base[field]) != repr(value)
        }
        listed = [re.fullmatch(r"`([^`]+)` = `(.*)`", change) for change in changes.split("<br>")]
        assert all(listed), changes
        assert len(listed) == len(expected), f"{name}: a field listed twice or one missing"
        assert {match[1]: match[2] for match in listed} == expected, name
        assert summary, f"preset {name} needs a docstring"


def _run(*args):
    command = [sys.executable, str(SCRIPT), *map(str, args)]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60)


def test_check_flags_a_stale_file_and_passes_a_fresh_one(tmp_path):
    fresh = tmp_path / "fresh.md"
    assert _run("--out", fresh).returncode == 0
    assert fresh.read_text() == reference.render()
    assert _run("--check", "--out", fresh).returncode == 0

    lines = fresh.read_text().splitlines(keepends=True)
    number = next(i for i, line in enumerate(lines, 1) if line.startswith("| `rules.n_colors`"))
    lines[number - 1] = lines[number - 1].replace("`5`", "`6`")
    stale = tmp_path / "stale.md"
    stale.write_text("".join(lines))
    result = _run("--check", "--out", stale)
    assert result.returncode == 1
    assert f"first difference at line {number}" in result.stderr
    assert "| `rules.n_colors` | `6` |" in result.stderr
    assert "Run `.venv/bin/python scripts/config_reference.py --out" in result.stderr

    missing = _run("--check", "--out", tmp_path / "missing.md")
    assert missing.returncode == 1 and "does not exist" in missing.stderr
