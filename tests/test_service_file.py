"""``oahu run`` on file sources: every learner, dead-letter files, the embedded default."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from service_support import (
    REPO,
    assert_same_model,
    free_port,
    make_stream,
    train_reference,
    wait_until,
)

from oahu.cli.main import main
from oahu.connectors.dead_letter import read_dead_letters
from oahu.connectors.messages import encode_stream
from oahu.drift import CONFIRM
from oahu.learners.oahu.config import OAHUConfig
from oahu.registry import LEARNER_NAMES, make_learner
from oahu.service.checkpoints import checkpoint_path, read_checkpoint
from oahu.service.config import ServiceConfig
from oahu.service.serving.app import Service
from oahu.streams import build_drift_stream
from oahu.streams.stream_file import ConstraintStream


def run_to_end(source: Path, state: Path, **changes: object) -> Service:
    """A service over a whole file (``exit_at_end``), shut down cleanly once it serves the
    final model."""
    service = Service(
        ServiceConfig(
            source=source.as_uri(), checkpoint_dir=str(state), exit_at_end=True, **changes
        )
    )
    service.start()
    assert service.finished.wait(120)
    assert service.learner_error is None
    wait_until(
        lambda: service.publisher.current.updates == service.status["updates"],
        30,
        "the final snapshot",
    )
    service.shutdown()
    return service


@pytest.mark.parametrize("learner", LEARNER_NAMES)
def test_every_learner_runs_as_the_service(learner: str, tmp_path: Path):
    stream_file = make_stream(tmp_path, 150, seed=1)
    service = run_to_end(stream_file, tmp_path / "state", learner=learner, poll_records=40)
    saved, progress = read_checkpoint(checkpoint_path(tmp_path / "state"))
    assert progress.offsets == {0: 150} and progress.consumed == 150
    reference = train_reference(ConstraintStream.load(stream_file), learner)
    assert_same_model(saved, reference)
    assert_same_model(service.publisher.current.learner, reference)  # served: the final model


def test_pair_streams_train_pair_learners_and_dead_letter_for_triplet_only_ones(tmp_path):
    stream_file = make_stream(tmp_path, 120, seed=2, kind="pair")
    stream = ConstraintStream.load(stream_file)
    rdml = run_to_end(stream_file, tmp_path / "rdml", learner="rdml")
    assert_same_model(rdml.publisher.current.learner, train_reference(stream, "rdml"))
    oasis = run_to_end(stream_file, tmp_path / "oasis", learner="oasis")
    assert oasis.status["constraints_seen"] == 0
    letters = read_dead_letters(tmp_path / "oasis" / "dead-letters.jsonl")
    assert [letter.offset for letter in letters] == list(range(120))
    assert {letter.reason for letter in letters} == {"unsupported_kind"}


def test_bad_lines_of_a_message_file_go_to_the_dead_letter_file(tmp_path: Path):
    stream_file = make_stream(tmp_path, 60, seed=3)
    stream = ConstraintStream.load(stream_file)
    good = encode_stream(stream_file, "json", inline=True)  # one message per line
    bad = {
        5: b'{"v":3,"kind":"triplet"}',
        17: b"not a message",
        30: b'{"v":1,"kind":"pair","left":{"x":[1]},"right":{"x":[2]},"similar":true}',
        41: b'{"v":1,"kind":"triplet","anchor":{"id":"a"},"positive":{"id":"b"},'
        b'"negative":{"id":"c"}}',
    }
    lines = list(good)
    for offset in sorted(bad):
        lines.insert(offset, bad[offset])
    source = tmp_path / "messages.txt"
    source.write_bytes(b"\n".join(lines) + b"\n")
    state = tmp_path / "state"
    service = run_to_end(source, state, gallery=str(stream_file), n_features=64)
    letters = read_dead_letters(state / "dead-letters.jsonl")
    assert {(d.offset, d.reason, d.value) for d in letters} == {
        (5, "unknown_version", bad[5]),
        (17, "undecodable", bad[17]),
        (30, "bad_dimension", bad[30]),
        (41, "unknown_item", bad[41]),
    }
    assert service.status["constraints_consumed"] == 64
    # the 60 good ones, in order
    assert_same_model(service.publisher.current.learner, train_reference(stream))
    assert service.status["dead_letters"] == {
        "unknown_version": 1,
        "undecodable": 1,
        "bad_dimension": 1,
        "unknown_item": 1,
    }


def test_a_message_file_without_items_says_what_it_needs_and_runs_once_given_it(tmp_path):
    """A file of messages carries no items, so no gallery and no input dimension of its own:
    the service says which option supplies them instead of failing on the file's first line."""
    stream_file = make_stream(tmp_path, 40, seed=5)
    stream = ConstraintStream.load(stream_file)
    source = tmp_path / "messages.txt"
    source.write_bytes(b"\n".join(encode_stream(stream_file, "json", inline=True)) + b"\n")
    with pytest.raises(ValueError, match="n_features: unknown input dimension; give --n-features"):
        Service(ServiceConfig(source=source.as_uri(), checkpoint_dir=str(tmp_path / "a")))
    with pytest.raises(ValueError, match=r"give --gallery or --items .* or --preset paper"):
        Service(
            ServiceConfig(source=source.as_uri(), checkpoint_dir=str(tmp_path / "b"), n_features=64)
        )
    service = run_to_end(source, tmp_path / "c", n_features=64, preset="paper")
    assert service.status["updates"] == 40
    assert_same_model(service.publisher.current.learner, train_reference(stream, preset="paper"))


