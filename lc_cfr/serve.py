"""Play a trained agent in the browser: a local page, the rules on the server.

    python -m lc_cfr.serve --workdir=RUN [--port=8000] [--host=127.0.0.1]
        [--search_determinizations=D] [--search_candidates=K] ...

Loads the latest checkpoint of RUN (a missing or damaged run fails here, with one line),
then serves http://HOST:PORT/: pick a checkpoint, the agent's policy view (average
strategy, current, SD-CFR where the run keeps snapshots, search), your seat and a deal,
and play by clicking. The page works offline (no CDN) and speaks JSON to the server
(`lc_cfr.web.server` lists the API), which plays every game in lc_cfr's engine; games are
independent, each with its own id. The server binds to localhost unless --host says
otherwise. Ctrl-C stops it.
"""

from __future__ import annotations

import sys

from absl import app, flags

from lc_cfr import compile_cache
from lc_cfr import search as search_lib

_WORKDIR = flags.DEFINE_string("workdir", None, "Training run directory (holds config.json).")
_PORT = flags.DEFINE_integer("port", 8000, "Port to listen on (0: any free one).")
_HOST = flags.DEFINE_string(
    "host", "127.0.0.1", "Address to bind (127.0.0.1: this machine only; 0.0.0.0: any)."
)
_SEARCH = search_lib.define_flags()


def main(argv) -> int:
    if len(argv) > 1:
        return _fail(f"unexpected arguments {argv[1:]} (all options are --flags)")
    if not _WORKDIR.value:
        return _fail("--workdir is required: the training run to play against")
    compile_cache.quiet_backend_probe()
    compile_cache.enable(compile_cache.directory())
    from lc_cfr.train.saved_networks import CheckpointNotFoundError
    from lc_cfr.web.games import GameStore
    from lc_cfr.web.server import make_server

    try:
        store = GameStore(_WORKDIR.value, search_options=search_lib.options_from_flags(_SEARCH))
    except CheckpointNotFoundError as error:
        return _fail(f"{error}: train the run for an iteration first")
    except (FileNotFoundError, ValueError) as error:
        return _fail(str(error))
    try:
        server = make_server(store, _HOST.value, _PORT.value)
    except OSError as error:
        return _fail(f"cannot listen on {_HOST.value}:{_PORT.value}: {error}")
    host, port = server.server_address[:2]
    print(f"lc_cfr.serve: checkpoint {store.latest} of {store.workdir}", flush=True)
    print(f"open http://{host}:{port}/ in a browser (Ctrl-C stops the server)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        print("\nstopped", flush=True)
    finally:
        server.server_close()
    return 0


def _fail(message: str) -> int:
    print(f"lc_cfr.serve: {message}", file=sys.stderr, flush=True)
    return 1


if __name__ == "__main__":
    app.run(main)
