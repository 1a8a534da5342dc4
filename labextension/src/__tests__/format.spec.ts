import { formatBytes, formatCount, formatSeconds } from '../format';

describe('formatBytes', () => {
  it.each([
    [0, '0 B'],
    [1023, '1023 B'],
    [1536, '1.50 KiB'],
    [734003200, '700 MiB'],
    [5368709120, '5.00 GiB'],
    [15 * 1024 * 1024, '15.0 MiB'],
    [NaN, '–']
  ])('%p → %p', (bytes, text) => {
    expect(formatBytes(bytes)).toBe(text);
  });
});

describe('other formatters', () => {
  it('counts with separators', () => {
    expect(formatCount(14762)).toBe('14,762');
    expect(formatCount(7)).toBe('7');
  });

  it('durations', () => {
    expect(formatSeconds(0.00012)).toBe('0.12 ms');
    expect(formatSeconds(0.25)).toBe('250 ms');
    expect(formatSeconds(1)).toBe('1.0 s');
    expect(formatSeconds(75)).toBe('1 min 15 s');
    expect(formatSeconds(120)).toBe('2 min');
  });
});
