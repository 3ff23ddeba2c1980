import type { Artifacts, Graph, GraphNode, PanelModel } from "../src/core/model";

export function node(id: number, extra: Partial<GraphNode> = {}): GraphNode {
  return { id, op: "aten::add", shape: "f32[4]", cell: 1, line: null, code: null, scope: null, kernel: null, ...extra };
}

/** A chain of `n` nodes; scopes / lines assigned by the callbacks. */
export function chain(n: number, f: (i: number) => Partial<GraphNode> = () => ({})): Graph {
  const nodes = Array.from({ length: n }, (_, i) => node(i, f(i)));
  const edges: [number, number][] = [];
  for (let i = 1; i < n; i++) edges.push([i - 1, i]);
  return { name: "g", hash: "h", nodes, edges, roots: [n - 1] };
}

/** A ~5,000-node graph shaped like an unrolled model: 20 layers x 5 lines x 50 ops. */
export function bigGraph(): Graph {
  return chain(5000, (i) => ({ scope: `layer${Math.floor(i / 250)}`, line: 1 + Math.floor((i % 250) / 50), op: i % 2 ? "aten::mul" : "aten::add", kernel: `fusion.${i % 7}` }));
}

/** A graph's record with nothing recorded (as GraphArtifacts(graph_hash=...).to_dict() writes it). */
export function emptyArtifacts(hash: string): Artifacts {
  return { graph_hash: hash, graph_name: null, ir_text: null, ir_source: null, hlo_before: null, hlo_after: null, memory_report: null,
    buffer_assignment: null, dump_module: null, compiled_in: null, fusions: null, memory: null, signature: null, large_constants: null,
    node_info: null, loops: null, spmd: null, compile_profile: null, evicted: false, lean: false, dump_files: null, dump_bytes: null };
}

/** A small whole panel model, as the Python side writes one (the schema's required fields all there). */
export function validModel(): PanelModel {
  const g = chain(3, (i) => ({ line: i + 1, kernel: i === 2 ? "fusion.1" : null }));
  return {
    schema: "xla_lab.panel/1",
    capture: {
      schema: "xla_lab.capture/1", cell_id: "c1", execution_count: 5, source: "a = 1\nb = 2\nc = 3", started_at: 1,
      graph_name: null, wall_s: null, outside_steps: {}, metrics: {}, fallback_ops: {}, error: null, notes: [], profile: null,
      launches: [], advice: [], ranks: [],
      steps: [{ index: 0, graph_name: "g", graph_hash: "h", cache: "miss", sync_cause: "end of cell", sync_line: 3, sync_code: "c = 3",
        timings: { trace_s: null, compile_s: 0.5, execute_s: null, to_device_s: null, from_device_s: null, execution_wait_s: null },
        fallback_ops: {}, recompile_reason: null, saved_s: null }],
      artifacts: { h: { ...emptyArtifacts("h"), graph_name: "g", hlo_before: "HloModule m\n", hlo_after: "HloModule m\n",
        fusions: [{ name: "fusion.1", kind: "kLoop", computation: "main", members: ["add.1"], aten_ops: ["aten::add"], lines: [{ cell: 5, line: 3, code: "c = 3" }], sources: [], shape: "f32[4]", flops: 4, bytes: 32 }],
        memory: { peak_bytes: 100, largest: [] } } },
    },
    summary: { steps: 1, compiles: 1, cache_hits: 0, precompiled: 0, trace_s: 0, compile_s: 0.5, execute_s: 0, transfer_s: 0, execution_wait_s: 0,
      recompiles: [], warnings: [], ranks: [],
      rows: [{ steps: "0", first: 0, last: 0, count: 1, cache: "miss", cause: "end of cell", ref: { cell: 5, line: 3, file: null, code: "c = 3", function: null },
        graph: "h", compile_s: 0.5, execute_s: null, trace_s: null, text: "0 | miss | end of cell @ [5]:3: c = 3" }] },
    main_graph: "h",
    graphs: { h: g },
    source_lines: [{ line: 1, code: "a = 1", kernels: [] }, { line: 3, code: "c = 3", kernels: ["fusion.1"] }],
    model_files: [],
    runs: [{ execution_count: 5, started_at: 1, steps: [{ index: 0, cache: "miss", trace_s: 0.1, compile_s: 0.5, execute_s: 0.01, transfer_s: null, execution_wait_s: null }] }],
    profile: null,
    compile: [],
    partial: false,
  };
}
