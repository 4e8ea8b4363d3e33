"""The OcrService controller: one inference service's children, rollout, quality gate and status.

Each reconcile (reconcile.py) reads one snapshot of the children and pods from the runtime's
cache (snapshot.py), renders what the spec wants (render/), decides the rollout with its quality
gate (rollout/, gate/: pure), plans and applies the children through the runtime's one apply, and
writes the status (status.py) with the Events of its transitions.
"""
