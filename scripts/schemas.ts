/**
 * `npm run schemas`: writes the JSON Schemas generated from the zod validators to schemas/,
 * one file per request plus the job spec, one per reply, the commit and the events. The files
 * are committed and shipped in the package; test/commands/json-schemas.props.test.ts fails when
 * they differ from what this would write.
 */
import { mkdirSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { schemaFileText, shippedSchemas } from '../src/commands/json-schemas.js';

const dir = join(import.meta.dirname, '..', 'schemas');
mkdirSync(dir, { recursive: true });
const schemas = shippedSchemas();
// A schema that is no longer generated must not linger in the package.
for (const file of readdirSync(dir)) if (file.endsWith('.json') && !(file.slice(0, -'.json'.length) in schemas)) rmSync(join(dir, file));
for (const [name, schema] of Object.entries(schemas)) writeFileSync(join(dir, `${name}.json`), schemaFileText(schema));
process.stdout.write(`wrote ${Object.keys(schemas).length} schemas to ${dir}\n`);
