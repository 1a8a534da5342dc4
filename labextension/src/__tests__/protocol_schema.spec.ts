/**
 * The one schema of the wire (kerasmagic/live/protocol.schema.json): the generated types are
 * current, and the guards in protocol.ts know exactly its methods.
 */
import { spawnSync } from 'child_process';
import * as fs from 'fs';
import * as path from 'path';

import { checkedFields, METHODS, PROTOCOL_VERSION } from '../protocol';

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

  it('has the guards check every field the schema gives each message', () => {
    // The hand-written checks once missed three fields the panel reads (memory_limit,
    // custom_gradient_entries, cell_ended_ts): a message field the schema adds must be checked.
    const unions = {
      to_kernel: 'FrontendMessage',
      to_frontend: 'KernelMessage'
    };
    for (const [direction, union] of Object.entries(unions)) {
      for (const ref of SCHEMA.$defs[union].anyOf) {
        const message = SCHEMA.$defs[ref.$ref.split('/').pop()];
        const method = message.properties.method.const;
        const fields = Object.keys(message.properties).filter(
          f => f !== 'method'
        );
        expect([
          direction,
          method,
          checkedFields(direction as any, method).sort()
        ]).toEqual([direction, method, fields.sort()]);
      }
    }
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
