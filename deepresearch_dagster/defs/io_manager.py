"""IO manager that owns the deterministic artifact layout of every research stage."""

from __future__ import annotations

from dagster import ConfigurableIOManager, InputContext, MetadataValue, OutputContext
from pydantic import BaseModel

from ..core.models import ToolOutputs
from ..core.pipeline import STAGE_FILES, ArtifactIntegrityError, load_stage, save_stage
from ..core.store.artifacts import ArtifactStore, sha256_bytes


def verify_raw_files(store: ArtifactStore, outputs: ToolOutputs) -> None:
    for call in outputs.calls:
        path = store.resolve_relpath(call.artifact_path)
        if not path.is_file():
            raise ArtifactIntegrityError(f"raw artifact missing: {call.artifact_path}")
        if sha256_bytes(path.read_bytes()) != call.sha256:
            raise ArtifactIntegrityError(f"raw artifact changed since it was recorded: {call.artifact_path}")


class ResearchIOManager(ConfigurableIOManager):
    """``<artifacts_dir>/<partition>/<stage file>``; raw outputs are checked against sha256
    both when the manifest is stored and when it is loaded back."""

    artifacts_dir: str

    def _store(self, partition_key: str) -> ArtifactStore:
        return ArtifactStore(self.artifacts_dir, partition_key)

    def handle_output(self, context: OutputContext, obj: BaseModel) -> None:
        stage = context.asset_key.path[-1]
        store = self._store(context.asset_partition_key)
        if isinstance(obj, ToolOutputs):
            verify_raw_files(store, obj)
        name = save_stage(store, stage, obj)
        context.add_output_metadata({"stored_at": MetadataValue.path(str(store.partition_dir / name))})

    def load_input(self, context: InputContext) -> BaseModel:
        stage = context.upstream_output.asset_key.path[-1]
        if stage not in STAGE_FILES:
            raise KeyError(f"ResearchIOManager does not store {stage}")
        store = self._store(context.asset_partition_key)
        value = load_stage(store, stage)
        if isinstance(value, ToolOutputs):
            verify_raw_files(store, value)
        return value
