"""The annotation page's endpoints: questions for a person, and their answers into the learner.

``POST /v1/console/questions`` asks the service's suggester (as ``POST /v1/suggest`` over the
gallery) and hands each question out with a token the service signed
(:mod:`~oahu.service.console.question_tokens`). ``POST /v1/console/answers`` takes the token
back with the person's choice and stores the answer as an ordinary triplet constraint on the
service's durable input path (:mod:`~oahu.service.console.answer_sinks`) before it answers
``accepted``: the anchor, the item chosen as closer, the other one. The learner learns each
question's answer once, however often it arrives.

Both are write endpoints: they need the service's ``--auth-token`` when it has one.
"""

from __future__ import annotations

import json
import re
import secrets
import time
from typing import TYPE_CHECKING, Annotated, Any, Literal

from fastapi import APIRouter, HTTPException
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, PlainValidator, WithJsonSchema
from pydantic_core import PydanticCustomError
from starlette.concurrency import run_in_threadpool

from oahu.connectors.constraint import INT64_MAX, MISSING_LABEL
from oahu.service.console.answer_sinks import AnswerNotStored
from oahu.service.console.question_tokens import (
    QUESTION_TTL_SECONDS,
    AskedQuestion,
    BadToken,
    QuestionTokens,
    load_key,
)
from oahu.service.serving.inputs import SUGGEST_STRATEGIES, Whole, json_safe
from oahu.service.serving.suggest import SuggestRequest

if TYPE_CHECKING:
    from oahu.service.serving.api import ServiceView
    from oahu.service.serving.snapshot import Snapshot

MAX_QUESTIONS = 20  # per request: a page shows a few at a time
MAX_ANNOTATOR = 64  # characters of an annotator's name
#: Annotators counted under their own name in oahu_console_answers_total; later ones share
#: ``OTHER_ANNOTATORS``, so that no client can grow the series without bound.
MAX_ANNOTATOR_SERIES = 1000
OTHER_ANNOTATORS = "(others)"
MAX_TOKEN = 4096  # characters: three ids of at most 256 characters each, signed, fit easily
DEFAULT_STRATEGY = "joint-entropy"  # as POST /v1/suggest's


#: A name as a person types it: no control character (C0, DEL, C1) and one character at least
#: that is not a space. One pattern for the JSON schema and for the check, read as JSON Schema
#: reads it (``re.search``: ``$`` also matches before a final newline, which is dropped).
ANNOTATOR_PATTERN = r"^[^\x00-\x1f\x7f-\x9f]*[^\s\x00-\x1f\x7f-\x9f][^\x00-\x1f\x7f-\x9f]*$"


def _annotator(value: Any) -> str:
    """``value`` if it is a name (:data:`ANNOTATOR_PATTERN`, 1 to ``MAX_ANNOTATOR`` characters).

    >>> _annotator("Ada L."), _annotator(" ada\\n")
    ('Ada L.', ' ada')
    >>> _annotator("\\x97n")
    Traceback (most recent call last):
    pydantic_core._pydantic_core.PydanticCustomError: who answered: ...
    """
    if (
        isinstance(value, str)
        and 1 <= len(value) <= MAX_ANNOTATOR
        and re.search(ANNOTATOR_PATTERN, value)
    ):
        return value.removesuffix("\n")
    raise PydanticCustomError(
        "annotator",
        "who answered: 1 to {most} characters, no control character, not only spaces; got {value}",
        {"most": MAX_ANNOTATOR, "value": repr(json_safe(value))},
    )


Annotator = Annotated[
    str,
    PlainValidator(_annotator),
    WithJsonSchema(
        {
            "type": "string",
            "minLength": 1,
            "maxLength": MAX_ANNOTATOR,
            "pattern": ANNOTATOR_PATTERN,
            "description": "who answered (a name typed once in the page): no control "
            "character, not only spaces",
        }
    ),
]
_STRICT = ConfigDict(extra="forbid", strict=True)


class QuestionsQuery(BaseModel):
    """How many questions, chosen how."""

    model_config = _STRICT
    n: Annotated[int, Field(ge=1, le=MAX_QUESTIONS), Whole] = Field(
        1, description=f"questions wanted: 1 to {MAX_QUESTIONS}"
    )
    strategy: Literal[SUGGEST_STRATEGIES] | None = Field(  # type: ignore[valid-type]
        None, description=f"as POST /v1/suggest's (default {DEFAULT_STRATEGY})"
    )


class AnswerBody(BaseModel):
    """A person's answer to one question."""

    model_config = _STRICT
    token: Annotated[str, Field(min_length=1, max_length=MAX_TOKEN)] = Field(
        description="the question's token, as POST /v1/console/questions gave it"
    )
    choice: Literal["first", "second", "skip"] = Field(
        description="which item is more similar to the anchor; skip: cannot tell"
    )
    annotator: Annotator


