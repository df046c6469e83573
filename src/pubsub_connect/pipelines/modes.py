"""Switching a connector between ``pipeline.mode`` staged and fused: no gap, and no record
published again beyond the at-least-once window of one replayed micro-batch.

A sink's two modes read Kafka on the same checkpoint (the ``ingest`` stage's: the connector's Connect
offsets, and the app id of its bronze appends), so the Kafka position and bronze's exactly-once
marks carry over by themselves. What does not carry over is the work between the stages:

- **staged → fused.** Bronze may hold records that ``convert`` or ``publish`` has not handled
  yet. The fused query starts only after both have run to the end of their input
  (:func:`take_over_from_staged`); from then on it converts and publishes its own batches.
- **fused → staged.** ``convert``'s checkpoint is behind: the fused query published the records
  it appended to bronze meanwhile. Before the staged ``ingest`` starts, the fused query runs to
  the end of what Kafka holds, which completes a batch a crash cut short; ``convert`` then starts
  afresh at a version of bronze committed for it (a note without data: a stream can only start at
  a version that exists), so everything before is behind it and every later append ahead of it
  (:func:`hand_back_to_staged`, :func:`convert_start`).

The mode that last owned the position is kept beside the checkpoints (``mode.json``), and is
written only once a hand-over has finished, so a hand-over cut short is done again at the next
start. Checkpoints at a URL (``abfss://…``) have no such files: there the staged mode runs as it
always did, and the fused mode refuses to start in one line (a path — a local folder, a
``/Volumes`` or ``/dbfs`` mount — is what it needs).

The Cloud Pub/Sub source hands over the same way, its ``pull`` stage in the place of ``ingest``
and the subscription in the place of Kafka: the fused source pulls until the subscription is idle
before ``pull`` starts (:mod:`.fused_source` says how it keeps Kafka free of duplicates).

A stage of the staged mode that starts while the last mode is still fused (a Databricks job's
``convert`` task starting before its ``ingest`` task has taken over) waits, as after a transient
failure, until the hand-over is done.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from pubsub_connect.config.loader import ConnectorConfig
from pubsub_connect.io import checkpoints
from pubsub_connect.io.tables import BRONZE, TableRef, TableStore
from pubsub_connect.pipelines.context import ConnectorError, PipelineContext, StageFn, run_closers

if TYPE_CHECKING:
    from pathlib import Path

STAGED, FUSED = "staged", "fused"

#: Beside the connector's checkpoints: the mode that last owned its position.
MODE_FILE = "mode.json"

#: The stage whose checkpoint is a sink's Kafka position in either mode (its folder holds
#: :data:`MODE_FILE` for every connector).
POSITION_STAGE = "ingest"


class HandOverPendingError(RuntimeError):
    """A staged stage started before its connector's hand-over from the fused mode was done: a
    transient failure (:mod:`~pubsub_connect.pipelines.runner.failures`), retried with back-off."""


def _mode_file(ctx: PipelineContext, config: ConnectorConfig) -> Path:
    return checkpoints.beside(ctx.store.checkpoint(config.name, POSITION_STAGE), MODE_FILE)


def _convert_start_file(ctx: PipelineContext, config: ConnectorConfig) -> Path:
    return checkpoints.beside(ctx.store.checkpoint(config.name, POSITION_STAGE), "convert.start.json")


def _bookkept(ctx: PipelineContext, config: ConnectorConfig) -> bool:
    """Whether the connector's hand-over files can be kept: its checkpoints are at a path."""
    return not checkpoints.is_remote(ctx.store.checkpoint(config.name, POSITION_STAGE))


def last_mode(ctx: PipelineContext, config: ConnectorConfig) -> str | None:
    """The mode that last owned the connector's position (:func:`stored_mode`)."""
    return stored_mode(ctx.store, config.name)


def stored_mode(store: TableStore, name: str) -> str | None:
    """The mode that last owned connector ``name``'s position: ``mode.json``, else staged when the
    connector ran before modes existed (its Kafka position, its convert checkpoint or its bronze
    table exists: a source that only pulled has the last alone), else None (a new connector)."""
    recorded = checkpoints.read_json(checkpoints.beside(store.checkpoint(name, POSITION_STAGE), MODE_FILE))
    if recorded is not None:
        return str(recorded["mode"])
    ran = (any(checkpoints.exists(store.checkpoint(name, stage)) for stage in (POSITION_STAGE, "convert"))
           or store.exists(TableRef(BRONZE, name)))
    return STAGED if ran else None


