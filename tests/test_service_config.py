"""``oahu run`` configuration: defaults < file (TOML/YAML) < OAHU_* env vars < flags."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oahu.service.config import ServiceConfig
from oahu.service.config_flags import add_arguments, flag_of
from oahu.service.config_sources import read_env, resolve_config


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(argv)


def test_defaults_serve_the_embedded_stream_on_localhost():
    cfg = resolve_config(parse([]), environ={})
    assert cfg == ServiceConfig()
    assert cfg.source is None and cfg.http_host_port() == ("127.0.0.1", 8000)


@pytest.mark.parametrize("suffix", [".toml", ".yaml"])
def test_file_then_env_then_flags(tmp_path: Path, suffix: str):
    path = tmp_path / f"oahu{suffix}"
    if suffix == ".toml":
        path.write_text(
            'source = "kafka://kafka:9092/constraints?group=prod"\n'
            "checkpoint-every = 100\nlearner = 'lego'\nhttp = '0.0.0.0:9000'\n"
            "[kafka]\nsecurity_protocol = 'SASL_SSL'\nsasl_mechanism = 'PLAIN'\n"
        )
    else:
        path.write_text(
            "source: kafka://kafka:9092/constraints?group=prod\ncheckpoint_every: 100\n"
            "learner: lego\nhttp: 0.0.0.0:9000\n"
            "kafka:\n  security_protocol: SASL_SSL\n  sasl_mechanism: PLAIN\n"
        )
    env = {
        "OAHU_CHECKPOINT_EVERY": "200",
        "OAHU_EXIT_AT_END": "true",
        "OAHU_KAFKA__SASL_PLAIN_PASSWORD": "pw",
        "HOME": "/root",  # not ours: ignored
    }
    args = parse(["--config", str(path), "--checkpoint-every", "300",
                  "--kafka-option", "sasl_mechanism=SCRAM-SHA-512",
                  "--learner-param", "learning_rate=0.01"])  # fmt: skip
    cfg = resolve_config(args, environ=env)
    assert cfg.checkpoint_every == 300  # flag beats env beats file
    assert cfg.exit_at_end is True  # env
    assert cfg.learner == "lego" and cfg.http == "0.0.0.0:9000"  # file
    assert cfg.kafka == {
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_password": "pw",
    }
    assert cfg.learner_params == {"learning_rate": 0.01}
    assert cfg.kafka_target() == ("kafka:9092", "constraints", "prod")


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"source": "http://x/y"}, "source: expected file:///abs/path"),
        ({"source": "file://relative/stream.npz"}, "source: file URIs need an absolute path"),
        ({"source": "kafka://broker:9092/"}, "source: expected kafka://HOST:PORT/TOPIC"),
        ({"learner": "nope"}, "learner: must be one of 'oahu', 'euclidean', .*, got 'nope'"),
        ({"http": "8000"}, "http: expected HOST:PORT"),
        ({"reindex_interval": 0.0}, "reindex_interval: must be a number > 0, got 0.0"),
        ({"poll_timeout": float("inf")}, "poll_timeout: must be finite, got inf"),
        ({"max_batch_items": 0}, "max_batch_items: must be an integer >= 1, got 0"),
        ({"n_features": 0}, "n_features: must be an integer >= 1, got 0"),
        ({"learner_nice": 20}, "learner_nice: must be an integer in \\[0, 19\\], got 20"),
        ({"seed": -1}, "seed: must be an integer >= 0, got -1"),
        ({"threads": 2.5}, "threads: must be an integer >= 1, got 2.5"),
        ({"exit_at_end": "yes"}, "exit_at_end: must be true or false, got 'yes'"),
        ({"log_level": "verbose"}, "log_level: must be one of 'debug', 'info', .*, got 'verbose'"),
        ({"index": "hnsw"}, "index: must be one of 'exact', 'flat', 'ivf', got 'hnsw'"),
        ({"preset": "tuned"}, "preset: must be one of 'paper', got 'tuned'"),
        ({"learner": "lego", "preset": "paper"}, "preset: only OAHU has presets, not 'lego'"),
        (
            {"learner": "lego", "learner_params": {"learnin_rate": 0.1}},
            "learner_params: lego has no parameter 'learnin_rate' \\(did you mean "
            "'learning_rate'\\?\\); it takes learning_rate, target_similar",
        ),
    ],
)
def test_invalid_settings_name_the_field(changes: dict, message: str):
    with pytest.raises(ValueError, match=message):
        ServiceConfig(**changes)


def test_a_preset_from_flag_or_env_reaches_the_learner_arguments():
    """``oahu run --preset paper``: OAHU as the paper publishes it; no preset: oahu's own."""
    assert ServiceConfig().learner_arguments() == {}
    flag = resolve_config(parse(["--preset", "paper", "--learner-param", "seed=3"]), environ={})
    env = resolve_config(parse([]), environ={"OAHU_PRESET": "paper"})
    assert flag.preset == env.preset == "paper"
    assert flag.learner_arguments() == {"seed": 3, "preset": "paper"}


