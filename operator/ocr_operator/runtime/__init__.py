"""The controller runtime: what any level-based controller of this operator needs, and no domain.

A watch-fed cache of the objects the controllers own (cache.py), a work queue with per-key timers
and backoff (workqueue.py, timers.py), background jobs per key (jobs.py), Events (events.py),
leader election (leader.py, election.py), discovery of optional APIs (discovery.py), the REST
client (kube.py) and the one apply with its ownership checks (plan.py, apply.py). controller.py
joins them: each controller is a Reconciler (snapshot -> decide -> plan -> apply -> status) that
the runtime feeds, queues, retries and tells about.

Nothing here knows OcrService or OcrBatch (an import-linter contract): who the operator is to the
API server (runtime.identity.Identity) and which kinds it touches (runtime.kinds.ApiKind) are
handed in by the code that wires the controllers together (ocr_operator.handlers). kopf is the
watch source: its event handlers call Runtime.child_event and Controller.owner_event.
"""
