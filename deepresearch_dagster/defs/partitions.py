"""One dynamic partition per research request."""

from dagster import DagsterInstance, DynamicPartitionsDefinition

RESEARCH_PARTITIONS_NAME = "research"
research_partitions = DynamicPartitionsDefinition(name=RESEARCH_PARTITIONS_NAME)


def ensure_partition(instance: DagsterInstance, partition_key: str) -> None:
    """Add the partition unless it exists (the CLI, schedules and replays register their own)."""
    if not instance.has_dynamic_partition(RESEARCH_PARTITIONS_NAME, partition_key):
        instance.add_dynamic_partitions(RESEARCH_PARTITIONS_NAME, [partition_key])
