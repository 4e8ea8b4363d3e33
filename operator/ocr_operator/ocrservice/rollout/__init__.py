"""An OcrService's rollout: the revisions' state machine and the quality gate's states, decided
together by one pure ``decide`` (decide.py) from typed inputs.

- model.py: phases, reasons, what is read (PodView, Observed, Policy, RolloutStatus) and the Decision;
- owners.py: which pods are the OcrService's (the owner chain, by uid, never labels alone);
- pods.py: what Kubernetes reports about pods, and the failures it shows;
- machine.py: progressing, healthy, failed, rolled back;
- pages.py, verdict.py, gate.py: the golden pages, the verdict, the gate's phases;
- decide.py: the one decision.
"""

from .decide import Inputs, Outcome, decide
from .model import (FAILED, HEALTHY, NO_GOOD_REVISION, PHASES, PROGRESSING, ROLLED_BACK, ConditionSpec, Decision,
                    EventSpec, Failure, Observed, PodView, Policy, RolloutStatus, parse_time)
from .owners import controlled_pods, replicaset_names
from .pods import pod_view, summarize

__all__ = ["FAILED", "HEALTHY", "NO_GOOD_REVISION", "PHASES", "PROGRESSING", "ROLLED_BACK", "ConditionSpec",
           "Decision", "EventSpec", "Failure", "controlled_pods", "replicaset_names", "Inputs", "Observed", "Outcome", "PodView", "Policy", "RolloutStatus",
           "decide", "parse_time", "pod_view", "summarize"]
