/**
 * The protocol's JSON fixtures (tests/protocol_fixtures/), shared with the Python tests.
 */
import * as fs from 'fs';
import * as path from 'path';

export const FIXTURE_DIR = path.resolve(
  __dirname,
  '..',
  '..',
  '..',
  'tests',
  'protocol_fixtures'
);

/** A fixture file as stored: `{description, direction, data}`. */
export function readFixture(name: string): any {
  const file = name.endsWith('.json') ? name : `${name}.json`;
  return JSON.parse(fs.readFileSync(path.join(FIXTURE_DIR, file), 'utf8'));
}
