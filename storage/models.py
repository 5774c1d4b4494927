"""Tables of SpecSteer (SQLAlchemy 2 declarative, typed columns), the same on SQLite and PostgreSQL.

Structured values (history items, settings, tokens, stats, transcripts, ratings,
run configs) are JSON columns: they are read and written whole, never queried
inside. Values that are aggregated (ROUGE scores) are real columns.
All timestamps are timezone-aware UTC. Ids are 64-bit on both databases (``Base``),
and text never holds NUL (``ShortText``, ``LongText``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    Dialect,
    Float,
    ForeignKey,
    Integer,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
    false,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from specsteer.stores.runs import RUN_STATUSES

# The ROUGE columns of EvalCell; tests check they are specsteer.evaluation.metrics.ROUGE_KEYS (importing that
# module here would load the ROUGE scorer into every process that opens the database).
ROUGE_KEYS = ("rouge1", "rougeL", "rouge1_stemmed", "rougeL_stemmed")


def utc_now() -> datetime:
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """Stores UTC and always reads back an aware datetime.

    SQLite has no time zone type and returns naive values; without this, times
    read from SQLite and from PostgreSQL would not compare.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given; use an aware UTC datetime")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is not None and value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value


NUL, REPLACEMENT_CHARACTER = "\x00", "\ufffd"


class _TextWithoutNul(TypeDecorator[str]):
    """PostgreSQL's text types cannot hold NUL (U+0000), which a byte-level model may emit and any caller may
    send; it becomes U+FFFD, the replacement character, on every database, so both keep the same text."""

    cache_ok = True

    def process_bind_param(self, value: str | None, dialect: Dialect) -> str | None:
        return value.replace(NUL, REPLACEMENT_CHARACTER) if value is not None and NUL in value else value


class ShortText(_TextWithoutNul):
    """``String(length)``: names, keys and labels (PostgreSQL refuses a longer value; the repositories check)."""

    impl = String
    cache_ok = True


class LongText(_TextWithoutNul):
    """``Text``: inputs, outputs, comments, errors (no length limit)."""

    impl = Text
    cache_ok = True


# The type of every id (and every column holding one): PostgreSQL's INTEGER ends at 2**31 - 1, so ids are
# BIGINT there; SQLite's are 64-bit already, and only an ``INTEGER PRIMARY KEY`` is its auto-numbered row id.
ID_TYPE = BigInteger().with_variant(Integer(), "sqlite")


class Base(DeclarativeBase):
    type_annotation_map = {int: ID_TYPE}


class History(Base):
    """An uploaded personal history (the private profile the Specialist retrieves from)."""

    __tablename__ = "histories"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(ShortText(255))
    schema: Mapped[str] = mapped_column(ShortText(32))
    user_id: Mapped[str | None] = mapped_column(ShortText(255))
    items: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    item_count: Mapped[int] = mapped_column(Integer)
    # Content hash: uploading the same history twice yields the same row.
    sha256: Mapped[str] = mapped_column(ShortText(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utc_now)


class Generation(Base):
    """One output of one method, with its per-token trace, stats and link transcript."""

    __tablename__ = "generations"

    id: Mapped[int] = mapped_column(primary_key=True)
    history_id: Mapped[int | None] = mapped_column(ForeignKey("histories.id", ondelete="SET NULL"), index=True)
    pairing: Mapped[str] = mapped_column(ShortText(128))
    method: Mapped[str] = mapped_column(ShortText(64))
    task: Mapped[str] = mapped_column(ShortText(64))
    input_text: Mapped[str] = mapped_column(LongText)
    settings: Mapped[dict[str, Any]] = mapped_column(JSON)
    text: Mapped[str] = mapped_column(LongText)
    tokens: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    stats: Mapped[dict[str, Any]] = mapped_column(JSON)
    transcript: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utc_now)


class Comparison(Base):
    """Outputs of several methods for one input, as shown to annotators."""

    __tablename__ = "comparisons"

    id: Mapped[int] = mapped_column(primary_key=True)
    history_id: Mapped[int | None] = mapped_column(ForeignKey("histories.id", ondelete="SET NULL"), index=True)
    task: Mapped[str] = mapped_column(ShortText(64))
    input_text: Mapped[str] = mapped_column(LongText)
    pairing: Mapped[str] = mapped_column(ShortText(128))
    settings: Mapped[dict[str, Any]] = mapped_column(JSON)
    blind: Mapped[bool] = mapped_column(Boolean, default=False)
    # Method names in the order shown (slot 0 = label A, ...).
    display_order: Mapped[list[str]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utc_now)

    outputs: Mapped[list[ComparisonOutput]] = relationship(
        back_populates="comparison", order_by="ComparisonOutput.slot", cascade="all, delete-orphan", lazy="selectin"
    )
    generations: Mapped[list[Generation]] = relationship(
        secondary="comparison_outputs", order_by="ComparisonOutput.slot", viewonly=True
    )
    annotations: Mapped[list[Annotation]] = relationship(
        back_populates="comparison", cascade="all, delete-orphan", passive_deletes=True
    )


