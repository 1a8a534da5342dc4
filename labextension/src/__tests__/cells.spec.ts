/**
 * The leak watch's wording and parsing (cells.ts), on the shared fixture the Python side
 * validates too.
 */
import { readFixture } from './fixtures';
import { trans } from './wording';

import {
  cellLabel,
  detailsText,
  fixParts,
  fixText,
  flaggedCells,
  growthSentence,
  oneRunCells,
  kernelFixText,
  oneRunSentence,
  signedBytes,
  titleText
} from '../cells';
import { codeSegments, evidenceText } from '../evidence';
import { ICellGrowth, ICellSummary, validate } from '../protocol';

/** What nullTranslator does: %1, %2 … replaced in order. */

function fixture(name: string): any {
  return readFixture(name).data;
}

const MESSAGE = fixture('cell_growth.json') as ICellGrowth;

function cell(overrides: Partial<ICellSummary>): ICellSummary {
  return { ...MESSAGE.cells[0], ...overrides };
}

describe('the cell_growth message', () => {
  it('is valid, and the fixture has a flagged and a quiet cell', () => {
    expect(validate(MESSAGE, 'to_frontend').ok).toBe(true);
    expect(MESSAGE.cells.map(c => c.flagged)).toEqual([true, false]);
  });

  it('is refused with a bad cell', () => {
    const bad = { ...MESSAGE, cells: [{ ...MESSAGE.cells[0], streak: '5' }] };
    expect(validate(bad, 'to_frontend').ok).toBe(false);
    const noLast = { ...MESSAGE, cells: [{ ...MESSAGE.cells[1], last: null }] };
    expect(validate(noLast, 'to_frontend').ok).toBe(false);
    const badLine = {
      ...MESSAGE,
      cells: [{ ...MESSAGE.cells[1], first_line: 3 }]
    };
    expect(validate(badLine, 'to_frontend').ok).toBe(false);
  });
});

describe('flaggedCells', () => {
  it('keeps only flagged cells, the largest growth first', () => {
    const small = cell({ key: 'a', growth_per_run_bytes: 2 * 2 ** 20 });
    const big = cell({ key: 'b', growth_per_run_bytes: 50 * 2 ** 20 });
    const quiet = cell({ key: 'c', flagged: false, streak: 1 });
    const message = { ...MESSAGE, cells: [small, quiet, big] };
    expect(flaggedCells(message).map(c => c.key)).toEqual(['b', 'a']);
    expect(flaggedCells(null)).toEqual([]);
  });
});

describe('wording', () => {
  it('says which cell grows by how much per run, as the issue words it', () => {
    expect(growthSentence(MESSAGE.cells[0], trans)).toBe(
      'cell [12] grows 9.60 MiB per run (5 runs)'
    );
    expect(
      growthSentence(
        cell({ execution_count: 3, growth_per_run_bytes: 2101248, streak: 3 }),
        trans
      )
    ).toBe('cell [3] grows 2.00 MiB per run (3 runs)');
    expect(cellLabel(null)).toBe('cell [?]');
  });

  it('gives the fix for each kind of growth', () => {
    expect(fixText('fresh_model', trans)).toBe(
      "Fix: start the cell with %%fresh_model, which frees the previous run's models and dead TensorFlow graphs before it runs."
    );
    expect(fixText('isolate', trans)).toContain(
      'Fix: %%fresh_model --isolate runs the cell in a new process'
    );
    expect(fixParts('isolate', trans)?.code).toBe('%%fresh_model --isolate');
    expect(fixText('keep_models', trans)).toBe(
      'Fix: each run keeps one more Keras model alive (a list of models or of History objects holds them): keep only what you need from each, e.g. history.history, then %%fresh_model frees the rest.'
    );
    expect(fixText(null, trans)).toBe('');
    expect(fixParts('something newer', trans)).toBeNull();
  });

  it('details what grew per run, leaving out what has no number', () => {
    expect(detailsText(MESSAGE.cells[0].per_run, trans)).toBe(
      'RSS +9.60 MiB · TF in use +1.50 MiB · +2 CustomGradient entries'
    );
    expect(
      detailsText(
        {
          rss_bytes: -524288,
          tf_in_use_bytes: 0,
          gpu_bytes: 3 * 2 ** 30,
          custom_gradient_entries: 0.5,
          live_models: 1
        },
        trans
      )
    ).toBe(
      'RSS −512 KiB · TF in use ±0 B · GPU (this kernel) +3.00 GiB · +0.5 CustomGradient entries · +1 Keras models'
    );
    expect(detailsText(null, trans)).toBe('');
    expect(signedBytes(0)).toBe('±0 B');
  });

  it('titles the section, one quiet line when nothing is flagged', () => {
    expect(titleText(MESSAGE, true, '1.2.0', trans)).toBe(
      'Leak watch · 1 cell grows from run to run'
    );
    const two = {
      ...MESSAGE,
      cells: [MESSAGE.cells[0], cell({ key: 'x' })]
    };
    expect(titleText(two, true, '1.2.0', trans)).toBe(
      'Leak watch · 2 cells grow from run to run'
    );
    const none = { ...MESSAGE, cells: [MESSAGE.cells[1]] };
    expect(titleText(none, true, '1.2.0', trans)).toBe(
      'Leak watch: no cell grows from run to run (9 cells watched)'
    );
    expect(
      titleText(fixture('cell_growth_empty.json'), true, '1.2.0', trans)
    ).toBe('Leak watch: no cell has run since %load_ext kerasmagic');
    expect(titleText(null, false, '1.1.0', trans)).toBe(
      "Leak watch: this kernel's kerasmagic is older (protocol 1.1.0) and does not watch cells"
    );
    expect(titleText(null, true, '1.2.0', trans)).toBe(
      'Leak watch: waiting for the kernel'
    );
  });
});

