"""Drift is logged by path and name, never with an env value (literal env values are often secrets)."""

from __future__ import annotations

import asyncio
import copy
import logging
import time

from ocr_operator import wiring
from ocr_operator.runtime import drift as D

from .helpers import ClusterKube, owner

SECRET, OTHER = "hf_live_SECRET_token_value", "hf_someone_elses_SECRET"


def test_a_drifted_env_value_is_logged_by_name_with_its_values_redacted(caplog):
    body = owner({"replicas": 1, "env": [{"name": "HF_TOKEN", "value": SECRET}]})
    body["metadata"]["resourceVersion"] = "1"
    key = ("team-a", "ocr")

    async def go():
        kube = ClusterKube()
        runtime, c, _ = wiring.build(kube)
        runtime.discovery.checked = time.monotonic()  # no discovery requests
        c.cache[key] = body
        await c._run(key)  # creates the children
        dep = copy.deepcopy(c.store.get(("Deployment", "team-a", "ocr")))
        env = dep["spec"]["template"]["spec"]["containers"][0]["env"]
        next(e for e in env if e["name"] == "HF_TOKEN")["value"] = OTHER  # someone edits it
        dep["metadata"]["resourceVersion"] = "edited"
        c.store.apply_event("MODIFIED", dep)
        caplog.clear()
        with caplog.at_level(logging.DEBUG, logger="ocr_operator"):
            await c._run(key)
        c.timers.cancel_all()

    asyncio.new_event_loop().run_until_complete(go())
    assert SECRET not in caplog.text and OTHER not in caplog.text
    drift = [r.getMessage() for r in caplog.records if "drift" in r.getMessage()]
    assert drift and "HF_TOKEN" in drift[0] and D.REDACTED in drift[0], caplog.text


def test_a_drift_diff_of_an_env_value_names_the_variable_but_not_the_values():
    diffs = D.subset_diff({"env": [{"name": "API_TOKEN", "value": "s3cret"}]},
                          {"env": [{"name": "API_TOKEN", "value": "leaked"}]})
    assert diffs == [f".env[name=API_TOKEN].value: {D.REDACTED} != {D.REDACTED}"]


def test_a_drift_diff_outside_env_keeps_its_values():
    assert D.subset_diff({"spec": {"replicas": 2}}, {"spec": {"replicas": 3}}) == [".spec.replicas: 3 != 2"]
