/**
 * Number formatting for the sidebar. Units are IEC (1 MiB = 1024² bytes) because the
 * allocator and RSS numbers are page/chunk multiples and users compare them with `free -h`.
 */

const UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];

/** `formatBytes(1536)` → `"1.5 KiB"`; negative values keep their sign (for deltas). */
export function formatBytes(bytes: number): string {
  if (!Number.isFinite(bytes)) {
    return '–';
  }
  const sign = bytes < 0 ? '−' : '';
  let value = Math.abs(bytes);
  let unit = 0;
  while (value >= 1024 && unit < UNITS.length - 1) {
    value /= 1024;
    unit += 1;
  }
  const digits = unit === 0 ? 0 : value >= 100 ? 0 : value >= 10 ? 1 : 2;
  return `${sign}${value.toFixed(digits)} ${UNITS[unit]}`;
}

/** `formatCount(12345)` → `"12,345"` (locale-independent so tests and screenshots agree). */
export function formatCount(count: number): string {
  if (!Number.isFinite(count)) {
    return '–';
  }
  return Math.round(count)
    .toString()
    .replace(/\B(?=(\d{3})+(?!\d))/g, ',');
}

/** A short duration: `formatSeconds(0.00012)` → `"0.12 ms"`, `formatSeconds(75)` → `"1 min 15 s"`. */
export function formatSeconds(seconds: number): string {
  if (!Number.isFinite(seconds)) {
    return '–';
  }
  if (seconds < 1) {
    return `${(seconds * 1000).toFixed(seconds < 0.01 ? 2 : 0)} ms`;
  }
  if (seconds < 60) {
    return `${seconds.toFixed(seconds < 10 ? 1 : 0)} s`;
  }
  const minutes = Math.floor(seconds / 60);
  const rest = Math.round(seconds - minutes * 60);
  return rest ? `${minutes} min ${rest} s` : `${minutes} min`;
}
