"""The connectors as Lakeflow Declarative Pipelines (``pyspark.pipelines``): the datasets
(:mod:`.datasets`), how a pipeline names its connector (:mod:`.conf`), the source file a
pipeline loads (``definitions.py``), and the local runner behind ``pubsub-connect pipeline run``
(:mod:`.local`)."""
