"""Tables under three-level names, as the jobs name them on Databricks (``storage.catalog`` and
``storage.schema``: ``<catalog>.<schema>.<kind>_<connector>``), through Spark's catalog API.

No Unity Catalog server runs here (Maven Central, as this machine reaches it, serves neither the
open-source server nor its Spark catalog), so the catalog is Spark's own session catalog with Delta
Lake's catalog behind it: the calls the store makes (``saveAsTable``, ``read.table``,
``tableExists``, ``DESCRIBE HISTORY``/``DETAIL`` of a three-level name) are the same ones it makes on
Unity Catalog, on every supported Spark line.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from pyspark.sql.types import LongType, StringType, StructField, StructType

from pubsub_connect.io.tables import BRONZE, SparkDeltaTableStore, TableRef

SCHEMA = StructType([StructField("seq", LongType()), StructField("value", StringType())])


def test_three_level_names_create_append_once_and_read(spark: Any, tmp_path: Path) -> None:
    schema = f"pc_{uuid.uuid4().hex[:10]}"
    spark.sql(f"CREATE SCHEMA spark_catalog.{schema} LOCATION '{tmp_path / 'schema'}'")
    try:
        store = SparkDeltaTableStore(spark, str(tmp_path / "root"), catalog="spark_catalog", schema=schema)
        table = TableRef(BRONZE, "orders.eu-west")
        assert store.table_name(table) == f"`spark_catalog`.`{schema}`.`bronze_orders_eu_west`"
        assert store.exists(table) is False

        store.ensure(table, SCHEMA)
        assert spark.catalog.tableExists(f"spark_catalog.{schema}.bronze_orders_eu_west")
        assert store.exists(table) is True
        assert store.location(table) == f"file:{tmp_path / 'schema' / 'bronze_orders_eu_west'}"
        assert store.row_count(table) == 0
        properties = dict(spark.sql(f"SHOW TBLPROPERTIES {store.table_name(table)}").collect())
        assert properties["delta.checkpointInterval"] == "100"  # the stage tables' properties

        first = spark.createDataFrame([(1, "a"), (2, "b")], SCHEMA)
        assert store.append_batch(table, first, "orders/ingest", 0) is True
        store_after_restart = SparkDeltaTableStore(spark, str(tmp_path / "root"), catalog="spark_catalog",
                                                   schema=schema)
        assert store_after_restart.append_batch(table, first, "orders/ingest", 0) is False  # a replay
        assert store_after_restart.append_batch(table, spark.createDataFrame([(3, "c")], SCHEMA),
                                                "orders/ingest", 1) is True
        assert store_after_restart.committed_version(table, "orders/ingest") == 1
        assert sorted(tuple(r) for r in store_after_restart.read(table).collect()) == [(1, "a"), (2, "b"), (3, "c")]
        assert not (tmp_path / "root").exists()  # a catalog table keeps nothing under the storage root
    finally:
        spark.sql(f"DROP SCHEMA IF EXISTS spark_catalog.{schema} CASCADE")
