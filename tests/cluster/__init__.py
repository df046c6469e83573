"""Connector end-to-end tests on a local Spark standalone cluster (one master, two workers).

A package (unlike ``tests/e2e``) so that its helper modules are imported as ``cluster.*`` only,
whatever directory pytest puts on ``sys.path``.
"""
