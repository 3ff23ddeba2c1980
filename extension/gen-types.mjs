// The panel model's TypeScript types and the schema its validator reads, generated from the JSON Schema that
// Python writes from its types (../xla_lab/view/panel-1.schema.json, `python -m xla_lab.view.panel_schema`):
// src/core/generated/panel.ts (json-schema-to-typescript) and src/core/generated/schema.ts (the schema,
// without its words, for @cfworker/json-schema, which reads it as data: no code is built at run time).
// Both git-ignored; rewritten only when they change (make's rebuild-when-older rule stays quiet).
import { compile } from "json-schema-to-typescript";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const schema = JSON.parse(readFileSync(join(here, "..", "xla_lab", "view", "panel-1.schema.json"), "utf8"));
const out = join(here, "src", "core", "generated");
const banner = "// Generated from xla_lab/view/panel-1.schema.json by extension/gen-types.mjs: do not edit.\n";

function write(name, text) {
  const path = join(out, name);
  if (existsSync(path) && readFileSync(path, "utf8") === text) return;
  mkdirSync(out, { recursive: true });
  writeFileSync(path, text);
  console.log(`src/core/generated/${name}: written`);
}

// (additionalProperties: false where the schema says nothing, as the records' dataclasses are closed)
write("panel.ts", banner + await compile(schema, "PanelModel", { bannerComment: "", additionalProperties: false }));

// (a schema keyword's title or description is a string; a property of those names would be an object)
const bare = JSON.stringify(schema, (k, v) => ((k === "title" || k === "description") && typeof v === "string" ? undefined : v));
write("schema.ts", `${banner}/** the panel model's JSON Schema (draft 7), for the validator */\nexport const PANEL_JSON_SCHEMA = ${bare};\n`);
