"""Finishes its work, closes its session, then hangs on the way out (as torch's gloo teardown
sometimes does)."""

import threading

import trainguard.train

session = trainguard.train.Session()
state = {"progress": {"done": 0}}
start = session.restore(state)
for step in range(start, 3):
    with session.step(step):
        pass
    session.checkpoint(state, step=step + 1)
session.close()
threading.Event().wait()  # never returns
