import {
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette } from '@jupyterlab/apputils';
import { INotebookTracker } from '@jupyterlab/notebook';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { ITranslator, nullTranslator } from '@jupyterlab/translation';
import { LabIcon } from '@jupyterlab/ui-components';

// Loaded at once on purpose: the panel takes its place in the right sidebar at activation.
/* eslint-disable jupyter/prefer-lazy-imports */
import { showCell } from './cells';
import { LiveConnection } from './connection';
import { KerasMagicPanel } from './panel';
import { MAX_INTERVAL_S, MIN_INTERVAL_S } from './protocol';
/* eslint-enable jupyter/prefer-lazy-imports */

const PLUGIN_ID = 'kerasmagic:sidebar';
const PANEL_ID = 'kerasmagic-sidebar';

const ICON_SVG = `<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">
<g class="jp-icon3" fill="#616161">
<rect x="3" y="13" width="3" height="8" rx="0.5"/><rect x="8" y="9" width="3" height="12" rx="0.5"/>
<rect x="13" y="5" width="3" height="16" rx="0.5"/><rect x="18" y="11" width="3" height="10" rx="0.5"/>
<path d="M2 7 L7 3 L11 6 L17 1 L22 4" fill="none" stroke="#616161" stroke-width="1.6"/>
</g></svg>`;

const kerasMagicIcon = new LabIcon({
  name: 'kerasmagic:sidebar',
  svgstr: ICON_SVG
});

/** Settings as read from schema/sidebar.json, clamped to what the protocol accepts. */
function readSettings(
  settings: ISettingRegistry.ISettings | null
): LiveConnection.IOptions {
  const interval = Number(settings?.get('interval_s').composite ?? 1);
  const minutes = Number(settings?.get('history_minutes').composite ?? 15);
  return {
    intervalS: Math.min(
      MAX_INTERVAL_S,
      Math.max(MIN_INTERVAL_S, Number.isFinite(interval) ? interval : 1)
    ),
    historyMinutes: Math.min(
      120,
      Math.max(1, Number.isFinite(minutes) ? minutes : 15)
    )
  };
}

/** A choice the panel keeps in the user's settings; one that cannot be saved is logged. */
type Remember = (
  key: string,
  value: Parameters<ISettingRegistry.ISettings['set']>[1]
) => void;

/** The panel, its callbacks into the notebooks and the settings, placed in the right sidebar. */
function addPanel(
  app: JupyterFrontEnd,
  tracker: INotebookTracker,
  connection: LiveConnection,
  translator: ITranslator,
  settings: () => ISettingRegistry.ISettings | null,
  remember: Remember
): KerasMagicPanel {
  const trans = translator.load('kerasmagic');
  const activate = (id: string) => app.shell.activateById(id);
  const panel = new KerasMagicPanel({
    connection,
    translator,
    showCell: cellId => showCell(tracker, cellId, activate),
    showRun: run => showCell(tracker, run.cellId, activate, run.executionCount),
    saveAutoload: (path, on) => {
      const current = (settings()?.get('autoload').composite as string[]) ?? [];
      const next = on
        ? [...new Set([...current, path])]
        : current.filter(known => known !== path);
      connection.setAutoload(next);
      remember('autoload', next);
    },
    saveClassroom: on => remember('classroom', on)
  });
  panel.id = PANEL_ID;
  panel.node.tabIndex = -1;
  panel.title.icon = kerasMagicIcon;
  panel.title.caption = trans.__('Keras memory (kerasmagic)');
  app.shell.add(panel, 'right', { rank: 600 });
  return panel;
}

/** The connection follows the active notebook's kernel. */
function followNotebooks(
  tracker: INotebookTracker,
  connection: LiveConnection
): void {
  const follow = () =>
    connection.setSessionContext(tracker.currentWidget?.sessionContext ?? null);
  tracker.currentChanged.connect(follow);
  // A notebook closed while current: follow whatever notebook is current now (or none).
  tracker.widgetAdded.connect((_, widget) => widget.disposed.connect(follow));
  follow();
}

/** "Show the Keras memory sidebar", in the palette. */
function addOpenCommand(
  app: JupyterFrontEnd,
  panel: KerasMagicPanel,
  translator: ITranslator,
  palette: ICommandPalette | null
): void {
  const trans = translator.load('kerasmagic');
  app.commands.addCommand('kerasmagic:open-sidebar', {
    label: trans.__('Show the Keras memory sidebar'),
    describedBy: { args: { type: 'object', properties: {} } },
    execute: () => {
      app.shell.activateById(PANEL_ID);
      // Opened from the palette or the shortcut, the panel takes the focus (keyboard and
      // screen-reader users land in it, not back in the notebook).
      panel.takeFocus();
    }
  });
  // The docs and lesson 6 point users to the palette: without this entry they find nothing.
  palette?.addItem({
    command: 'kerasmagic:open-sidebar',
    category: trans.__('Kernel')
  });
}

/** Read the settings now and whenever they change; null where they cannot be loaded. */
async function loadSettings(
  settingRegistry: ISettingRegistry,
  connection: LiveConnection,
  panel: KerasMagicPanel
): Promise<ISettingRegistry.ISettings | null> {
  try {
    const loaded = await settingRegistry.load(PLUGIN_ID);
    const apply = () => {
      connection.configure(readSettings(loaded));
      // Only a value the user set: the switch remembers picks in the browser now.
      const set = loaded.get('timeline_window').user;
      panel.settingsWindow = typeof set === 'number' ? set : null;
      panel.classroom = loaded.get('classroom').composite === true;
      connection.setAutoload(
        (loaded.get('autoload').composite as string[]) ?? []
      );
    };
    apply();
    loaded.changed.connect(apply);
    return loaded;
  } catch (reason) {
    console.warn(
      'kerasmagic: cannot load the sidebar settings, using defaults',
      reason
    );
    return null;
  }
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_ID,
  description:
    'A sidebar with the memory of the active notebook kernel: RSS, TensorFlow allocator, GPU, graph and Keras facts.',
  autoStart: true,
  requires: [INotebookTracker],
  optional: [ITranslator, ISettingRegistry, ILayoutRestorer, ICommandPalette],
  activate: async (
    app: JupyterFrontEnd,
    tracker: INotebookTracker,
    translator: ITranslator | null,
    settingRegistry: ISettingRegistry | null,
    restorer: ILayoutRestorer | null,
    palette: ICommandPalette | null
  ) => {
    const connection = new LiveConnection(readSettings(null));
    let settings: ISettingRegistry.ISettings | null = null;
    const remember: Remember = (key, value) =>
      void settings
        ?.set(key, value)
        .catch(reason =>
          console.warn(`kerasmagic: cannot remember ${key}`, reason)
        );
    const panel = addPanel(
      app,
      tracker,
      connection,
      translator ?? nullTranslator,
      () => settings,
      remember
    );
    restorer?.add(panel, PANEL_ID);
    followNotebooks(tracker, connection);
    addOpenCommand(app, panel, translator ?? nullTranslator, palette);
    if (settingRegistry) {
      settings = await loadSettings(settingRegistry, connection, panel);
    }
  }
};

export default plugin;
