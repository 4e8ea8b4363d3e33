"""The status conditions both kinds report (a metav1.Condition), as a model for their schemas."""

from __future__ import annotations

from .fields import api, model


@model
class Condition:
    """A metav1.Condition."""

    type: str = api("Condition type.", required=True)
    status: str = api("True, False or Unknown.", enum=("True", "False", "Unknown"), required=True)
    reason: str | None = api("CamelCase reason.")
    message: str | None = api("Human-readable detail.")
    last_transition_time: str | None = api("When status last changed.", format="date-time")
    observed_generation: int | None = api("metadata.generation the condition describes.", format="int64")
