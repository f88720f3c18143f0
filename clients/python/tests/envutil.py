"""Keeps the tests independent of the machine's environment: the launcher
and LAGGARD_* variables that the client reads are removed for the whole
test module (a CI runner under Slurm must not change the expected ids)."""

import logging
import os
from unittest import mock

CLIENT_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_PORT", "TORCHELASTIC_RUN_ID",
               "SLURM_JOB_ID", "SLURM_STEP_ID")


def hermetic_env():
    """A started mock.patch.dict of os.environ without the variables the
    client reads; call .stop() when done."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("LAGGARD_") and k not in CLIENT_VARS}
    p = mock.patch.dict(os.environ, clean, clear=True)
    p.start()
    return p


def module_fixture():
    """(setUpModule, tearDownModule) for a test module: a hermetic
    environment, and the laggard logger quiet (tests that expect logs use
    assertLogs)."""
    state = {}

    def set_up():
        state["env"] = hermetic_env()
        logging.getLogger("laggard").setLevel(logging.CRITICAL)

    def tear_down():
        state["env"].stop()
        logging.getLogger("laggard").setLevel(logging.NOTSET)

    return set_up, tear_down
