#!/usr/bin/env node
// Writes src/schema.ts, the types of the om API, from the server's OpenAPI document.
//
//   npm run generate                      the document of this checkout's server code (built in-process
//                                         by the repository's Python, .venv/bin/python or $OM_PYTHON)
//   npm run generate -- --from URL|FILE   a running server's /openapi.json, or a saved document
//   npm run generate -- --out FILE        write elsewhere (tests compare that with the committed file)
//
// The output depends only on the document and the pinned openapi-typescript version (package-lock.json).
import { spawnSync } from "node:child_process";
import { readFileSync, writeFileSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import openapiTS, { astToString } from "openapi-typescript";

const here = dirname(fileURLToPath(import.meta.url));
const packageDir = resolve(here, "..");
const repo = resolve(packageDir, "..", "..");

export const HEADER = `/**
 * The om API's types, generated from the server's OpenAPI document by openapi-typescript.
 * Do not edit: regenerate with \`npm run generate\` in clients/typescript (see its README).
 */

`;

function argument(name) {
  const at = process.argv.indexOf(name);
  return at === -1 ? undefined : process.argv[at + 1];
}

// The app is built without serving: no database connection is opened, the settings only need to parse.
const DUMP = `
import json, sys
from om_api.app import create_app
from om_api.settings import ApiSettings
app = create_app(ApiSettings(auth="keys"))
sys.stdout.write(json.dumps(app.openapi()))
`;

function documentFromCode() {
  const python = process.env.OM_PYTHON || join(repo, ".venv", "bin", "python");
  const scratch = mkdtempSync(join(tmpdir(), "om-openapi-"));
  try {
    const env = {
      ...process.env,
      OM_DATABASE_URL: `sqlite:///${join(scratch, "om.db")}`,
      LITELLM_LOCAL_MODEL_COST_MAP: "True",
      PYTHONPATH: repo,
    };
    const run = spawnSync(python, ["-c", DUMP], { cwd: repo, env, encoding: "utf8", maxBuffer: 64 << 20 });
    if (run.error || run.status !== 0) {
      const why = run.error ? run.error.message : run.stderr.slice(-3000);
      throw new Error(`could not build the OpenAPI document with ${python} (make install first?):\n${why}`);
    }
    return JSON.parse(run.stdout);
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
}

async function documentFrom(source) {
  if (/^https?:\/\//.test(source)) {
    const response = await fetch(source);
    if (!response.ok) throw new Error(`GET ${source}: ${response.status}`);
    return await response.json();
  }
  return JSON.parse(readFileSync(source, "utf8"));
}

export async function render(document) {
  const ast = await openapiTS(document, { alphabetize: false, silent: true });
  return HEADER + astToString(ast);
}

const source = argument("--from");
const out = resolve(argument("--out") ?? join(packageDir, "src", "schema.ts"));
const document = source ? await documentFrom(source) : documentFromCode();
writeFileSync(out, await render(document));
console.log(`wrote ${out}`);
