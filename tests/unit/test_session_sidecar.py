"""The pinned session's sidecar copy: a copy that cannot be written is a warning, never a failed pin."""

from __future__ import annotations

import logging
import uuid

from loomtui.store import session
from loomtui.store.db import Store
from loomtui.store.statedir import prepare_state_dir


def test_a_sidecar_that_cannot_be_written_is_warned_of_and_the_store_still_pins(tmp_path, caplog):
    state = tmp_path / "state"
    prepare_state_dir(state)
    (state / session.SIDECAR).mkdir()  # the copy's place taken: its write fails with an OSError
    store = Store.in_dir(state)
    pin = str(uuid.uuid4())
    try:
        with caplog.at_level(logging.WARNING, logger="loomtui.store.session"), store.write() as db:
            session.pin_in(db, pin)
        assert session.pinned(store) == pin
        assert any(r.name == "loomtui.store.session" and "could not write" in r.getMessage() for r in caplog.records)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="loomtui.store.session"):
            session.sync_sidecar(store)
        assert any("could not update" in r.getMessage() for r in caplog.records)
    finally:
        store.close()
