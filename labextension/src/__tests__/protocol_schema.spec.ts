/**
 * The one schema of the wire (kerasmagic/live/protocol.schema.json): the generated types are
 * current, and the guards in protocol.ts know exactly its methods.
 */
import { spawnSync } from 'child_process';
import * as fs from 'fs';
import * as path from 'path';

import { METHODS, PROTOCOL_VERSION } from '../protocol';

// `jlpm gen:protocol`'s script, run as it is (prettier, which it formats with, loads its
// plugins by dynamic import, which jest's module system refuses).
const GENERATOR = path.resolve(
  __dirname,
  '..',
  '..',
  'scripts',
  'gen-protocol.js'
);

const SCHEMA = JSON.parse(
  fs.readFileSync(
    path.resolve(
      __dirname,
      '..',
      '..',
      '..',
      'kerasmagic',
      'live',
      'protocol.schema.json'
    ),
    'utf8'
  )
);

/** The `method` constants of one direction's union in the schema. */
function schemaMethods(union: string): string[] {
  return SCHEMA.$defs[union].anyOf
    .map((ref: { $ref: string }) => ref.$ref.split('/').pop() as string)
    .map((name: string) => SCHEMA.$defs[name].properties.method.const)
    .sort();
}

describe('the protocol schema', () => {
  it('has generated protocol.generated.ts as committed (else: jlpm gen:protocol)', () => {
    const check = spawnSync(process.execPath, [GENERATOR, '--check'], {
      encoding: 'utf8',
      timeout: 60000
    });
    expect(check.stderr).toBe('');
    expect(check.status).toBe(0);
  });

  it('is of this protocol version', () => {
    expect(SCHEMA['x-protocol-version']).toBe(PROTOCOL_VERSION);
  });

  it('names the methods the guards check, in both directions', () => {
    expect([...METHODS.to_kernel].sort()).toEqual(
      schemaMethods('FrontendMessage')
    );
    expect([...METHODS.to_frontend].sort()).toEqual(
      schemaMethods('KernelMessage')
    );
  });
});