class ComparisonOutput(Base):
    """Which generation sits in which slot (and under which label) of a comparison."""

    __tablename__ = "comparison_outputs"
    __table_args__ = (UniqueConstraint("comparison_id", "label", name="uq_comparison_output_label"),)

    comparison_id: Mapped[int] = mapped_column(ForeignKey("comparisons.id", ondelete="CASCADE"), primary_key=True)
    slot: Mapped[int] = mapped_column(Integer, primary_key=True)
    label: Mapped[str] = mapped_column(ShortText(8))
    generation_id: Mapped[int] = mapped_column(ForeignKey("generations.id"), index=True)

    comparison: Mapped[Comparison] = relationship(back_populates="outputs")
    generation: Mapped[Generation] = relationship(lazy="joined")


class Annotation(Base):
    """One annotator's judgement of one comparison."""

    __tablename__ = "annotations"

    id: Mapped[int] = mapped_column(primary_key=True)
    comparison_id: Mapped[int] = mapped_column(ForeignKey("comparisons.id", ondelete="CASCADE"), index=True)
    annotator: Mapped[str] = mapped_column(ShortText(255), index=True)
    # What the annotator picked, as given (a label such as "B", a method, "tie" or "all_bad") ...
    preferred: Mapped[str] = mapped_column(ShortText(64))
    # ... and resolved to a method name (or "tie" / "all_bad"), so analyses need no join.
    preferred_method: Mapped[str] = mapped_column(ShortText(64))
    # {method: {"personalization": 1-5, "fluency": 1-5}}, keys resolved to method names.
    ratings: Mapped[dict[str, dict[str, int]]] = mapped_column(JSON)
    comment: Mapped[str] = mapped_column(LongText, default="")
    display_order: Mapped[list[str]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utc_now)

    comparison: Mapped[Comparison] = relationship(back_populates="annotations")
    page_link: Mapped[AnnotationPage | None] = relationship(
        lazy="joined", cascade="all, delete-orphan", passive_deletes=True
    )


class AnnotationPage(Base):
    """The page session that saved a judgement on the Compare tab, as a keyed hash (never the session
    itself). Unique per comparison: a page holds one judgement of each, and its next one replaces it.
    A table of its own, so that a database made before it gains it (``create_all``) and keeps its
    judgements, which have none."""

    __tablename__ = "annotation_pages"
    __table_args__ = (UniqueConstraint("comparison_id", "page", name="uq_annotation_page_once"),)

    annotation_id: Mapped[int] = mapped_column(ForeignKey("annotations.id", ondelete="CASCADE"), primary_key=True)
    comparison_id: Mapped[int] = mapped_column(ForeignKey("comparisons.id", ondelete="CASCADE"), index=True)
    page: Mapped[str] = mapped_column(ShortText(64))


class EvalRun(Base):
    """A LongLaMP evaluation batch: a grid of methods x alpha x beta over N records."""

    __tablename__ = "eval_runs"
    __table_args__ = (
        CheckConstraint(
            "status IN (" + ", ".join(f"'{status}'" for status in RUN_STATUSES) + ")", name="ck_eval_run_status"
        ),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(ShortText(255), unique=True)
    config: Mapped[dict[str, Any]] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(ShortText(16), default="pending")
    error: Mapped[str | None] = mapped_column(LongText)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utc_now)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utc_now, onupdate=utc_now)

    cells: Mapped[list[EvalCell]] = relationship(
        back_populates="run", cascade="all, delete-orphan", passive_deletes=True, order_by="EvalCell.id"
    )


