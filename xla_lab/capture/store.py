"""One ``GraphArtifacts`` per graph hash for the whole session, with an LRU cap.

A cache hit in any cell points at the artifacts of the compile it reused, so a loop of 10,000 cached
steps shares one object. A long session compiles many graphs and the text of each (HLO before and
after optimization, buffer assignment, the graph rebuilt from the HLO) can be megabytes, so the store
keeps the text of the most recently used graphs only: at most ``max_graphs`` graphs and
``max_bytes`` bytes of stored text (``XLA_LAB_MAX_GRAPHS``, default 200, and
``XLA_LAB_MAX_GRAPH_MB``, default 256, from ``xla_lab.settings``; ``0`` means no cap).
Evicting a graph drops its text and analysis; captures that ran it keep their steps, timings and
memory summary, and show :data:`EVICTED` where the HLO was.
"""

from __future__ import annotations

from collections import OrderedDict

from xla_lab import settings

from .dumps import CompiledModule
from .records import GraphArtifacts

EVICTED = ("(evicted to bound memory: xla_lab keeps the text of the most recently used graphs only; "
           "set XLA_LAB_MAX_GRAPHS / XLA_LAB_MAX_GRAPH_MB before %load_ext xla_lab to keep more)")
_TEXT_FIELDS = ("ir_text", "hlo_before", "hlo_after", "memory_report", "buffer_assignment")
# Evicted graphs keep a small stub (hash, name, memory summary) so captures and later cache hits can
# say what happened; beyond this many stubs per kept graph the oldest stubs are forgotten.
_STUBS_PER_GRAPH = 10


def text_bytes(art: GraphArtifacts) -> int:
    """Characters of stored text of one graph (what the byte cap counts)."""
    return sum(len(getattr(art, f) or "") for f in _TEXT_FIELDS)


class ArtifactStore:
    def __init__(self, max_graphs: int | None = None, max_bytes: int | None = None):
        self.max_graphs = settings.current().max_graphs if max_graphs is None else max_graphs
        self.max_bytes = (settings.current().max_graph_mb << 20) if max_bytes is None else max_bytes
        self.evictions = 0
        # Least recently used first; evicted stubs stay (small) so a later hit still says "evicted".
        self._by_hash: OrderedDict[str, GraphArtifacts] = OrderedDict()
        # Compiles seen outside %%xla cells wait here until a %%xla step runs their graph, so plain
        # cells do not pay for an analysis nobody may look at.
        self._unanalyzed: dict[str, CompiledModule] = {}

    def get_or_create(self, graph_hash: str, graph_name: str | None) -> GraphArtifacts:
        art = self._by_hash.get(graph_hash)
        if art is None:
            art = self._by_hash[graph_hash] = GraphArtifacts(graph_hash=graph_hash, graph_name=graph_name)
        else:
            self._by_hash.move_to_end(graph_hash)
        return art

    def attach_module(self, art: GraphArtifacts, module: CompiledModule, execution_count: int | None) -> None:
        """Record what XLA dumped for the compile of ``art``'s graph."""
        if art.evicted:  # XLA compiled it again (its own cache let it go too): the text is back
            art.evicted = False
            art.ir_text = art.ir_source = None
        art.hlo_before = module.hlo_before
        art.hlo_after = module.hlo_after
        art.memory_report = module.memory_report
        art.buffer_assignment = module.buffer_assignment
        art.dump_module = module.label
        if module.module_proto is None:  # (a dump's: lean capture writes none)
            art.dump_files, art.dump_bytes = module.dump_files, module.dump_bytes
        art.compiled_in = execution_count
        if art.graph_name is None:
            art.graph_name = module.graph_name
        self._unanalyzed.pop(art.graph_hash, None)
        if art.graph_hash in self._by_hash:
            self._by_hash.move_to_end(art.graph_hash)

    def defer_analysis(self, art: GraphArtifacts, module: CompiledModule) -> None:
        self._unanalyzed[art.graph_hash] = module

    def memory_of(self, graph_hash: str) -> dict:
        """A graph's memory summary (``hlo/memory.py``) before it is analysed too: from its buffer
        assignment, the dump's text or (lean capture) the session's; {} for a graph not stored."""
        from xla_lab.hlo.memory import memory_summary

        art = self._by_hash.get(graph_hash)
        if art is None:
            return {}
        if art.memory:
            return art.memory
        module = self._unanalyzed.get(graph_hash)
        if module is not None and module.allocations is not None:
            return memory_summary(None, None, allocations=module.allocations)
        return memory_summary(art.memory_report, art.buffer_assignment)

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

    # --- the cap ---------------------------------------------------------------------------------
    def kept(self) -> list[GraphArtifacts]:
        """Graphs whose text is still stored, least recently used first."""
        return [a for a in self._by_hash.values() if not a.evicted]

    @property
    def max_stubs(self) -> int | None:
        """How many evicted graphs keep a stub (``None``: no graph cap, so no bound)."""
        return _STUBS_PER_GRAPH * self.max_graphs if self.max_graphs else None

    def size_bytes(self) -> int:
        """Stored text of kept graphs plus the dumps of graphs waiting for analysis."""
        return sum(text_bytes(a) for a in self.kept()) + sum(_module_bytes(m) for m in self._unanalyzed.values())

    def trim(self) -> int:
        """Evict least recently used graphs until both caps hold (the most recent one always stays).
        Called after each cell; returns how many graphs were evicted."""
        kept = self.kept()
        sizes = {a.graph_hash: text_bytes(a) + _module_bytes(self._unanalyzed.get(a.graph_hash))
                 for a in kept}
        total = sum(sizes.values())
        evicted = 0
        for art in kept[:-1]:
            over_count = self.max_graphs and len(kept) - evicted > self.max_graphs
            over_bytes = self.max_bytes and total > self.max_bytes
            if not (over_count or over_bytes):
                break
            total -= sizes[art.graph_hash]
            self._evict(art)
            evicted += 1
        # Forget the oldest stubs beyond a bound, and analyses waiting for graphs no longer stored.
        stubs = [h for h, a in self._by_hash.items() if a.evicted]
        limit = self.max_stubs
        if limit is not None and len(stubs) > limit:
            for h in stubs[:len(stubs) - limit]:
                del self._by_hash[h]
        for h in [h for h in self._unanalyzed if h not in self._by_hash or self._by_hash[h].evicted]:
            del self._unanalyzed[h]
        self.evictions += evicted
        return evicted

    def _evict(self, art: GraphArtifacts) -> None:
        art.evicted = True
        for f in _TEXT_FIELDS:
            setattr(art, f, None)
        art.ir_source = None
        art.hlo_before = art.hlo_after = EVICTED
        art.fusions = art.node_info = art.signature = art.loops = None  # art.memory (a small summary) stays
        self._unanalyzed.pop(art.graph_hash, None)

    def clear(self) -> None:
        self._by_hash.clear()
        self._unanalyzed.clear()


def _module_bytes(module: CompiledModule | None) -> int:
    if module is None:
        return 0
    return sum(len(getattr(module, f) or b"") for f in
               ("hlo_before", "hlo_after", "memory_report", "buffer_assignment", "proto_before"))
