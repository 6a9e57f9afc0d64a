"""The service's Prometheus metrics: conventional names and units, one registry per process.

Counters end in ``_total``, durations are histograms in seconds, timestamps are gauges in Unix
seconds. The learn loop runs in its own process (:mod:`oahu.service.learning`), so its
metrics (``LearningMetrics``: the stream, the model, checkpoints) live there; the serving process
keeps ``ServiceMetrics`` (queries, snapshots) and re-exposes the learner's latest collected
families, forwarded with its status reports, on the same ``/metrics``. deploy/grafana-dashboard.json
charts all of them.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.metrics_core import Metric

from oahu.capabilities import Diagnostic
from oahu.connectors.dead_letter import DEAD_LETTER_REASONS
from oahu.learner import SKIP_DEGENERATE, SKIP_NON_FINITE, Learner

_FAST = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25)
_SLOW = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
CHECKPOINT_TIME = "oahu_checkpoint_timestamp_seconds"


class LearningMetrics:
    """Metrics of the learn loop (stream, model, checkpoints) in their own registry.

    Model-derived values (updates, utilisation, α and the diagnostics the learner declares,
    ``oahu_<name>``) are gauges set from the learner after each run of updates.

    Every labelled series whose labels are known in advance (dead letters and skips by reason,
    α and per-depth diagnostics by depth) exists from the start at zero, as Prometheus
    conventions expect: a rate or an alert over a series that appears only with its first event
    misses that event.

    >>> m = LearningMetrics(dead_letter_reasons=("undecodable", "non_finite"))
    >>> m.consumed.inc(3)
    >>> m.dead_letters.labels(reason="non_finite").inc()
    >>> samples = [s for family in m.families() for s in family.samples]
    >>> value = {(s.name, s.labels.get("reason")): s.value for s in samples}
    >>> value["oahu_constraints_consumed_total", None]
    3.0
    >>> letters = "oahu_dead_letters_total"
    >>> value[letters, "non_finite"], value[letters, "undecodable"]  # the second: no letter yet
    (1.0, 0.0)
    """

    def __init__(
        self,
        diagnostics: Sequence[Diagnostic] = (),
        dead_letter_reasons: Sequence[str] = (),
        n_depths: int = 0,
        drift_signals: Sequence[str] = (),
    ) -> None:
        r = self.registry = CollectorRegistry()
        # ---- the stream
        self.consumed = Counter(
            "oahu_constraints_consumed", "Records read from the source, good or bad.", registry=r
        )
        self.learned = Counter(
            "oahu_constraints_learned",
            "Valid constraints the learner processed (consumed minus dead letters and skips).",
            registry=r,
        )
        self.used = Counter(
            "oahu_constraints_used", "Constraints that changed the model.", registry=r
        )
        self.skipped = Counter(
            "oahu_constraints_skipped",
            "Decoded constraints the learner refused (non-finite, degenerate), by reason.",
            ["reason"],
            registry=r,
        )
        self.dead_letters = Counter(
            "oahu_dead_letters",
            "Messages sent to the dead-letter sink, by reason.",
            ["reason"],
            registry=r,
        )
        self.lag = Gauge(
            "oahu_consumer_lag",
            "Records left in the source, per partition.",
            ["partition"],
            registry=r,
        )
        self.source_ready = Gauge(
            "oahu_source_ready", "1 while the source is connected and delivering.", registry=r
        )
        # ---- the model
        self.updates = Gauge("oahu_model_updates", "Parameter steps taken so far.", registry=r)
        self.utilization = Gauge(
            "oahu_constraint_utilization",
            "Fraction of valid constraints that changed the model (U, Table 3).",
            registry=r,
        )
        self.alpha = Gauge(
            "oahu_hedge_weight", "Hedge weight α of each depth (Eq. 20).", ["depth"], registry=r
        )
        self.drift_detected = Counter(
            "oahu_drift_detected",
            "Concept drifts detected: rises of the prequential mistake rate, by signal (the "
            "combined metric, whose drifts the learner adapts to, or one depth).",
            ["signal"],
            registry=r,
        )
        self._drift_counted: dict[str, int] = {}
        self.diagnostics = {
            d.name: Gauge(f"oahu_{d.name}", d.help, ["depth"] if d.per_depth else [], registry=r)
            for d in diagnostics
        }
        self.update_seconds = Histogram(
            "oahu_update_duration_seconds",
            "Time to apply one constraint to the model (a run's time over its length).",
            buckets=_FAST,
            registry=r,
        )
        # ---- checkpoints
        self.checkpoint_seconds = Histogram(
            "oahu_checkpoint_duration_seconds",
            "Time to write a checkpoint and commit its offsets.",
            buckets=_SLOW,
            registry=r,
        )
        self.checkpoint_time = Gauge(
            CHECKPOINT_TIME,
            "When the last checkpoint was written.",
            registry=r,
        )
        self.checkpoint_fallbacks = Counter(
            "oahu_checkpoint_fallbacks",
            "Starts from an earlier checkpoint than the latest, which was corrupt or missing.",
            registry=r,
        )
        for reason in dead_letter_reasons:
            self.dead_letters.labels(reason=reason)
        for reason in (SKIP_NON_FINITE, SKIP_DEGENERATE):
            self.skipped.labels(reason=reason)
        for signal in drift_signals:
            self.drift_detected.labels(signal=signal)
        for depth in range(n_depths):
            self.alpha.labels(depth=str(depth))
            for d in diagnostics:
                if d.per_depth:
                    self.diagnostics[d.name].labels(depth=str(depth))

    @classmethod
    def of(cls, learner: Learner) -> LearningMetrics:
        """The metrics of a learn loop over ``learner``, its labelled series all present."""
        signals = learner.drift.signals if learner.drift is not None else ()
        return cls(learner.capabilities.diagnostics, DEAD_LETTER_REASONS, learner.n_depths, signals)

    def restore(self, learner: Learner, progress: Any, fell_back: bool = False) -> None:
        """Continue the counters from a checkpoint's learner and stream ``progress``, so totals
        describe the whole model; ``fell_back``: it is an earlier checkpoint than the latest."""
        if fell_back:
            self.checkpoint_fallbacks.inc()
        self.consumed.inc(progress.consumed)
        for reason, count in progress.dead_letters.items():
            self.dead_letters.labels(reason=reason).inc(count)
        self.learned.inc(learner.constraints_learned)
        self.used.inc(learner.constraints_used)
        for reason, count in learner.skipped.items():
            self.skipped.labels(reason=reason).inc(count)
        if progress.written_at:
            self.checkpoint_time.set(progress.written_at)
        self._count_drifts(learner)

    def _count_drifts(self, learner: Learner) -> None:
        # A counter only rises: a rewind to a checkpoint (docs/delivery.md) lowers the learner's
        # counts, and the drifts it then detects again are not counted twice.
        if learner.drift is None:
            return
        for signal, count in learner.drift.counts.items():
            counted = self._drift_counted.get(signal, 0)
            if count > counted:
                self.drift_detected.labels(signal=signal).inc(count - counted)
                self._drift_counted[signal] = count

    def set_model(self, learner: Learner, diagnostics: dict[str, Any] | None = None) -> None:
        """Set the model's gauges (updates, U, α, the declared diagnostics) from ``learner``."""
        self.updates.set(learner.updates)
        self.utilization.set(learner.utilization)
        for depth, a in enumerate(learner.alpha.tolist()):
            self.alpha.labels(depth=str(depth)).set(a)
        self._count_drifts(learner)
        self.set_diagnostics(learner.diagnostics() if diagnostics is None else diagnostics)

    def set_diagnostics(self, values: dict[str, Any]) -> None:
        """Set the diagnostics' gauges from ``Learner.diagnostics()``."""
        for name, gauge in self.diagnostics.items():
            value = values[name]
            if isinstance(value, list):
                for depth, v in enumerate(value):
                    gauge.labels(depth=str(depth)).set(v)
            else:
                gauge.set(value)

    def families(self) -> list[Metric]:
        """Every metric's current samples (picklable: they travel to the serving process)."""
        return list(self.registry.collect())