class EvalCell(Base):
    """One (record, method, alpha, beta) result of a run, saved as soon as it is computed.

    alpha/beta are NULL for methods that have none, and SQL treats NULLs as
    distinct in UNIQUE constraints, so uniqueness is on ``cell_key``, a canonical
    non-null string built from all four (see ``specsteer.stores.runs.cell_key``).
    """

    __tablename__ = "eval_cells"
    __table_args__ = (UniqueConstraint("run_id", "cell_key", name="uq_eval_cell_key"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("eval_runs.id", ondelete="CASCADE"))
    cell_key: Mapped[str] = mapped_column(ShortText(512))
    record_id: Mapped[str] = mapped_column(ShortText(255))
    method: Mapped[str] = mapped_column(ShortText(64))
    alpha: Mapped[float | None] = mapped_column(Float)
    beta: Mapped[float | None] = mapped_column(Float)
    output: Mapped[str] = mapped_column(LongText, default="")
    rouge1: Mapped[float | None] = mapped_column(Float)
    rougeL: Mapped[float | None] = mapped_column(Float)
    rouge1_stemmed: Mapped[float | None] = mapped_column(Float)
    rougeL_stemmed: Mapped[float | None] = mapped_column(Float)
    # The history that crossed (CellResult.history_crossed as JSON, without spans); NULL for a cell stored
    # before it existed (not audited). Added after the table: nullable, so older databases gain it on open.
    history_crossed: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    # tok_per_s, acceptance, rounds, uplink/downlink bytes, seconds, new_tokens, ...
    stats: Mapped[dict[str, Any]] = mapped_column(JSON)
    # The generation's wall time holds a pause (GenerationStats.timing_disturbed, which the stats say too): a
    # resume runs the cell again and the new cell takes its place. Added after the table: databases made
    # before it get the column, false, when they are opened (storage.db).
    timing_disturbed: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utc_now)

    run: Mapped[EvalRun] = relationship(back_populates="cells")


# --------------------------------------------------------------------------- annotation campaigns

CAMPAIGN_STATUSES = ("preparing", "ready", "stopped", "failed")


class Campaign(Base):
    """An annotation study: records run through the same methods, one comparison per record, judged by
    its annotators (those with a join code, or anyone when ``open_to_anyone``)."""

    __tablename__ = "campaigns"
    __table_args__ = (
        CheckConstraint(
            "status IN (" + ", ".join(f"'{status}'" for status in CAMPAIGN_STATUSES) + ")", name="ck_campaign_status"
        ),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(ShortText(128), unique=True)
    task: Mapped[str] = mapped_column(ShortText(64))
    methods: Mapped[list[str]] = mapped_column(JSON)
    pairing: Mapped[str] = mapped_column(ShortText(128))
    # The shared GenerationSettings (its method unused: each output's is in ``methods``).
    settings: Mapped[dict[str, Any]] = mapped_column(JSON)
    # Where the records come from: {"source": "sample" | "shared" | "upload", "path": ..., "limit": ...}, or
    # {"source": "run", ..., "run", "run_id", "alpha", "beta"} for the outputs of a stored run (RunSource).
    data: Mapped[dict[str, Any]] = mapped_column(JSON)
    planned: Mapped[int] = mapped_column(Integer)
    open_to_anyone: Mapped[bool] = mapped_column(Boolean, default=False)
    status: Mapped[str] = mapped_column(ShortText(16), default="preparing")
    error: Mapped[str | None] = mapped_column(LongText)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utc_now)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utc_now, onupdate=utc_now)


