/**
 * What JupyterLab's Gettext does, for the specs that check words: %1, %2 … replaced in order;
 * `_n` picks by n and gives n as %1, its arguments from %2 on.
 */
import { IWording } from '../timeline';

const fill = (msgid: string, args: any[]) =>
  msgid.replace(/%(\d+)/g, (_, n) => String(args[Number(n) - 1]));

export const trans: IWording = {
  __: (msgid: string, ...args: any[]) => fill(msgid, args),
  _n: (one: string, many: string, n: number, ...args: any[]) =>
    fill(n === 1 ? one : many, [n, ...args])
};
