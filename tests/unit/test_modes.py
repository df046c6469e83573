"""The bookkeeping of ``pipeline.mode`` hand-overs (``pipelines/modes.py``): which mode owns a
connector's position, and where a staged ``convert`` starts after the fused mode ran. The hand-overs
themselves run end to end in ``e2e/test_cps_sink_fused.py``."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from pubsub_connect.config import loader as cfg
from pubsub_connect.io.tables import BRONZE, TableRef, checkpoint_location
from pubsub_connect.pipelines import modes
from pubsub_connect.pipelines.context import ConnectorError
from pubsub_connect.pipelines.runner.failures import is_transient

NAME = "c"


@pytest.fixture
def ctx(tmp_path: Path) -> Any:
    """Just what the bookkeeping reads of a context: where the checkpoints are, and which tables
    exist (``store.tables``: their ``TableRef`` s)."""
    tables: set[TableRef] = set()
    return SimpleNamespace(store=SimpleNamespace(
        checkpoint=lambda name, stage: checkpoint_location(str(tmp_path), name, stage),
        exists=lambda table: table in tables, tables=tables))


@pytest.fixture
def config() -> cfg.ConnectorConfig:
    return cfg.validate_connector({"name": NAME, "connector.class": "cps-sink", "topics": "t", "cps.project": "p",
                                   "cps.topic": "t"})


def planned(tmp_path: Path, stage: str) -> None:
    """A checkpoint that has planned its first micro-batch."""
    (tmp_path / "checkpoints" / NAME / stage / "offsets").mkdir(parents=True)
    (tmp_path / "checkpoints" / NAME / stage / "offsets" / "0").write_text("v1\n{}\n{}\n")


def recorded(tmp_path: Path, name: str, value: dict[str, object]) -> None:
    (tmp_path / "checkpoints" / NAME).mkdir(parents=True, exist_ok=True)
    (tmp_path / "checkpoints" / NAME / name).write_text(json.dumps(value))


def test_the_mode_that_owns_the_position(ctx: Any, config: cfg.ConnectorConfig, tmp_path: Path) -> None:
    assert modes.last_mode(ctx, config) is None  # a new connector
    planned(tmp_path, "ingest")
    assert modes.last_mode(ctx, config) == "staged"  # ran before modes were recorded
    recorded(tmp_path, "mode.json", {"mode": "fused"})
    assert modes.last_mode(ctx, config) == "fused"


def test_a_source_that_only_pulled_ran_staged(ctx: Any, config: cfg.ConnectorConfig) -> None:
    """A Cloud Pub/Sub source's staged ``pull`` keeps no checkpoint: its bronze table is what
    says it ran (the fused mode then lets convert and produce finish it first)."""
    assert modes.last_mode(ctx, config) is None
    ctx.store.tables.add(TableRef(BRONZE, NAME))
    assert modes.last_mode(ctx, config) == "staged"


def test_a_staged_convert_waits_while_the_fused_mode_owns_the_position(
        ctx: Any, config: cfg.ConnectorConfig, tmp_path: Path) -> None:
    recorded(tmp_path, "mode.json", {"mode": "fused"})
    with pytest.raises(modes.HandOverPendingError) as err:
        modes.convert_start(ctx, config)
    assert str(err.value) == "c: pipeline.mode=staged: waiting for the ingest stage to take over from " \
                             "pipeline.mode=fused"
    assert is_transient(err.value)  # restarted with back-off, not a stop


def test_a_convert_starts_at_the_hand_over_until_it_has_a_checkpoint(
        ctx: Any, config: cfg.ConnectorConfig, tmp_path: Path) -> None:
    assert modes.convert_start(ctx, config) is None  # a new connector reads bronze from its start
    recorded(tmp_path, "mode.json", {"mode": "staged"})
    recorded(tmp_path, "convert.start.json", {"starting_version": 17})
    assert modes.convert_start(ctx, config) == 17
    planned(tmp_path, "convert")
    assert modes.convert_start(ctx, config) is None  # its own position from now on
    assert not (tmp_path / "checkpoints" / NAME / "convert.start.json").exists()


def test_checkpoints_at_a_url_keep_the_staged_mode_as_it_was_and_refuse_the_fused_one(
        config: cfg.ConnectorConfig) -> None:
    remote = SimpleNamespace(store=SimpleNamespace(checkpoint=lambda name, stage: checkpoint_location(
        "abfss://c@a.dfs.core.windows.net/root", name, stage)))
    assert modes.convert_start(remote, config) is None
    modes.hand_back_to_staged(remote, config, fused=lambda ctx, config: pytest.fail("no hand-back without files"))
    with pytest.raises(ConnectorError) as err:
        modes.take_over_from_staged(remote, config, drain=())
    assert str(err.value) == (
        "c: pipeline.mode=fused needs its checkpoints at a path (storage.root a local folder, /Volumes or /dbfs), "
        "not at abfss://c@a.dfs.core.windows.net/root/checkpoints/c/: the hand-over between the modes keeps its "
        "files there")
