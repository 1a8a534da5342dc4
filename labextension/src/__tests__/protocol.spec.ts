/**
 * The shared fixtures (tests/protocol_fixtures/*.json) against the TypeScript guards; the
 * Python tests check the same files against kerasmagic/live/protocol.py.
 */
import * as fs from 'fs';
import * as path from 'path';
import { FIXTURE_DIR, readFixture } from './fixtures';

import {
  isCompatible,
  majorOf,
  METHODS,
  PROTOCOL_VERSION,
  TARGET_NAME,
  validate
} from '../protocol';

interface IFixture {
  direction: 'to_kernel' | 'to_frontend';
  valid: boolean;
  data: unknown;
  metadata?: { protocol_version: string };
}

const fixtures: Array<[string, IFixture]> = fs
  .readdirSync(FIXTURE_DIR)
  .filter(name => name.endsWith('.json'))
  .sort()
  .map(name => [name, readFixture(name)]);

describe('protocol fixtures', () => {
  it('exist for every method of both directions', () => {
    const seen = new Set(fixtures.map(([, f]) => (f.data as any)?.method));
    for (const method of [...METHODS.to_kernel, ...METHODS.to_frontend]) {
      expect(seen).toContain(method);
    }
  });

  it.each(fixtures)('%s', (name, fixture) => {
    const result = validate(fixture.data, fixture.direction);
    expect(result.ok).toBe(fixture.valid);
    if (fixture.metadata) {
      expect(isCompatible(fixture.metadata.protocol_version)).toBe(true);
    }
  });

  it('match the Python side on the error code of invalid messages', () => {
    expect(validate('nope', 'to_kernel')).toMatchObject({
      ok: false,
      code: 'bad_message'
    });
    expect(validate({ method: 'explode' }, 'to_kernel')).toMatchObject({
      ok: false,
      code: 'unknown_method'
    });
  });
});

describe('protocol version', () => {
  it('is shared with the kernel', () => {
    const python = fs.readFileSync(
      path.resolve(
        __dirname,
        '..',
        '..',
        '..',
        'kerasmagic',
        'live',
        'protocol.py'
      ),
      'utf8'
    );
    expect(python).toContain(`PROTOCOL_VERSION = "${PROTOCOL_VERSION}"`);
    expect(python).toContain(`TARGET_NAME = "${TARGET_NAME}"`);
  });

  it('accepts the same major and refuses others', () => {
    expect(isCompatible('1.7.2')).toBe(true);
    for (const bad of ['2.0.0', '0.9.0', 'garbage', undefined, 1]) {
      expect(isCompatible(bad)).toBe(false);
    }
    expect(majorOf('12.0.1')).toBe(12);
  });
});
