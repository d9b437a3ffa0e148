"""Child processes that end with their parent.

A trainer killed with SIGKILL runs no cleanup: its pool workers and inference server
would wait on their queues forever, and they hold the resource tracker's pipe open, so
the tracker never unlinks the shared memory and semaphores the trainer registered. Each
child therefore watches its parent and exits as soon as it is gone; once the children
are gone, the tracker sees its pipe close and releases what was registered.
"""

from __future__ import annotations

import os
import threading
import time

POLL_SECONDS = 0.5  # how often a child checks that its parent is alive


def exit_with_parent(poll_seconds: float = POLL_SECONDS) -> None:
    """Starts a daemon thread that ends this process when its parent dies.

    A dead parent's children are re-parented (to init or a subreaper), so a changed
    `os.getppid()` is the signal; the check is portable where `prctl(PR_SET_PDEATHSIG)`
    is not, and does not fire when the thread that spawned the child ends.
    """
    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(poll_seconds)
            if os.getppid() != parent:
                os._exit(1)  # no cleanup that could wait on the dead parent

    threading.Thread(target=watch, name="lc_cfr-lifeline", daemon=True).start()
