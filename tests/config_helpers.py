"""configs/default.py for the tests, loaded from its path once: `default_config` is the
module (its `get_config(preset)`), with no `sys.path` entry for configs/."""

import importlib.util
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
DEFAULT_CONFIG = ROOT / "configs" / "default.py"
_MODULE = "lc_cfr_tests_default_config"


def load_default_config():
    """The module of configs/default.py (loaded on the first call, then the same one)."""
    if _MODULE not in sys.modules:
        spec = importlib.util.spec_from_file_location(_MODULE, DEFAULT_CONFIG)
        module = importlib.util.module_from_spec(spec)
        sys.modules[_MODULE] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[_MODULE]
            raise
    return sys.modules[_MODULE]


default_config = load_default_config()