class _Forwarded:
    """A collector yielding the families last forwarded from the learner process."""

    def __init__(self) -> None:
        self.families: list[Metric] = []

    def collect(self) -> Iterator[Metric]:
        return iter(self.families)


class ServiceMetrics:
    """Metrics of the serving process, plus the learner process's forwarded families.

    >>> from oahu.service.metrics import LearningMetrics
    >>> learning, m = LearningMetrics(), ServiceMetrics()
    >>> learning.consumed.inc(3)
    >>> m.gallery_items.set(10)
    >>> m.forward(learning.families())
    >>> text = m.render().decode()
    >>> "oahu_constraints_consumed_total 3.0" in text, "oahu_gallery_items 10.0" in text
    (True, True)

    ``suggest_strategies`` are the strategies ``POST /v1/suggest`` offers: their series exist
    from the start.
    """

    def __init__(self, suggest_strategies: Sequence[str] = ()) -> None:
        r = self.registry = CollectorRegistry()
        self._forwarded = _Forwarded()
        r.register(self._forwarded)
        self._checkpoint_written = 0.0
        self.checkpoint_age = Gauge(
            "oahu_checkpoint_age_seconds", "Seconds since the last checkpoint.", registry=r
        )
        self.checkpoint_age.set_function(self._checkpoint_age)
        # ---- serving
        self.gallery_items = Gauge(
            "oahu_gallery_items", "Items in the published gallery index.", registry=r
        )
        self.store_items = Gauge("oahu_item_store_items", "Items in the item store.", registry=r)
        self.reindex_time = Gauge(
            "oahu_gallery_reindex_timestamp_seconds",
            "When the published snapshot (model + gallery index) was last rebuilt.",
            registry=r,
        )
        self.reindex_seconds = Histogram(
            "oahu_gallery_reindex_duration_seconds",
            "Time to clone the model and re-embed and index the gallery.",
            buckets=_SLOW,
            registry=r,
        )
        self.snapshot_updates = Gauge(
            "oahu_snapshot_model_updates",
            "Model updates in the snapshot queries read.",
            registry=r,
        )
        self.request_seconds = Histogram(
            "oahu_http_request_duration_seconds",
            "HTTP request latency by endpoint, method and status.",
            ["endpoint", "method", "status"],
            buckets=_SLOW,
            registry=r,
        )
        self.ready = Gauge("oahu_ready", "1 while /readyz answers 200.", registry=r)
        self.gc_pause_seconds = Histogram(
            "oahu_gc_pause_seconds",
            "Garbage collections of the serving process by generation; every query waits for "
            "one (it holds the GIL).",
            ["generation"],
            buckets=_FAST,
            registry=r,
        )
        for generation in range(3):  # every series from the start
            self.gc_pause_seconds.labels(generation=str(generation))
        # oahu.service.serving.stalls
        self.event_loop_lag = Histogram(
            "oahu_event_loop_lag_seconds",
            "How late the HTTP event loop ran a callback due every 10 ms: time it spent on "
            "something else, or could not run.",
            buckets=_SLOW,
            registry=r,
        )
        self.serving_pause = Histogram(
            "oahu_serving_pause_seconds",
            "How late a watchdog thread woke (every 10 ms): time no thread of the serving "
            "process could run Python (a garbage collection, the GIL held by a long C call, no "
            "CPU for the process).",
            buckets=_SLOW,
            registry=r,
        )
        self.serving_stalls = Counter(
            "oahu_serving_stalls",
            "Stalls of 100 ms or more: the HTTP event loop ('http') or the query worker "
            "('queries') stuck, or the whole serving process ('process'); each is logged, with "
            "the stuck thread's stack.",
            ["thread"],
            registry=r,
        )
        for thread in ("http", "queries", "process"):
            self.serving_stalls.labels(thread=thread)
        # ---- active learning (POST /v1/suggest)
        self.suggestions = Counter(
            "oahu_suggestions",
            "Questions (triplets to label) served by POST /v1/suggest, by strategy.",
            ["strategy"],
            registry=r,
        )
        self.suggest_seconds = Histogram(
            "oahu_suggest_duration_seconds",
            "Time from a POST /v1/suggest request's arrival to its answer (waiting for the "
            "suggestion worker, resolving and embedding the pool, choosing the questions), by "
            "strategy.",
            ["strategy"],
            buckets=_SLOW,
            registry=r,
        )
        self.suggestions_published = Counter(
            "oahu_suggestions_published",
            "Questions acknowledged by the Kafka topic of --suggest-topic.",
            registry=r,
        )
        self.suggestion_publish_failures = Counter(
            "oahu_suggestion_publish_failures",
            "Questions that could not be published to the topic of --suggest-topic (logged; the "
            "HTTP answer had them).",
            registry=r,
        )
        for strategy in suggest_strategies:
            self.suggestions.labels(strategy=strategy)
            self.suggest_seconds.labels(strategy=strategy)
        # ---- the console's annotation page (POST /v1/console/answers)
        self.console_answers = Counter(
            "oahu_console_answers",
            "Answers to the console's questions, by annotator and choice (first or second: "
            "stored for the learner; skip: not); repeated answers are not counted.",
            ["annotator", "choice"],
            registry=r,
        )
        # What an operator alerts on when consumption stalls: both grow while it does.
        self.learner_report_age = Gauge(
            "oahu_learner_report_age_seconds",
            "Seconds since the learner process last reported (at least once a second while it "
            "runs).",
            registry=r,
        )
        self.source_contact_age = Gauge(
            "oahu_source_contact_age_seconds",
            "Seconds since the source last heard from its broker (a Kafka group coordinator's "
            "answer to a heartbeat; 0 for files).",
            registry=r,
        )

        # oahu.service.serving.supervisor: queries outlive the learner process
        self.learner_running = Gauge(
            "oahu_learner_running",
            "1 while a learner process runs; 0 while a failed one waits to be restarted.",
            registry=r,
        )
        self.learner_restarts = Counter(
            "oahu_learner_restarts",
            "Learner processes started again after one failed (serving went on meanwhile).",
            registry=r,
        )
        self.learner_crash_loop = Gauge(
            "oahu_learner_crash_loop",
            "1 while the learner process keeps failing soon after each restart (a crash loop).",
            registry=r,
        )

        # oahu.service.serving.model_publishing (--publish-model) and model_following (replicas)
        self.model_publications = Counter(
            "oahu_model_publications",
            "Snapshots acknowledged by the model topic of --publish-model.",
            registry=r,
        )
        self.model_publish_failures = Counter(
            "oahu_model_publish_failures",
            "Snapshots or item overlays the model topic could not take (retried or superseded).",
            registry=r,
        )
        self.replica_model_lag = Gauge(
            "oahu_replica_model_lag_seconds",
            "A replica (oahu serve): seconds since the newest snapshot on the model topic was "
            "read, while it is not served yet (0 when it is).",
            registry=r,
        )

    def forward(self, families: list[Metric]) -> None:
        """Expose ``families`` (from ``LearningMetrics.families``) until the next forward."""
        self._forwarded.families = families
        for family in families:
            if family.name == CHECKPOINT_TIME:
                self._checkpoint_written = family.samples[0].value

    def _checkpoint_age(self) -> float:
        written = self._checkpoint_written  # 0 until the first checkpoint
        return time.time() - written if written else 0.0

    def render(self) -> bytes:
        """The text exposition format of every metric."""
        return generate_latest(self.registry)
