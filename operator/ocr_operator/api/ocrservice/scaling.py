"""spec.autoscaling: the HorizontalPodAutoscaler's metric, bounds, behaviour and schedule windows."""

from __future__ import annotations

import datetime as dt
from typing import Any, Mapping
from zoneinfo import ZoneInfo

from ..fields import Constraints, Quantity, Rule, api, model
from .pods import QUANTITY

DEFAULT_METRIC = "DCGM_FI_DEV_GPU_UTIL"
RATIO_GPU_METRIC = "ocr_gpu_utilization_ratio"  # the server's own GPU gauge, 0..1 (its metrics)
QUEUE_METRIC = "ocr_queue_depth"  # the server's own per-pod queue gauge (its metrics)
DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
HHMM = "^([01][0-9]|2[0-3]):[0-5][0-9]$"


@model
class Metric:
    name: str = api(
        f"Metric name; {DEFAULT_METRIC} (dcgm-exporter, percent), {RATIO_GPU_METRIC} (the server's own, 0..1; "
        "without targetAverageValue the target is targetGPUUtilization as a ratio, e.g. 800m for 80) or "
        f"{QUEUE_METRIC} (the server's own).", min_length=1, max_length=253, default=DEFAULT_METRIC)
    target_average_value: Quantity | None = api(
        "Target average value per pod; default targetGPUUtilization. Set it for metrics that are not percentages "
        "(e.g. queue depth 4).", pattern=QUANTITY)
    selector: tuple[tuple[str, str], ...] = api("Extra label selector (matchLabels) for the metric series.",
                                                max_properties=16)


@model
class ScalingPolicy:
    """One scaling policy (autoscaling/v2 HPAScalingPolicy)."""

    type: str = api("Pods or Percent.", enum=("Pods", "Percent"), required=True)
    value: int = api("Amount of change allowed.", minimum=1, required=True)
    period_seconds: int = api("Window of the policy in seconds.", minimum=1, maximum=1800, required=True)


@model
class ScalingRules:
    stabilization_window_seconds: int | None = api("Seconds of past recommendations considered.", minimum=0,
                                                   maximum=3600)
    select_policy: str | None = api("Which policy wins (Max, Min) or Disabled.", enum=("Max", "Min", "Disabled"))
    policies: tuple[ScalingPolicy, ...] = api("Allowed changes per period.", max_items=8)


@model
class Behavior:
    scale_up: ScalingRules | None = api("Rules for scaling up.")
    scale_down: ScalingRules | None = api("Rules for scaling down.")


def _minutes(hhmm: str) -> int:
    hours, minutes = hhmm.split(":")
    return int(hours) * 60 + int(minutes)


@model
class Schedule:
    """One time window with its minReplicas."""

    __rules__ = (Rule("self.start != self.end", "spec.autoscaling.schedules[].start and end must differ",
                      holds=lambda s: s.start != s.end),)

    name: str = api("Name of the window (shown in status).", min_length=1, max_length=63, required=True)
    days: tuple[str, ...] = api("Days the window applies (default every day).", max_items=7,
                                item=Constraints(enum=DAYS))
    start: str = api("Start time HH:MM (inclusive) in timeZone.", pattern=HHMM, required=True)
    end: str = api("End time HH:MM (exclusive) in timeZone; before start means the window crosses midnight.",
                   pattern=HHMM, required=True)
    time_zone: str = api("IANA time zone, e.g. Europe/Berlin.", max_length=64, default="UTC")
    min_replicas: int = api(
        "minReplicas while the window is open. 0 scales the service to zero (nights, weekends) - the "
        "HorizontalPodAutoscaler is removed and the Deployment set to 0 pods; the first minute after the window "
        "ends restores minReplicas, and new pods take the model load time (cold start) before they serve, so end "
        "the window that long before traffic arrives.", minimum=0, maximum=1000, required=True)

    def is_open(self, now: dt.datetime) -> bool:
        """Whether the window is open at `now` (aware datetime), in the window's time zone."""
        local = now.astimezone(ZoneInfo(self.time_zone))
        minutes = local.hour * 60 + local.minute
        start = _minutes(self.start)
        end = _minutes(self.end)
        day = DAYS[local.weekday()]
        if start < end:
            return (not self.days or day in self.days) and start <= minutes < end
        # Crosses midnight: the part after midnight belongs to the previous day's window.
        if minutes >= start:
            return not self.days or day in self.days
        if minutes < end:
            previous = DAYS[(local.weekday() - 1) % 7]
            return not self.days or previous in self.days
        return False