def _record_mode(ctx: PipelineContext, config: ConnectorConfig, mode: str) -> None:
    checkpoints.write_json(_mode_file(ctx, config), {"mode": mode})


def run_to_end(ctx: PipelineContext, config: ConnectorConfig, start: StageFn) -> None:
    """Run a stage over what its input holds now (trigger ``availableNow``) and wait for it; its
    failure is raised, its cleanups run."""
    once = dataclasses.replace(ctx, once=True)
    cleanups: list = []
    try:
        with ctx.cleanups_owned_by(cleanups):
            query = start(once, config)
        query.awaitTermination()
    finally:
        run_closers(cleanups)


def take_over_from_staged(ctx: PipelineContext, config: ConnectorConfig, drain: Sequence[StageFn],
                          drained: str = "convert and publish", then: Callable[[], None] | None = None) -> None:
    """Before a fused query starts: when the staged mode owned the position, its later stages
    (``drain``, named ``drained``: a sink's convert and publish, a source's convert and produce)
    first run to the end of what bronze holds, and ``then`` is called before the fused mode is
    recorded as the owner (a source carries what its staged mode produced over to the fused one)."""
    if not _bookkept(ctx, config):
        raise ConnectorError(f"{config.name}: pipeline.mode=fused needs its checkpoints at a path (storage.root "
                             f"a local folder, /Volumes or /dbfs), not at {ctx.store.checkpoint(config.name, '')}: "
                             "the hand-over between the modes keeps its files there")
    if last_mode(ctx, config) == STAGED:
        ctx.progress(f"[{config.name}.{FUSED}] taking over from pipeline.mode=staged: {drained} finish "
                     "what bronze holds first")
        for start in drain:
            run_to_end(ctx, config, start)
        if then is not None:
            then()
    _record_mode(ctx, config, FUSED)


def hand_back_to_staged(ctx: PipelineContext, config: ConnectorConfig, fused: StageFn,
                        first_stage: str = POSITION_STAGE, source: str = "Kafka") -> None:
    """Before the staged ``first_stage`` (a sink's ``ingest``, a source's ``pull``) starts: when
    the fused mode owned the position, the fused query runs to the end of what ``source`` holds,
    then ``convert`` is set to start at a version of bronze committed for it (its old checkpoint,
    from before the fused run, is removed)."""
    if not _bookkept(ctx, config):
        return  # no fused mode without the files (see take_over_from_staged)
    mode = last_mode(ctx, config)
    if mode == FUSED:
        ctx.progress(f"[{config.name}.{first_stage}] taking over from pipeline.mode=fused: the fused query "
                     f"finishes what {source} holds first")
        run_to_end(ctx, config, fused)
        start = ctx.store.commit_note(TableRef(BRONZE, config.name),
                                      "pipeline.mode fused -> staged: convert starts at this version")
        checkpoints.write_json(_convert_start_file(ctx, config), {"starting_version": start})
        checkpoints.remove(ctx.store.checkpoint(config.name, "convert"))
    if mode != STAGED:
        _record_mode(ctx, config, STAGED)


def convert_start(ctx: PipelineContext, config: ConnectorConfig, first_stage: str = POSITION_STAGE) -> int | None:
    """The bronze version a staged ``convert`` without a checkpoint starts at after a hand-back
    from the fused mode, else None (its checkpoint decides, or a new connector reads bronze from
    its start). Raises :class:`HandOverPendingError` while the fused mode still owns the position."""
    if not _bookkept(ctx, config):
        return None
    if last_mode(ctx, config) == FUSED:
        raise HandOverPendingError(f"{config.name}: pipeline.mode=staged: waiting for the {first_stage} stage to "
                                   "take over from pipeline.mode=fused")
    start_file = _convert_start_file(ctx, config)
    if checkpoints.exists(ctx.store.checkpoint(config.name, "convert")):
        start_file.unlink(missing_ok=True)  # the checkpoint has its own position since
        return None
    start = checkpoints.read_json(start_file)
    return None if start is None else int(start["starting_version"])
