"""One ``GraphArtifacts`` per graph hash for the whole session.

A cache hit in any cell points at the artifacts of the compile it reused, so a loop of 10,000 cached
steps shares one object. Later work adds an LRU cap here (long sessions).
"""

from __future__ import annotations

from .dumps import CompiledModule
from .records import GraphArtifacts


class ArtifactStore:
    def __init__(self):
        self._by_hash: dict[str, GraphArtifacts] = {}
        # Compiles seen outside %%xla cells wait here until a %%xla step runs their graph, so plain
        # cells do not pay for an analysis nobody may look at.
        self._unanalyzed: dict[str, CompiledModule] = {}

    def get_or_create(self, graph_hash: str, graph_name: str | None) -> GraphArtifacts:
        art = self._by_hash.get(graph_hash)
        if art is None:
            art = self._by_hash[graph_hash] = GraphArtifacts(graph_hash=graph_hash, graph_name=graph_name)
        return art

    def attach_module(self, art: GraphArtifacts, module: CompiledModule, execution_count: int | None) -> None:
        """Record what XLA dumped for the compile of ``art``'s graph."""
        art.hlo_before = module.hlo_before
        art.hlo_after = module.hlo_after
        art.memory_report = module.memory_report
        art.buffer_assignment = module.buffer_assignment
        art.dump_module = module.label
        art.compiled_in = execution_count
        if art.graph_name is None:
            art.graph_name = module.graph_name
        self._unanalyzed.pop(art.graph_hash, None)

    def defer_analysis(self, art: GraphArtifacts, module: CompiledModule) -> None:
        self._unanalyzed[art.graph_hash] = module

    def take_unanalyzed(self, graph_hash: str) -> CompiledModule | None:
        return self._unanalyzed.pop(graph_hash, None)

    def attach_ir(self, art: GraphArtifacts, ir_text: str) -> None:
        """torch_xla's own IR text (IR log on) is preferred over the graph rebuilt from HLO."""
        if art.ir_source != "lazy-ir":
            art.ir_text = ir_text
            art.ir_source = "lazy-ir"

    def get(self, graph_hash: str) -> GraphArtifacts | None:
        return self._by_hash.get(graph_hash)

    def __len__(self) -> int:
        return len(self._by_hash)

    def clear(self) -> None:
        self._by_hash.clear()
        self._unanalyzed.clear()
