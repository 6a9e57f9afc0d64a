"""Cross-modal constraints reaching today's single-modality service.

``oahu run`` learns one modality. A constraint whose items name another (a version-2 message
with ``"modality": "pix"``) is dead-lettered as ``unsupported_modality``, its detail naming each
item's modality, before its items are resolved: they belong to another feature space, so
neither ``unknown_item`` nor ``bad_dimension`` would say why. One whose items all name the
default modality is learned as the same constraint without modalities would be. Through the real
learn loop (``ConsumerLoop``, as in tests/test_service_poison_records.py), and through the
learning group's replay of a round (``learn_values``), which must learn what the loop learns.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from service_support import assert_same_model
from test_service_poison_records import counter, run_loop

from oahu.connectors.constraint import DEFAULT_MODALITY, Constraint
from oahu.connectors.dead_letter import UNSUPPORTED_MODALITY
from oahu.connectors.messages import encode_binary, encode_json
from oahu.registry import make_learner
from oahu.service.group.schedule import learn_values
from oahu.service.item_store import ItemStore

DEFAULT3 = (DEFAULT_MODALITY,) * 3


def inline(seed: int, dim: int = 2) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(3, dim)).astype(np.float32)


def stream() -> tuple[list[bytes], list[np.ndarray], dict[int, str]]:
    """(the records, the triplets the service learns in order, offset -> the detail expected in
    the unsupported_modality letter of each cross-modal record)."""
    records: list[bytes] = []
    learned: list[np.ndarray] = []
    refused: dict[int, str] = {}

    def learn(message: bytes, x: np.ndarray) -> None:
        records.append(message)
        learned.append(x)

    def refuse(message: bytes, detail: str) -> None:
        refused[len(records)] = detail
        records.append(message)

    for seed in range(6):
        x = inline(seed)
        learn(encode_json(Constraint("triplet", x=x)), x)  # version 1
        x = inline(100 + seed)
        default = Constraint("triplet", x=x, ts=float(seed), modalities=DEFAULT3)
        learn((encode_json if seed % 2 else encode_binary)(default), x)  # version 2, default
        cross = Constraint("triplet", x=inline(200 + seed, dim=3), modalities=("pix", "fou", "fou"))
        refuse(
            (encode_binary if seed % 2 else encode_json)(cross),  # another dimension, too
            "anchor 'pix', positive 'fou', negative 'fou'",
        )
        if seed % 3 == 0:  # by id, ids this item store does not hold: still the modality
            by_id = Constraint("triplet", ids=("90", "91", "92"), modalities=("pix", "pix", "fou"))
            refuse(encode_binary(by_id), "anchor 'pix', positive 'pix', negative 'fou'")
        if seed % 3 == 1:  # one item of another modality is enough; a pair (a kind OASIS does
            pair = Constraint(  # not learn) is refused for its modality first
                "pair", ids=("4", "2"), similar=True, modalities=(DEFAULT_MODALITY, "fou")
            )
            refuse(encode_json(pair), "left 'default', right 'fou'")
    return records, learned, refused


def test_cross_modal_constraints_are_dead_lettered_and_default_ones_learned(tmp_path: Path):
    records, learned, refused = stream()
    loop, source, letters = run_loop(tmp_path, records, make_learner("oasis", 2))
    assert loop.progress.consumed == len(records) and source.position == len(records)
    assert {d.offset: d.reason for d in letters} == dict.fromkeys(refused, UNSUPPORTED_MODALITY)
    for letter in letters:
        assert letter.detail == (
            f"items in modalities {refused[letter.offset]}: learner 'oasis' learns one "
            f"modality, 'default'"
        )
        assert letter.value == records[letter.offset]  # the bytes, to replay elsewhere
    assert loop.progress.dead_letters == {UNSUPPORTED_MODALITY: len(refused)}
    dead = counter(loop, "oahu_dead_letters_total", reason=UNSUPPORTED_MODALITY)
    assert dead == len(refused)
    # the default-modality triplets, version 1 and 2 alike, in stream order
    reference = make_learner("oasis", 2)
    for x in learned:
        reference.learn_triplets(x[None, 0], x[None, 1], x[None, 2])
    assert loop.learner.constraints_seen == len(learned)
    assert_same_model(loop.learner, reference)


def test_a_malformed_modality_is_a_decode_error_not_a_refusal(tmp_path: Path):
    good = encode_json(Constraint("triplet", x=inline(1)))
    bad = good.replace(b'"v":1', b'"v":2').replace(b'"x":', b'"modality":"pi x","x":')
    _, _, letters = run_loop(tmp_path, [good, bad, good], make_learner("oasis", 2))
    assert [(d.offset, d.reason) for d in letters] == [(1, "bad_modality")]
    assert "anchor.modality: expected 1 to 64 letters" in letters[0].detail


def test_the_learning_groups_replay_learns_what_the_loop_learns(tmp_path: Path):
    records, _, _ = stream()
    loop, _, _ = run_loop(tmp_path, records, make_learner("oasis", 2))
    items = ItemStore(dim=2)
    items.add(["4", "2"], [[0.0, 1.0], [1.0, 0.0]])  # run_loop's item store
    replayed = make_learner("oasis", 2)
    for start in range(0, len(records), 5):  # in rounds, as a member learns them
        learn_values(replayed, records[start : start + 5], items)
    assert_same_model(replayed, loop.learner)