def answer_message(asked: AskedQuestion, choice: str, annotator: str, at: float) -> bytes:
    """The triplet constraint message of an answer (``connectors/MESSAGES.md``): the anchor,
    the item chosen as more similar (positive) and the other (negative), with the question id,
    the annotator and the snapshot that asked on top.

    >>> asked = AskedQuestion("9b1f", "17", "4", "90", snapshot=3, asked_at=1.0)
    >>> message = json.loads(answer_message(asked, "second", "ana", at=2.0))
    >>> message["positive"], message["negative"], message["question"], message["annotator"]
    ({'id': '90'}, {'id': '4'}, '9b1f', 'ana')
    """
    closer, farther = (asked.first, asked.second)[:: 1 if choice == "first" else -1]
    message = {
        "v": 1,
        "kind": "triplet",
        "anchor": {"id": asked.anchor},
        "positive": {"id": closer},
        "negative": {"id": farther},
        "ts": at,
        "question": asked.question,
        "annotator": annotator,
        "snapshot": asked.snapshot,
    }
    # ASCII: one line whatever the names hold (no raw U+2028 either)
    return json.dumps(message, separators=(",", ":")).encode("ascii")


class _GalleryLabels:
    """The labels of a snapshot's gallery items by id, looked up once per snapshot."""

    def __init__(self) -> None:
        self._snapshot: Snapshot | None = None
        self._by_id: dict[str, int] = {}

    def __call__(self, snapshot: Snapshot, item: str) -> int | None:
        if snapshot is not self._snapshot:
            labels = snapshot.index.labels if snapshot.index is not None else None
            ids = snapshot.gallery_ids.tolist()
            self._by_id = {} if labels is None else dict(zip(ids, labels.tolist(), strict=True))
            self._snapshot = snapshot
        label = self._by_id.get(item, MISSING_LABEL)
        return None if label == MISSING_LABEL else int(label)


def answers_router(view: ServiceView) -> APIRouter:
    """``POST /v1/console/questions`` and ``POST /v1/console/answers`` over ``view``."""
    # here: the API module mounts the console, which must not import it while it loads
    from oahu.service.serving.api import (
        Detail,
        FastJSONRoute,
        _responses,
        ask_suggester,
        invalid,
        write_guards,
    )

    # the API's route class: bodies that are not JSON (or not UTF-8) are a 422, as there
    router = APIRouter(route_class=FastJSONRoute, dependencies=write_guards(view))
    tokens = QuestionTokens(load_key(view.config.checkpoint_dir))
    labels = _GalleryLabels()
    annotators: set[str] = set()

    @router.post(
        "/v1/console/questions",
        summary="Questions for a person to answer: which of two items is more like the anchor?",
        responses={
            **_responses(401, 413),
            503: {
                "model": Detail,
                "description": "no model snapshot yet, or too many question requests wait",
            },
        },
    )
    async def questions(body: QuestionsQuery) -> JSONResponse:
        strategy = body.strategy or DEFAULT_STRATEGY
        request = SuggestRequest(None, body.n, strategy, secrets.randbelow(INT64_MAX))
        out = await ask_suggester(view, request)
        snap, now = out.snapshot, time.time()

        def item(item_id: str) -> dict[str, Any]:
            return {"id": item_id, "label": labels(snap, item_id)}

        asked = []
        for q in out.questions:
            question = AskedQuestion.new(q.anchor, q.first, q.second, snap.version, now)
            asked.append(
                {
                    "token": tokens.sign(question),
                    "anchor": item(q.anchor),
                    "first": item(q.first),
                    "second": item(q.second),
                    "score": q.score,
                }
            )
        return JSONResponse({"questions": asked, "model": snap.meta()})

    def counted(annotator: str, choice: str) -> None:
        if annotator not in annotators and len(annotators) >= MAX_ANNOTATOR_SERIES:
            annotator = OTHER_ANNOTATORS
        annotators.add(annotator)
        view.metrics.console_answers.labels(annotator=annotator, choice=choice).inc()

    @router.post(
        "/v1/console/answers",
        summary="A person's answer: stored durably for the learner, once per question",
        responses={
            **_responses(401, 413),
            409: {
                "model": Detail,
                "description": "the question is stale, or names an item removed since",
            },
            503: {"model": Detail, "description": "the answer could not be stored; send it again"},
        },
    )
    async def answers(body: AnswerBody) -> dict[str, Any]:
        try:
            asked = tokens.verify(body.token)
        except BadToken as exc:
            raise invalid(("token",), f"the service never asked this question ({exc})") from None
        sink, question = view.answers, asked.question
        duplicate = {"status": "duplicate", "question": question, "appended_to": sink.target}
        if sink.is_answered(question):  # a retry: the first answer stands
            return duplicate
        now = time.time()
        age = now - asked.asked_at
        if age > QUESTION_TTL_SECONDS:
            raise HTTPException(
                409,
                f"question {question} is stale: asked {age:.0f} s ago, answers are taken for "
                f"{QUESTION_TTL_SECONDS:.0f} s; ask again (POST /v1/console/questions)",
            )
        if body.choice == "skip":
            counted(body.annotator, body.choice)
            return {"status": "skipped", "question": question}
        for role in ("anchor", "first", "second"):
            item_id = getattr(asked, role)
            if item_id not in view.catalog.items:  # the learner resolves ids there
                raise HTTPException(
                    409,
                    f"item {item_id!r} (the question's {role}) is no longer in the item store: "
                    "the answer cannot be learned; ask again",
                )
        message = answer_message(asked, body.choice, body.annotator, now)
        try:
            stored = await run_in_threadpool(sink.submit, question, message)  # fsync, or acks
        except AnswerNotStored as exc:
            raise HTTPException(503, str(exc)) from None
        if not stored:  # another answer to it got in first
            return duplicate
        counted(body.annotator, body.choice)
        return {"status": "accepted", "question": question, "appended_to": sink.target}

    return router
