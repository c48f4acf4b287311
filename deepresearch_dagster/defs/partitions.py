"""One dynamic partition per research request."""

from dagster import DynamicPartitionsDefinition

RESEARCH_PARTITIONS_NAME = "research"
research_partitions = DynamicPartitionsDefinition(name=RESEARCH_PARTITIONS_NAME)