def test_metrics_exist_before_the_learner_first_reports(tmp_path: Path):
    """Prometheus conventions: every series the learner process exports is there from the
    start, at zero for a new model and at the checkpoint's totals after a restart."""
    stream_file = make_stream(tmp_path, 30, seed=6)
    fresh = Service(ServiceConfig(source=stream_file.as_uri(), checkpoint_dir=str(tmp_path / "s")))
    text = fresh.metrics.render().decode()  # not started: no report from a learner process yet
    for line in (
        "oahu_constraints_consumed_total 0.0",
        'oahu_dead_letters_total{reason="undecodable"} 0.0',
        'oahu_dead_letters_total{reason="unsupported_kind"} 0.0',
        'oahu_constraints_skipped_total{reason="non_finite"} 0.0',
        "oahu_prequential_accuracy 0.0",
        "oahu_model_updates 0.0",
    ):
        assert line in text.splitlines(), line
    # The default OAHU's three depths, α uniform.
    alpha = {
        line.split()[0]: float(line.split()[1])
        for line in text.splitlines()
        if line.startswith("oahu_hedge_weight{")
    }
    assert alpha == pytest.approx({f'oahu_hedge_weight{{depth="{d}"}}': 1 / 3 for d in range(3)})
    # A pair stream for OAHU: every record a dead letter, and the totals survive a restart.
    pairs = make_stream(tmp_path, 20, seed=6, kind="pair")
    run_to_end(pairs, tmp_path / "p")
    again = Service(ServiceConfig(source=pairs.as_uri(), checkpoint_dir=str(tmp_path / "p")))
    lines = again.metrics.render().decode().splitlines()
    assert 'oahu_dead_letters_total{reason="unsupported_kind"} 20.0' in lines
    assert "oahu_constraints_consumed_total 20.0" in lines


def test_a_drift_is_served_counted_and_neither_forgotten_nor_repeated_after_a_restart(
    tmp_path: Path,
):
    """A digits stream whose concept changes at 1,500 (class identity → shape groups): the
    service detects it, lists it in /v1/model and counts it; learned in two runs over a growing
    message file, the model and its detections are those of one learner over the whole."""
    # Seed 8: the default learns seed 7's new concept fast enough that its rolling accuracy
    # drops by less than the confirmation's 15 points, so no drift is confirmed there at all.
    stream = build_drift_stream("digits", 2600, seed=8, drift="abrupt", drift_at=1500)
    stream_file = tmp_path / "drift.npz"
    stream.save(stream_file)
    lines = encode_stream(stream_file, "json", inline=True)
    source = tmp_path / "messages.txt"
    config = dict(gallery=str(stream_file), n_features=64, checkpoint_every=400)
    source.write_bytes(b"\n".join(lines[:2200]) + b"\n")  # the drift is confirmed by 2,200
    first = run_to_end(source, tmp_path / "state", **config)
    assert first.status["constraints_consumed"] == 2200
    assert [e["signal"] for e in first.status["drift_events"]].count("combined") == 1
    source.write_bytes(b"\n".join(lines) + b"\n")
    second = run_to_end(source, tmp_path / "state", **config)
    reference = train_reference(stream)
    assert_same_model(read_checkpoint(checkpoint_path(tmp_path / "state"))[0], reference)
    events = second.status["drift_events"]
    assert events == [e.to_dict() for e in reference.drift_events]
    combined = [e for e in events if e["signal"] == "combined"]
    assert len(combined) == 1 and 1500 <= combined[0]["suspected_at"] < 1700
    assert combined[0]["constraint"] == combined[0]["suspected_at"] + CONFIRM
    text = second.metrics.render().decode().splitlines()
    assert 'oahu_drift_detected_total{signal="combined"} 1.0' in text


def test_restart_after_the_end_learns_nothing_twice(tmp_path: Path):
    stream_file = make_stream(tmp_path, 100, seed=4)
    run_to_end(stream_file, tmp_path / "state", checkpoint_every=30)
    again = run_to_end(stream_file, tmp_path / "state")
    assert again.status["updates"] == 100 and again.status["constraints_consumed"] == 100