class CampaignItem(Base):
    """One record of a campaign and the comparison generated for it (stored as soon as it is done)."""

    __tablename__ = "campaign_items"
    __table_args__ = (
        UniqueConstraint("campaign_id", "record_key", name="uq_campaign_item_record"),
        UniqueConstraint("campaign_id", "comparison_id", name="uq_campaign_item_comparison"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    campaign_id: Mapped[int] = mapped_column(ForeignKey("campaigns.id", ondelete="CASCADE"), index=True)
    position: Mapped[int] = mapped_column(Integer)  # the record's place in the records file
    record_key: Mapped[str] = mapped_column(ShortText(255))
    comparison_id: Mapped[int] = mapped_column(ForeignKey("comparisons.id", ondelete="CASCADE"))
    # How alike its outputs are (CampaignItemRef.similarity); NULL for items stored before it was measured.
    similarity: Mapped[float | None] = mapped_column(Float, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utc_now)


class CampaignAnnotator(Base):
    """Someone who judges a campaign: named by the operator with a join code (a salted hash of it is kept:
    ``specsteer.service.join_codes``), or named by themself in a campaign open to anyone (no code)."""

    __tablename__ = "campaign_annotators"
    __table_args__ = (UniqueConstraint("campaign_id", "name", name="uq_campaign_annotator_name"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    campaign_id: Mapped[int] = mapped_column(ForeignKey("campaigns.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(ShortText(64))
    # The column keeps its first name; it holds "s1$salt$digest" (or, stored before salts, a bare SHA-256).
    code_hash: Mapped[str | None] = mapped_column("code_sha256", ShortText(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utc_now)


class CampaignJudgementRow(Base):
    """One annotator's judgement of one comparison of a campaign; a second save replaces the first."""

    __tablename__ = "campaign_judgements"
    __table_args__ = (UniqueConstraint("annotator_id", "comparison_id", name="uq_campaign_judgement_once"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    campaign_id: Mapped[int] = mapped_column(ForeignKey("campaigns.id", ondelete="CASCADE"), index=True)
    comparison_id: Mapped[int] = mapped_column(ForeignKey("comparisons.id", ondelete="CASCADE"), index=True)
    annotator_id: Mapped[int] = mapped_column(ForeignKey("campaign_annotators.id", ondelete="CASCADE"), index=True)
    slots: Mapped[list[str]] = mapped_column(JSON)  # methods in the order this annotator saw them (slot 0 = A)
    preference: Mapped[str] = mapped_column(ShortText(16))  # a label ("B"), "tie", "all_good" or "all_bad"
    preferred_method: Mapped[str] = mapped_column(ShortText(64))  # the label resolved to its method
    ratings: Mapped[dict[str, dict[str, int]]] = mapped_column(JSON)  # method -> criterion -> 1-5
    rationale: Mapped[str] = mapped_column(LongText, default="")
    seconds: Mapped[float | None] = mapped_column(Float)  # from display to save
    saves: Mapped[int] = mapped_column(Integer, default=1)  # how often it was saved (the last one counts)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utc_now)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utc_now, onupdate=utc_now)


# --------------------------------------------------------------------------- LLM judges of evaluation runs


class JudgeScoreRow(Base):
    """One judge's grade (1-10) of one cell of a run on one criterion, with the prompt and the answer; no grade
    where ``reason_kind`` says why (specsteer.stores.judges.JudgeScore). A table of its own beside
    eval_cells: a database made before judges gains it when opened for writing, and one opened read-only
    without it (an example runs' file built before judges) simply has no judge scores."""

    __tablename__ = "judge_scores"
    __table_args__ = (UniqueConstraint("run_id", "cell_key", "judge_key", "criterion", name="uq_judge_score_once"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("eval_runs.id", ondelete="CASCADE"), index=True)
    cell_key: Mapped[str] = mapped_column(ShortText(512))
    record_id: Mapped[str] = mapped_column(ShortText(255))
    method: Mapped[str] = mapped_column(ShortText(64))
    alpha: Mapped[float | None] = mapped_column(Float)
    beta: Mapped[float | None] = mapped_column(Float)
    criterion: Mapped[str] = mapped_column(ShortText(32))
    judge_key: Mapped[str] = mapped_column(ShortText(320))  # JudgeIdentity.key: kind, model and rubric
    judge_model: Mapped[str] = mapped_column(ShortText(255))
    judge_kind: Mapped[str] = mapped_column(ShortText(16))
    weak: Mapped[bool] = mapped_column(Boolean, default=False)
    rubric: Mapped[str] = mapped_column(ShortText(32))
    score: Mapped[float | None] = mapped_column(Float)
    reason_kind: Mapped[str | None] = mapped_column(ShortText(16))
    reason: Mapped[str | None] = mapped_column(LongText)
    prompt: Mapped[str] = mapped_column(LongText)
    answer: Mapped[str] = mapped_column(LongText, default="")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utc_now)


class JudgeVerdictRow(Base):
    """One judge's verdict on two cells of one record shown in one order (first as A), on one criterion:
    "first", "second" or "tie", or none where ``reason_kind`` says why. Both orders of a pair are two rows."""

    __tablename__ = "judge_verdicts"
    __table_args__ = (
        UniqueConstraint("run_id", "first_key", "second_key", "judge_key", "criterion", name="uq_judge_verdict_once"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("eval_runs.id", ondelete="CASCADE"), index=True)
    record_id: Mapped[str] = mapped_column(ShortText(255))
    first_key: Mapped[str] = mapped_column(ShortText(512))
    second_key: Mapped[str] = mapped_column(ShortText(512))
    first: Mapped[dict[str, Any]] = mapped_column(JSON)  # the grid point: {"method", "alpha", "beta"}
    second: Mapped[dict[str, Any]] = mapped_column(JSON)
    criterion: Mapped[str] = mapped_column(ShortText(32))
    judge_key: Mapped[str] = mapped_column(ShortText(320))
    judge_model: Mapped[str] = mapped_column(ShortText(255))
    judge_kind: Mapped[str] = mapped_column(ShortText(16))
    weak: Mapped[bool] = mapped_column(Boolean, default=False)
    rubric: Mapped[str] = mapped_column(ShortText(32))
    winner: Mapped[str | None] = mapped_column(ShortText(8))
    reason_kind: Mapped[str | None] = mapped_column(ShortText(16))
    reason: Mapped[str | None] = mapped_column(LongText)
    prompt: Mapped[str] = mapped_column(LongText)
    answer: Mapped[str] = mapped_column(LongText, default="")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utc_now)
