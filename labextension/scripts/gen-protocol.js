// Writes labextension/src/protocol.generated.ts from kerasmagic/live/protocol.schema.json, the
// one definition of the live protocol's messages (`jlpm gen:protocol`). With --check it writes
// nothing and fails when the committed file is stale (`jlpm lint:check`, and a jest spec).
const fs = require('fs');
const path = require('path');

const ROOT = path.resolve(__dirname, '..', '..');
const SCHEMA = path.join(ROOT, 'kerasmagic', 'live', 'protocol.schema.json');
const TARGET = path.join(ROOT, 'labextension', 'src', 'protocol.generated.ts');

const BANNER = `/**
 * The live protocol's messages, generated from kerasmagic/live/protocol.schema.json by
 * \`jlpm gen:protocol\`: do not edit (a test fails when this file is stale).
 */`;

/** The TypeScript types for the schema's messages. */
async function generate() {
  const { compile } = require('json-schema-to-typescript');
  const schema = JSON.parse(fs.readFileSync(SCHEMA, 'utf8'));
  const types = await compile(schema, 'LiveProtocol', {
    bannerComment: BANNER,
    // On the wire a newer minor may add fields (the schema allows them); a type names only
    // the fields this version knows.
    additionalProperties: false,
    format: false
  });
  // Formatted as `jlpm prettier` formats the rest of the sources (package.json's config).
  const prettier = require('prettier');
  const options = await prettier.resolveConfig(TARGET);
  return prettier.format(types, { ...options, filepath: TARGET });
}

async function main() {
  const text = await generate();
  if (process.argv.includes('--check')) {
    const current = fs.existsSync(TARGET)
      ? fs.readFileSync(TARGET, 'utf8')
      : '';
    if (current !== text) {
      console.error(
        `${path.relative(ROOT, TARGET)} is stale: run \`jlpm gen:protocol\` and commit it`
      );
      process.exit(1);
    }
    return;
  }
  fs.writeFileSync(TARGET, text);
}

if (require.main === module) {
  main().catch(error => {
    console.error(error);
    process.exit(1);
  });
}
