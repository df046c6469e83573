"""Google's original Pub/Sub Group Kafka Connector as a reference for differential tests."""