def test_self_paced_flag_reaches_oahu_and_only_oahu():
    flag = resolve_config(parse(["--self-paced"]), environ={})
    env = resolve_config(parse([]), environ={"OAHU_SELF_PACED": "true"})
    assert flag.learner_arguments() == env.learner_arguments() == {"self_paced": True}
    with pytest.raises(ValueError, match="self_paced: only OAHU learns self-paced, not 'lego'"):
        ServiceConfig(learner="lego", self_paced=True)


def test_bad_values_from_env_and_files_name_the_setting(tmp_path: Path):
    with pytest.raises(ValueError, match="checkpoint_every: expected int, got 'many'"):
        read_env({"OAHU_CHECKPOINT_EVERY": "many"})
    with pytest.raises(ValueError, match="exit_at_end: expected true or false"):
        read_env({"OAHU_EXIT_AT_END": "perhaps"})
    bad = tmp_path / "bad.toml"
    bad.write_text("chekpoint_every = 3\n")
    with pytest.raises(ValueError, match="unknown setting 'chekpoint_every'"):
        resolve_config(parse(["--config", str(bad)]), environ={})
    with pytest.raises(ValueError, match="kafka: expected KEY=VALUE"):
        resolve_config(parse(["--kafka-option", "oops"]), environ={})


def test_help_documents_every_option():
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    text = parser.format_help()
    for field in dataclasses.fields(ServiceConfig):
        assert flag_of(field) in text, field.name
        assert field.metadata["help"].split()[0] in text
    flat = " ".join(text.split())
    # a default said once: in the option's own words where it explains one, else as a value
    assert "64 for micro-batch learners (docs/delivery.md says why) --group-address" in flat
    assert "default: all of them --group-timeout" in flat
    assert "(default: 64)" not in flat and "(default: 0.5)" in flat
    assert [flag_of(f) for f in dataclasses.fields(ServiceConfig) if f.name in ("kafka", "k")] == [
        "--kafka-option",
        "--k",
    ]


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=-(2**40), max_value=2**40))
def test_a_count_from_the_environment_is_taken_or_refused_by_name_and_value(n: int):
    """An integer from OAHU_* text becomes the setting when it is >= 1 and is otherwise refused
    with the setting and the value named, whichever layer it came from."""
    env = {"OAHU_CHECKPOINT_EVERY": str(n)}
    if n >= 1:
        assert resolve_config(parse([]), environ=env).checkpoint_every == n
    else:
        with pytest.raises(ValueError) as refused:
            resolve_config(parse([]), environ=env)
        assert str(refused.value) == f"checkpoint_every: must be an integer >= 1, got {n}"


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=20))
def test_any_text_for_a_setting_is_read_or_refused_by_name(text: str):
    """Whatever an environment variable holds, reading it is the setting's value or a
    ValueError naming the setting: never another exception."""
    for name, var in (("learner_nice", "OAHU_LEARNER_NICE"), ("poll_timeout", "OAHU_POLL_TIMEOUT"),
                      ("self_paced", "OAHU_SELF_PACED"), ("index", "OAHU_INDEX")):  # fmt: skip
        try:
            cfg = resolve_config(parse([]), environ={var: text})
        except ValueError as exc:
            assert str(exc).startswith(f"{name}: "), exc
        else:
            value = getattr(cfg, name)
            if name == "learner_nice":
                assert value == int(text) and 0 <= value <= 19
            elif name == "poll_timeout":
                assert value == float(text) and 0 < value < float("inf")
            elif name == "self_paced":
                assert value is (text.strip().lower() in ("1", "true", "yes", "on"))
            else:
                assert value == text and value in ("exact", "flat", "ivf")