describe('the one-run rule', () => {
  const grewOnce = cell({
    key: 'once',
    flagged: false,
    streak: 0,
    execution_count: 3,
    one_run: {
      execution_count: 3,
      first: true,
      growth_bytes: 201 * 1024 * 1024,
      new_models: 6,
      held_by: ['models'],
      sentence:
        'cell [3] grew +201 MiB and left 6 live models, held by `models`'
    },
    fix_text: 'del models, or %clear_tf models'
  });

  it('names a run that left much behind, not "no cell grows"', () => {
    const message = { ...MESSAGE, cells: [MESSAGE.cells[1], grewOnce] };
    expect(oneRunCells(message)).toEqual([grewOnce]);
    // The kernel's words, as `%tf_mem --cells` prints them (leak_watch.one_run_sentence).
    expect(oneRunSentence(grewOnce)).toBe(
      'cell [3] grew +201 MiB and left 6 live models, held by `models`'
    );
    expect(titleText(message, true, '1.5.0', trans)).toBe(
      'Leak watch · 1 cell left much behind in one run'
    );
  });

  it("has no wording of its own for a run: the kernel's sentence, whatever its figures", () => {
    // Growth under the kernel's noise floor is the kernel's to leave out: the row does not
    // word the figures again (it once had a noise threshold of its own).
    const quiet = cell({
      flagged: false,
      one_run: {
        ...grewOnce.one_run!,
        growth_bytes: 512 * 1024,
        sentence: 'cell [7] left 1 more live model than its previous run'
      }
    });
    expect(oneRunSentence(quiet)).toBe(
      'cell [7] left 1 more live model than its previous run'
    );
  });

  it("shows a flagged cell's sentence in the kernel's words, worded here only for older kernels", () => {
    const said = cell({
      sentence: 'cell [12] grows 9.60 MiB per run (5 runs)'
    });
    expect(growthSentence({ ...said, streak: 99 }, trans)).toBe(
      'cell [12] grows 9.60 MiB per run (5 runs)'
    );
  });

  it('leaves a flagged cell to the run-over-run rule', () => {
    const both = cell({ one_run: grewOnce.one_run });
    expect(oneRunCells({ ...MESSAGE, cells: [both] })).toEqual([]);
  });
});

describe("a row's fix and its evidence", () => {
  const EVIDENCE = fixture('cell_growth_evidence.json') as ICellGrowth;
  const flagged = EVIDENCE.cells[0];

  it("takes the fix in the kernel's words, as `%tf_mem --cells` prints it", () => {
    expect(validate(EVIDENCE, 'to_frontend').ok).toBe(true);
    expect(growthSentence(flagged, trans)).toBe(flagged.sentence);
    expect(oneRunSentence(EVIDENCE.cells[1])).toBe(
      'cell [9] grew +201 MiB and left 6 live models, held by `models`'
    );
    expect(kernelFixText(flagged)).toBe(flagged.fix_text);
    expect(kernelFixText(cell({ fix_text: null }))).toBe('');
    const once = cell({
      flagged: false,
      one_run: {
        execution_count: 3,
        first: true,
        growth_bytes: 2 ** 28,
        new_models: 0,
        held_by: ['a'],
        remedy_text: '`%clear_tf a` frees 256 MiB (measured now).',
        sentence: 'cell [3] grew +256 MiB, held by `a`'
      }
    });
    expect(kernelFixText(once)).toBe(
      '`%clear_tf a` frees 256 MiB (measured now).'
    );
  });

  it('lists what the proven command frees; when and how it was measured on hover', () => {
    const text = evidenceText(
      flagged.evidence!.proof,
      'cell [6]',
      '02:05:47',
      trans
    )!;
    // The figure and the command are the fix line's (the kernel's words): not said twice.
    expect(text.lines).toEqual([
      'What it frees: ndarray[2097152] (16.0 MiB) held by leak[0]; ndarray[2097152] (16.0 MiB) held by leak[1].'
    ]);
    expect(text.title).toBe(
      'Measured after cell [6] ran (02:05:47). How: retained-size walk.'
    );
    expect(evidenceText(null, 'cell [6]', '02:05:47', trans)).toBeNull();
  });

  it('with no name proven, lists what a plain clean frees', () => {
    const proof = {
      ...flagged.evidence!.proof!,
      named: null,
      candidates_bytes: { SEARCH_LOG: 319, best_model: 0 },
      default: {
        command: '%clear_tf',
        names: [],
        retained_bytes: 106 * 2 ** 20,
        objects: ['History (106 MiB) held by Out[5]', 'a', 'b', 'c', 'd']
      }
    };
    expect(evidenceText(proof, 'cell [4]', '10:00:00', trans)!.lines).toEqual([
      'What a plain `%clear_tf` frees: History (106 MiB) held by Out[5]; a; b and 2 more.'
    ]);
    // A search stopped at its budget proves nothing: the fix line says so, nothing is listed.
    expect(
      evidenceText(
        { ...proof, truncated: true },
        'cell [4]',
        '10:00:00',
        trans
      )!.lines
    ).toEqual([]);
  });

  it('sets backticked names as code and keeps an unpaired backtick as text', () => {
    expect(codeSegments('run `%clear_tf a` now')).toEqual([
      { text: 'run ', code: false },
      { text: '%clear_tf a', code: true },
      { text: ' now', code: false }
    ]);
    expect(codeSegments('a ` b')).toEqual([{ text: 'a ` b', code: false }]);
  });
});