def test_the_embedded_default_command(tmp_path: Path):
    """``oahu run`` with no source: a digits stream built once, URLs printed, exit at end."""
    port = free_port()
    cmd = [sys.executable, "-m", "oahu.cli.main", "run", "--exit-at-end", "--http",
           f"127.0.0.1:{port}", "--default-constraints", "300"]  # fmt: skip
    done = subprocess.run(
        cmd, cwd=tmp_path, env={"PYTHONPATH": str(REPO)}, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    for url in ("/docs", "/metrics", "/v1/classify"):
        assert f"http://127.0.0.1:{port}{url}" in done.stdout
    learner, progress = read_checkpoint(tmp_path / "oahu-state" / "checkpoint.pt")
    assert learner.name == "oahu" and progress.consumed == 300 == learner.updates
    cached = tmp_path / "oahu-state" / "digits-300-seed0.npz"
    assert len(ConstraintStream.load(cached)) == 300
    assert np.isclose(learner.alpha.sum(), 1.0)


def test_preprocessing_is_fitted_on_the_gallery_before_the_first_constraint(tmp_path: Path):
    """The default OAHU projects items onto principal axes fitted on the gallery, once, before
    it learns; the file source's gallery is the stream's development split."""
    stream_file = make_stream(tmp_path, 80, seed=4)
    stream = ConstraintStream.load(stream_file)
    service = run_to_end(stream_file, tmp_path / "state", learner_params={"device": "cpu"})
    saved, progress = read_checkpoint(checkpoint_path(tmp_path / "state"))
    # digits' 64 features: "auto" projects and lifts them
    assert progress.consumed == 80 and saved.input_scaler.spec == "pca:200+lift"
    assert saved.get_params()["preprocess"] == OAHUConfig().preprocess == "auto"
    reference = make_learner("oahu", stream.n_features, device="cpu")
    assert reference.needs_prepare
    reference.prepare(stream.X[stream.dev_idx])
    for fitted in ("mean", "components", "lift"):  # the same statistics, from the same items
        np.testing.assert_array_equal(
            getattr(saved.input_scaler, fitted), getattr(reference.input_scaler, fitted)
        )
    reference.learn_triplets(*stream.batch(0, len(stream)))
    probe = stream.X[stream.test_idx[:20]]
    np.testing.assert_allclose(saved.embed(probe), reference.embed(probe), atol=1e-6)
    assert service.status["updates"] == 80


def test_a_preset_reaches_the_learner(tmp_path: Path):
    """``oahu run --preset paper``: the paper's algorithm, as the same replay trains it."""
    stream_file = make_stream(tmp_path, 60, seed=5)
    service = run_to_end(stream_file, tmp_path / "state", preset="paper")
    served = service.publisher.current.learner
    assert served.preset == "paper" and served.config.loss == "abtl"
    reference = train_reference(ConstraintStream.load(stream_file), preset="paper")
    assert_same_model(served, reference)
    assert served.utilization == 1.0  # ABTL: every triplet moves the model


def test_a_learner_that_fits_on_items_needs_a_source_of_items(tmp_path: Path, capsys):
    """A file of messages (like Kafka) brings no items: the default OAHU, which projects items
    onto principal axes fitted on unlabelled ones, says what to give instead of failing later."""
    stream_file = make_stream(tmp_path, 30, seed=6)
    source = tmp_path / "messages.txt"
    source.write_bytes(b"\n".join(encode_stream(stream_file, "json", inline=True)) + b"\n")
    argv = ["run", "--source", source.as_uri(), "--n-features", "64", "--exit-at-end"]
    argv += ["--checkpoint-dir", str(tmp_path / "refused"), "--http", f"127.0.0.1:{free_port()}"]
    assert main(argv) == 2
    error = capsys.readouterr().err
    assert "oahu run: error: oahu: fits its preprocessing ('pca:" in error
    assert "give --gallery or --items" in error and "--preset paper" in error
    # Items to fit on from --items (the gallery stays empty), or an OAHU that needs none.
    stream = ConstraintStream.load(stream_file)
    with_items = run_to_end(source, tmp_path / "items", items=str(stream_file), n_features=64)
    assert with_items.catalog.gallery.snapshot()[1].shape[0] == 0
    reference = make_learner("oahu", 64)
    reference.prepare(stream.X)  # all the stream file's items, in their order
    reference.learn_triplets(*stream.batch(0, len(stream)))
    assert_same_model(with_items.publisher.current.learner, reference)
    paper = run_to_end(source, tmp_path / "paper", preset="paper", n_features=64)
    assert paper.status["updates"] == 30
