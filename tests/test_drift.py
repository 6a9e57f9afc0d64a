"""Concept drift: river's detectors on the prequential mistakes (oahu.drift), what OAHU does on a
detection, the baselines that report drifts, checkpoints that neither forget nor repeat a
detection, and the service's counter."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oahu import drift
from oahu.drift import COMBINED, CONFIRM, DETECTORS, MIN_RISE, DriftMonitor
from oahu.learners.baselines.oasis import OASIS
from oahu.learners.baselines.opml import OPML
from oahu.learners.oahu.learner import OAHU
from oahu.persistence import learner_from_bytes, learner_to_bytes
from oahu.registry import LEARNER_NAMES, learner_class, make_learner
from oahu.service.metrics import LearningMetrics
from oahu.streams.datasets import load_digits
from oahu.streams.protocol import split_dev_test, triplet_stream


def bernoulli(rates_and_lengths: list[tuple[float, int]], seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.concatenate([rng.random(n) < rate for rate, n in rates_and_lengths])


# ------------------------------------------------------------------------------- the monitor
@pytest.mark.parametrize("detector", DETECTORS)
def test_a_jump_of_the_mistake_rate_is_detected_soon_after_it(detector):
    mistakes = bernoulli([(0.05, 3000), (0.5, 1000)])
    events = DriftMonitor(detector, [COMBINED]).update(mistakes[:, None])
    first = [e for e in events if e.constraint >= 3000]
    assert first, f"{detector} missed a jump from 5% to 50% mistakes"
    assert 3000 <= first[0].suspected_at < 3300
    assert first[0].constraint == first[0].suspected_at + CONFIRM  # confirmed CONFIRM later
    assert first[0].mistakes_after - first[0].mistakes_before >= MIN_RISE


@pytest.mark.parametrize("detector", DETECTORS)
def test_a_burst_of_mistakes_that_passes_is_not_a_drift(detector):
    # 60 constraints at 60% mistakes, then back to 5%: the detector fires within the burst,
    # and the CONFIRM constraints after that do not confirm it.
    mistakes = bernoulli([(0.05, 3000), (0.6, 60), (0.05, 3000)])
    assert DriftMonitor(detector, [COMBINED]).update(mistakes[:, None]) == []
    fired = DriftMonitor(detector, [COMBINED], min_rise=0.0).update(mistakes[:, None])
    # Page-Hinkley's cumulative sum does not even fire on so short a burst.
    expected = [] if detector == "page-hinkley" else [True]
    assert [3000 <= e.suspected_at < 3060 for e in fired] == expected


def test_a_burst_within_one_update_is_confirmed_only_by_the_updates_after_it():
    """A micro-batch's constraints are all ranked by the model before it: a burst of hard ones
    there (1,024 at 60% mistakes) is judged by how the model ranks what comes after it learned
    them, not by the rest of the burst."""
    before, burst = bernoulli([(0.05, 3000)]), bernoulli([(0.6, 1024)], 1)

    def events(ranked_together: bool, after_rate: float) -> list[int]:
        monitor = DriftMonitor("adwin", [COMBINED])
        monitor.update(before[:, None])
        found = monitor.update(burst[:, None], [len(burst)] if ranked_together else None)
        for outcome in bernoulli([(after_rate, 2048)], 2):  # strict updates after it
            found += monitor.update([[outcome]])
        return [e.constraint for e in found]

    assert events(ranked_together=True, after_rate=0.05) == []  # learned: a burst, no drift
    assert len(events(ranked_together=False, after_rate=0.05)) == 1  # as strict outcomes
    confirmed = events(ranked_together=True, after_rate=0.6)  # the rise stays: a drift
    assert len(confirmed) == 1 and 4024 <= confirmed[0] < 4024 + CONFIRM + drift.FEED


def test_a_burst_across_the_detecting_update_and_the_next_is_not_a_drift():
    """Updates of 256: a burst of 400 hard constraints begins late in one update (where the
    detector fires) and fills most of the next, whose model has taken one step on the burst.
    That update is left out of the confirmation; the updates after it, whose models learned the
    burst, judge it. A rise that stays is still confirmed, one update later."""

    def events(after_rate: float) -> list[drift.DriftEvent]:
        rates = np.array([0.03] * 3184 + [0.55] * 400 + [after_rate] * 2560)
        outcomes = np.random.default_rng(3).random(len(rates)) < rates  # same draws each call
        monitor = DriftMonitor("adwin", [COMBINED])
        found = []
        for start in range(0, len(outcomes), 256):
            found += monitor.update(outcomes[start : start + 256, None], [256])
        return found

    assert events(after_rate=0.03) == []  # counted from 3,328 it would be 36% mistakes
    (confirmed,) = events(after_rate=0.5)
    assert 3184 <= confirmed.suspected_at < 3328  # in the update where the burst begins
    assert confirmed.constraint == 3584 + CONFIRM - 1  # counted from the update after next


def test_a_monitor_restored_while_it_waits_to_confirm_confirms_as_if_it_never_stopped():
    """Saved after the update in which the detector fired (updates of 256), before the update it
    leaves out: restored, it leaves out the same update and confirms at the same constraint."""
    rates = np.array([0.03] * 3184 + [0.55] * 400 + [0.5] * 2560)
    outcomes = np.random.default_rng(3).random(len(rates)) < rates
    updates = [outcomes[start : start + 256, None] for start in range(0, len(outcomes), 256)]
    whole, first = DriftMonitor("adwin", [COMBINED]), DriftMonitor("adwin", [COMBINED])
    expected = [e for update in updates for e in whole.update(update, [256])]
    for update in updates[:13]:  # through 3,328: the burst's first update
        assert first.update(update, [256]) == []
    restored = DriftMonitor("adwin", [COMBINED])
    restored.set_state(first.get_state())
    found = [e for update in updates[13:] for e in restored.update(update, [256])]
    assert found == expected and [e.constraint for e in found] == [3584 + CONFIRM - 1]


@pytest.mark.parametrize("sizes", [[1] * 64, [16] * 4, [256] * 4])
def test_a_block_of_updates_detects_as_its_updates_given_one_at_a_time(sizes):
    """A device-resident engine reports a block of updates at once: given each update's size,
    the monitor detects and confirms at the same constraints as when each update comes alone."""
    rates = np.array([0.03] * 3072 + [0.6] * 2048)  # whole blocks of every size
    outcomes = np.random.default_rng(4).random(len(rates)) < rates
    alone, blocks = DriftMonitor("adwin", [COMBINED]), DriftMonitor("adwin", [COMBINED])
    block = sum(sizes)
    found_alone, found_blocks = [], []
    for start in range(0, len(outcomes), block):
        part = outcomes[start : start + block, None]
        found_blocks += blocks.update(part, sizes)
        for offset in np.cumsum([0, *sizes[:-1]]):
            found_alone += alone.update(part[offset : offset + sizes[0]], [sizes[0]])
    assert found_blocks == found_alone and len(found_alone) == 1
    assert 3072 <= found_alone[0].suspected_at < 3392


def test_update_sizes_must_cover_the_outcomes():
    with pytest.raises(ValueError, match=r"update_sizes: expected positive sizes summing to 3"):
        DriftMonitor("adwin", [COMBINED]).update(np.zeros((3, 1), bool), [2, 2])
    with pytest.raises(ValueError, match=r"got \[3, 0\]"):
        DriftMonitor("adwin", [COMBINED]).update(np.zeros((3, 1), bool), [3, 0])


def ramp(seed: int) -> np.ndarray:
    """5% mistakes, rising linearly to 35% over 4,000 constraints (a gradual drift), then 35%."""
    rate = np.concatenate([np.full(3000, 0.05), np.linspace(0.05, 0.35, 4000), np.full(1000, 0.35)])
    return np.random.default_rng(seed).random(len(rate)) < rate


@pytest.mark.parametrize("seed", range(4))
def test_a_gradual_rise_is_a_drift(seed):
    events = DriftMonitor("adwin", [COMBINED]).update(ramp(seed)[:, None])
    assert len(events) == 1 and 3000 < events[0].suspected_at < 7000


def test_an_unconfirmed_detection_leaves_its_level_as_the_reference(monkeypatch):
    # On this ramp the detector fires at small steps of the rise; measured each against the
    # previous step's level, none is a rise of MIN_RISE.
    monkeypatch.setattr(drift, "CARRY", 0)
    assert DriftMonitor("adwin", [COMBINED]).update(ramp(2)[:, None]) == []


def test_a_drift_is_confirmed_by_a_rise_of_at_least_min_rise():
    mistakes = bernoulli([(0.05, 3000), (0.12, 3000)])  # 7 points: significant, but small
    assert DriftMonitor("adwin", [COMBINED]).update(mistakes[:, None]) == []
    low = DriftMonitor("adwin", [COMBINED], min_rise=0.02).update(mistakes[:, None])
    assert low and low[0].constraint >= 3000


@pytest.mark.parametrize("seed", range(3))
def test_a_model_getting_better_is_not_a_drift(seed):
    # A learning curve: the mistake rate falls from 34% to 4%. ADWIN sees the change (its
    # window shrinks), and the monitor does not report a fall as a drift.
    t = np.arange(50_000)
    rng = np.random.default_rng(seed)
    mistakes = rng.random(len(t)) < 0.3 * np.exp(-t / 5000) + 0.04
    monitor = DriftMonitor("adwin", [COMBINED])
    assert monitor.update(mistakes[:, None]) == []
    assert monitor.counts == {COMBINED: 0}


def test_each_signal_has_its_own_detector():
    calm, jump = bernoulli([(0.05, 4000)], seed=1), bernoulli([(0.05, 2000), (0.6, 2000)])
    monitor = DriftMonitor("adwin", [COMBINED, "depth:0", "depth:1"])
    events = monitor.update(np.stack([calm, calm, jump], axis=1))
    assert {e.signal for e in events} == {"depth:1"}
    assert monitor.counts == {COMBINED: 0, "depth:0": 0, "depth:1": len(events)}
    assert 2000 <= events[0].suspected_at < 2300


@pytest.mark.parametrize("feed", [1, 7, 16, 1000])
def test_feeding_in_blocks_finds_the_same_drifts_at_the_same_constraints(feed):
    mistakes = np.stack(
        [bernoulli([(0.05, 3000), (0.5, 1500)]), bernoulli([(0.05, 2000), (0.6, 2500)], 1)], 1
    )
    signals = [COMBINED, "depth:0"]
    one_by_one = DriftMonitor("adwin", signals, feed=1)
    for row in mistakes:
        one_by_one.update(row[None])
    blocks = DriftMonitor("adwin", signals, feed=feed)
    taken = [blocks.update(mistakes[i : i + 5].tolist()) for i in range(0, len(mistakes), 5)]
    fed = len(mistakes) // feed * feed
    assert one_by_one.events and one_by_one.seen == blocks.seen == len(mistakes)
    # the drifts of the outcomes fed so far, in order, each reported once
    assert [e for block in taken for e in block] == blocks.events
    assert blocks.events == [e for e in one_by_one.events if e.constraint < fed]


def test_outcomes_of_the_wrong_shape_are_refused_with_the_field_named():
    monitor = DriftMonitor("adwin", [COMBINED, "depth:0"])
    with pytest.raises(ValueError, match=r"mistakes: expected shape \(n, 2\), got \(3,\)"):
        monitor.update(np.zeros(3, dtype=bool))
    with pytest.raises(ValueError, match=r"mistakes: expected rows of 2 outcomes, got lengths"):
        monitor.update([[True, False], [True]])
    with pytest.raises(ValueError, match="feed: must be an integer >= 1, got 0"):
        DriftMonitor("adwin", [COMBINED], feed=0)


def test_kept_outcomes_are_bounded():
    monitor = DriftMonitor("adwin", [COMBINED], history=100)
    monitor.update(bernoulli([(0.05, 1234)])[:, None])
    kept = len(monitor.get_state()["watches"][COMBINED]["outcomes"])
    assert 50 <= kept < 100


@settings(max_examples=25, deadline=None)
@given(
    split=st.integers(0, 5000),
    detector=st.sampled_from(DETECTORS[:2]),
    history=st.sampled_from([64, 8192]),
)
def test_a_restored_monitor_detects_exactly_what_an_uninterrupted_one_does(
    split, detector, history
):
    mistakes = np.stack(
        [bernoulli([(0.05, 2000), (0.4, 1500), (0.1, 1500)]), bernoulli([(0.1, 5000)], 3)], 1
    )
    signals = [COMBINED, "depth:0"]
    whole = DriftMonitor(detector, signals, history)
    whole.update(mistakes)
    first = DriftMonitor(detector, signals, history)
    first.update(mistakes[:split])
    resumed = DriftMonitor(detector, signals, history)
    resumed.set_state(first.get_state())
    resumed.update(mistakes[split:])
    assert resumed.events == whole.events
    assert resumed.counts == whole.counts and resumed.seen == whole.seen == 5000


def test_bad_names_and_shapes_are_refused():
    with pytest.raises(ValueError, match="drift_detector: unknown 'adwn'"):
        DriftMonitor("adwn", [COMBINED])
    with pytest.raises(ValueError, match="signals: the first must be 'combined'"):
        DriftMonitor("adwin", ["depth:0"])
    with pytest.raises(ValueError, match=r"mistakes: expected shape \(n, 2\)"):
        DriftMonitor("adwin", [COMBINED, "depth:0"]).update(np.zeros((3, 1), bool))
    with pytest.raises(ValueError, match="drift_detector: must be one of"):
        OAHU(4, drift_detector="adwn")
    with pytest.raises(ValueError, match="drift_adaptation: 'lr' is not alpha, step, memory"):
        OAHU(4, drift_adaptation="alpha+lr")
    with pytest.raises(ValueError, match="confirm, min_rise: need confirm >= 1"):
        DriftMonitor("adwin", [COMBINED], min_rise=2.0)
    with pytest.raises(ValueError, match="drift_detector: unknown 'x'"):
        OASIS(4, drift_detector="x")


def test_learners_declare_drift_detection_with_its_parameter():
    for name in LEARNER_NAMES:
        cls = learner_class(name)
        has_param = "drift_detector" in cls.param_names()
        assert cls.capabilities.detects_drift == has_param, name
        learner = make_learner(name, n_features=4)
        assert (learner.drift is not None) == cls.capabilities.detects_drift, name
    assert {n for n in LEARNER_NAMES if learner_class(n).capabilities.detects_drift} >= {
        "oahu",
        "oasis",
        "opml",
    }
    assert make_learner("oahu", n_features=4, drift_detector="none").drift is None
    assert make_learner("oahu", n_features=4, preset="paper").drift is None  # Algorithm 1


# ------------------------------------------------------------------------------- OAHU
DIGITS = load_digits()
DEV, _ = split_dev_test(DIGITS.n_items, seed=0)
BEFORE = triplet_stream(DIGITS.y, DEV, 1500, seed=0)
# The new concept contradicts the old one: each triplet's positive and negative swap roles.
AFTER = triplet_stream(DIGITS.y, DEV, 700, seed=1)[:, [0, 2, 1]]


def learn_stream(model, triplets: np.ndarray) -> None:
    x = DIGITS.X[triplets]
    model.learn_triplets(x[:, 0], x[:, 1], x[:, 2])


def digits_oahu(**params) -> OAHU:
    model = OAHU(64, hidden_width=32, preprocess="pca:32", device="cpu", **params)
    model.prepare(DIGITS.X[DEV])
    return model


def test_oahu_detects_a_contradicting_concept_and_adapts_at_that_constraint():
    model = digits_oahu()
    learn_stream(model, BEFORE)
    assert [e for e in model.drift_events if e.signal == COMBINED] == []
    alpha_before = model.alpha
    uniform = 1.0 / model.n_depths
    assert not np.allclose(alpha_before, uniform)  # the hedge has chosen: the reset is visible
    learned_before = model.update_step.learned
    learn_stream(model, AFTER[:500])
    combined = [e for e in model.drift_events if e.signal == COMBINED]
    assert len(combined) == 1
    at = combined[0].constraint
    # Every new triplet is ranked wrongly: the rise is plain at once, and confirmed 200 later.
    assert 1500 <= combined[0].suspected_at < 1600 and at == combined[0].suspected_at + CONFIRM
    assert combined[0].mistakes_after > 0.5 > 0.1 > combined[0].mistakes_before
    # "step": the decay restarted at the constraint after the detection, with a step raised
    # 5-fold at first and back to the decay's over 2,000 constraints (Eq. D2).
    step = model.update_step
    assert step.decay_origin == at + 1 and step.decay_origin > learned_before
    since = step.learned - step.decay_origin
    decayed = model.config.learning_rate / np.sqrt(1 + since / 10_000)
    assert model.update_step.step_size() == pytest.approx(decayed * (1 + 4 * (1 - since / 2000)))
    assert np.allclose(model.alpha, uniform, atol=0.05)  # "alpha": the hedge starts again
    # "memory": what was replayed and mined is only what came after the detection.
    assert step.replay.seen == step.learned - step.decay_origin
    assert model.summary()["drift_detected"][COMBINED] == 1
    assert model.summary()["drift_events"][0]["constraint"] == at


def test_a_linear_oahu_watches_its_one_depth_as_the_combined_metric():
    model = digits_oahu(n_hidden_layers=0)  # one depth: no per-depth signal beside it
    assert model.drift.signals == (COMBINED,)
    learn_stream(model, BEFORE)
    learn_stream(model, AFTER[:500])
    assert [e.signal for e in model.drift_events] == [COMBINED]
    assert 1500 <= model.drift_events[0].suspected_at < 1700


def test_without_adaptation_oahu_only_reports():
    adapting, reporting = digits_oahu(), digits_oahu(drift_adaptation="none")
    for model in (adapting, reporting):
        learn_stream(model, BEFORE)
        learn_stream(model, AFTER[:500])
    assert [e.constraint for e in adapting.drift_events] == [
        e.constraint for e in reporting.drift_events
    ][: len(adapting.drift_events)]
    assert reporting.update_step.decay_origin == 0
    assert reporting.update_step.replay.seen == reporting.update_step.learned  # nothing was emptied


def test_a_checkpoint_neither_forgets_nor_repeats_a_detection():
    whole = digits_oahu()
    learn_stream(whole, BEFORE)
    learn_stream(whole, AFTER)
    part = digits_oahu()
    learn_stream(part, BEFORE)
    learn_stream(part, AFTER[:150])  # detected, not confirmed yet
    half = learner_from_bytes(learner_to_bytes(part))[0]
    learn_stream(half, AFTER[150:450])  # confirmed
    part = half
    resumed, _ = learner_from_bytes(learner_to_bytes(part))
    learn_stream(resumed, AFTER[450:])
    assert resumed.drift_events == whole.drift_events
    assert resumed.drift.counts == whole.drift.counts
    assert np.array_equal(resumed.embed(DIGITS.X[:50]), whole.embed(DIGITS.X[:50]))


# ------------------------------------------------------------------------------- baselines
@pytest.mark.parametrize("cls", [OASIS, OPML])
def test_baselines_report_a_contradicting_concept(cls):
    model = cls(64)
    model.prepare(DIGITS.X[DEV])
    learn_stream(model, BEFORE)
    assert [e.constraint for e in model.drift_events if e.constraint < 1500] == []
    learn_stream(model, AFTER)
    detected = [e.constraint for e in model.drift_events]
    assert detected and 1500 <= detected[0] < 2000


# ------------------------------------------------------------------------------- service
def test_the_service_counts_drifts_by_signal_and_never_counts_down():
    model = digits_oahu()
    metrics = LearningMetrics.of(model)

    def counted() -> dict[str, float]:
        samples = [s for f in metrics.families() for s in f.samples]
        return {
            s.labels["signal"]: s.value for s in samples if s.name == "oahu_drift_detected_total"
        }

    assert counted() == {COMBINED: 0.0, **{f"depth:{depth}": 0.0 for depth in range(3)}}
    learn_stream(model, BEFORE)
    snapshot = learner_to_bytes(model)
    learn_stream(model, AFTER[:500])
    metrics.set_model(model)
    after = counted()
    assert after[COMBINED] == 1.0
    # A rewind to a checkpoint before the drift, then the same drift again: counted once.
    model, _ = learner_from_bytes(snapshot)
    metrics.set_model(model)
    learn_stream(model, AFTER[:500])
    metrics.set_model(model)
    assert counted() == after