@model
class Autoscaling:
    __rules__ = (
        Rule("!has(self.minReplicas) || !has(self.maxReplicas) || self.minReplicas <= self.maxReplicas",
             "spec.autoscaling.minReplicas must be <= spec.autoscaling.maxReplicas", ".minReplicas",
             lambda a: a.min_replicas <= a.max_replicas),
        Rule("!has(self.schedules) || !has(self.maxReplicas) || self.schedules.all(s, s.minReplicas <= self.maxReplicas)",
             "spec.autoscaling.schedules[].minReplicas must be <= spec.autoscaling.maxReplicas", ".schedules",
             lambda a: all(s.min_replicas <= a.max_replicas for s in a.schedules)),
        Rule("!has(self.targetQueueDepth) || !has(self.metric) || !has(self.metric.name) || "
             f"self.metric.name != '{QUEUE_METRIC}'",
             f"spec.autoscaling.targetQueueDepth and spec.autoscaling.metric.name {QUEUE_METRIC} name the same metric "
             "twice: keep a GPU metric in spec.autoscaling.metric beside targetQueueDepth, or use "
             "metric.targetAverageValue alone", ".targetQueueDepth",
             lambda a: a.target_queue_depth is None or a.metric.name != QUEUE_METRIC),
    )

    enabled: bool = api("Turn the autoscaler off without deleting its settings (then spec.replicas applies, "
                        "default 1).", default=True)
    min_replicas: int = api("Fewest pods; cold starts load the whole model, so keep at least one.", minimum=1,
                            maximum=1000, default=1)
    max_replicas: int = api("Most pods.", minimum=1, maximum=1000, default=3)
    target_gpu_utilization: int = api("Target average GPU utilisation in percent.", json="targetGPUUtilization",
                                      minimum=1, maximum=100, default=80)
    metric: Metric = api("The Pods metric the autoscaler reads (served by the custom metrics API, e.g. "
                         "prometheus-adapter over dcgm-exporter).", default={})
    # The second signal: average ocr_queue_depth per pod, next to the GPU metric (None: off).
    target_queue_depth: Quantity | None = api(
        f"A second signal: target average queue depth per pod ({QUEUE_METRIC}, the server's requests waiting for an "
        "engine slot plus pages waiting for a batch), e.g. 4. When set, the HorizontalPodAutoscaler reads it next to "
        "spec.autoscaling.metric and follows the larger of the two recommendations: a long queue adds pods while "
        "GPU utilisation reads low, and the service shrinks only when both are low. Needs the metric on "
        "custom.metrics.k8s.io (the chart's files/prometheus-adapter-values.yaml).", pattern=QUANTITY)
    behavior: Mapping[str, Any] | None = api(
        "Scale-up and scale-down behaviour (autoscaling/v2 HorizontalPodAutoscalerBehavior); default scale up by 2 "
        "pods a minute at once, scale down 1 pod per 2 minutes after 5 minutes of low load.", shape=Behavior)
    schedules: tuple[Schedule, ...] = api("Time windows that set a different minReplicas (weekday peaks, nights); "
                                          "the first matching window wins.", max_items=16)

    def target_value(self) -> str:
        """The HPA's averageValue: the metric's own target, else targetGPUUtilization in the
        metric's unit (a percent for DCGM_FI_DEV_GPU_UTIL, a ratio for the server's gauge)."""
        if self.metric.target_average_value:
            return self.metric.target_average_value
        if self.metric.name == RATIO_GPU_METRIC:
            return f"{self.target_gpu_utilization * 10}m"
        return str(self.target_gpu_utilization)

    def effective_min_replicas(self, now: dt.datetime | None) -> tuple[int, str | None]:
        """minReplicas at `now` and the name of the open schedule window (first match wins)."""
        if now is not None:
            for window in self.schedules:
                if window.is_open(now):
                    return min(window.min_replicas, self.max_replicas), window.name
        return self.min_replicas, None
