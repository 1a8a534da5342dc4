/**
 * The series table (series.ts): one row per series, from which the history is recorded and
 * the chart's legend is made.
 */
import * as fs from 'fs';
import * as path from 'path';
import { readFixture } from './fixtures';

import { IWording } from '../clearing';
import { SeriesHistory } from '../history';
import { ISample } from '../protocol';
import {
  chartSeries,
  recordFacts,
  recordSample,
  SERIES,
  SERIES_TABLE
} from '../series';

const trans: IWording = {
  __: (msgid: string, ...args: any[]) =>
    msgid.replace(/%(\d+)/g, (_, n) => String(args[Number(n) - 1]))
};

const STYLE = fs
  .readdirSync(path.resolve(__dirname, '..', '..', 'style'))
  .filter(name => name.endsWith('.css'))
  .map(name =>
    fs.readFileSync(path.resolve(__dirname, '..', '..', 'style', name), 'utf8')
  )
  .join('\n');

const last = (history: SeriesHistory, key: string) =>
  history.points(key).slice(-1)[0]?.value;

describe('the series table', () => {
  it('has one row per key, and every key of SERIES a row', () => {
    const keys = SERIES_TABLE.map(row => row.key);
    expect(new Set(keys).size).toBe(keys.length);
    expect([...keys].sort()).toEqual([...Object.values(SERIES)].sort());
  });

  it('gives every charted row a stroke the style sheet draws', () => {
    for (const row of SERIES_TABLE) {
      if (row.chart) {
        expect(STYLE).toContain(`jp-KerasMagic-series-${row.chart.style}`);
      }
    }
  });

  it('records a sample and a facts message through its rows', () => {
    const history = new SeriesHistory(10);
    const sample: ISample = readFixture('sample').data;
    recordSample(history, sample);
    recordFacts(history, readFixture('facts').data);
    expect(last(history, SERIES.rss)).toBe(734003200);
    // TF's CPU allocator: in use 1 MiB, held = in use + held unused (3 MiB).
    expect(last(history, SERIES.tfInUse)).toBe(1048576);
    expect(last(history, SERIES.tfHeld)).toBe(4194304);
    expect(last(history, SERIES.nvmlProcess)).toBeNull();
    expect(last(history, SERIES.customGradients)).toBe(6);
    expect(last(history, SERIES.liveModels)).toBe(1);
  });

  it("makes the chart's legend from its charted rows, in order", () => {
    const specs = chartSeries(trans, readFixture('sample_torch_cached').data);
    expect(specs.map(s => [s.key, s.label, s.unit])).toEqual([
      ['rss', 'Kernel RSS', 'bytes'],
      ['tf_in_use', 'TF in use', 'bytes'],
      ['tf_held', 'TF held', 'bytes'],
      ['nvml_process', 'GPU this kernel (NVML)', 'bytes'],
      ['gpu_allocators_in_use', 'GPU in use (torch)', 'bytes'],
      ['cpu_pct', 'CPU', 'pct'],
      ['custom_gradient_entries', 'CustomGradient entries', 'count']
    ]);
    expect(chartSeries(trans, null)[4].label).toBe('GPU in use (allocators)');
  });
});
