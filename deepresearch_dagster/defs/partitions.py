"""One dynamic partition per research request, and one per evaluation (suite × configuration)."""

from dagster import DagsterInstance, DynamicPartitionsDefinition

RESEARCH_PARTITIONS_NAME = "research"
research_partitions = DynamicPartitionsDefinition(name=RESEARCH_PARTITIONS_NAME)
EVALUATION_PARTITIONS_NAME = "evaluations"
evaluation_partitions = DynamicPartitionsDefinition(name=EVALUATION_PARTITIONS_NAME)


def ensure_partition(instance: DagsterInstance, partition_key: str, partitions: str = RESEARCH_PARTITIONS_NAME) -> None:
    """Add the partition unless it exists (the CLI, schedules and replays register their own)."""
    if not instance.has_dynamic_partition(partitions, partition_key):
        instance.add_dynamic_partitions(partitions, [partition_key])
