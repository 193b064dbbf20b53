/**
 * cancelkernel in JupyterLab 4 and Notebook 7: what a person sees while a cell of our kernel runs.
 *
 * One NotebookWatcher per notebook (watcher.ts) keeps the cells' status lines; this file wires it
 * to the app: settings, the restart-and-restore command (Kernel menu, notebook toolbar, palette),
 * a checkpoint before risky cells, and the status bar item (JupyterLab only: Notebook 7 has none).
 */

import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { ICommandPalette } from '@jupyterlab/apputils';
import { CodeCell } from '@jupyterlab/cells';
import { INotebookTracker, Notebook, NotebookActions, NotebookPanel } from '@jupyterlab/notebook';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { IStatusBar } from '@jupyterlab/statusbar';
import { historyIcon } from '@jupyterlab/ui-components';
import { ISignal, Signal } from '@lumino/signaling';
import { Widget } from '@lumino/widgets';

import { checkpoint } from './messages';
import { restartAndRestore } from './restore';
import { isRisky } from './state';
import { IWatcherSettings, NotebookWatcher } from './watcher';

const PLUGIN_ID = 'cancelkernel-jupyterlab:plugin';
const RESTART_AND_RESTORE = 'cancelkernel:restart-and-restore';

interface ISettings extends IWatcherSettings {
  confirmRestore: boolean;
  checkpointMode: 'off' | 'before-risky';
  riskyAfter: number;
}

const DEFAULTS: ISettings = { showCountdown: true, pollInterval: 1, confirmRestore: true, checkpointMode: 'off', riskyAfter: 1 };

const plugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_ID,
  description: 'Budgets, hung cells and restart-and-restore for notebooks on the cancelkernel kernel.',
  autoStart: true,
  requires: [INotebookTracker],
  optional: [ISettingRegistry, ICommandPalette, IStatusBar],
  activate: (
    app: JupyterFrontEnd,
    tracker: INotebookTracker,
    registry: ISettingRegistry | null,
    palette: ICommandPalette | null,
    statusBar: IStatusBar | null
  ) => {
    let settings: ISettings = { ...DEFAULTS };
    const watchers = new Map<NotebookPanel, NotebookWatcher>();
    const restore = (panel: NotebookPanel) => void restartAndRestore(panel, settings.confirmRestore);

    const current = () => tracker.currentWidget;
    const status = new RunningStatus(() => {
      const panel = current();
      const watcher = panel ? watchers.get(panel) : undefined;
      return watcher?.isOurs ? watcher.summary() : null;
    });
    const attach = (panel: NotebookPanel) => {
      if (watchers.has(panel)) {
        return;
      }
      const watcher = new NotebookWatcher(panel, settings, restore);
      watchers.set(panel, watcher);
      watcher.changed.connect(() => {
        status.update();
        app.commands.notifyCommandChanged(RESTART_AND_RESTORE); // enabled once the kernel is known to be ours
      });
      panel.disposed.connect(() => watchers.delete(panel));
    };
    // A notebook opened before this plugin was activated (Notebook 7 opens its page's notebook at start-up) is watched too.
    tracker.forEach(attach);
    tracker.widgetAdded.connect((_, panel) => attach(panel));

    if (registry) {
      void registry.load(PLUGIN_ID).then(loaded => {
        const apply = () => {
          settings = { ...DEFAULTS, ...(loaded.composite as Partial<ISettings>) };
          settings.pollInterval = Math.max(0.5, Number(settings.pollInterval) || DEFAULTS.pollInterval);
          watchers.forEach(w => w.updateSettings(settings));
        };
        apply();
        loaded.changed.connect(apply);
      });
    }

    // A checkpoint before a risky cell: sent before its execute_request, on the same shell channel, so the kernel saves first.
    NotebookActions.executionScheduled.connect((_, { notebook, cell }: { notebook: Notebook; cell: any }) => {
      if (settings.checkpointMode === 'off' || !(cell instanceof CodeCell)) {
        return;
      }
      const panel = [...watchers.keys()].find(p => p.content === notebook);
      const watcher = panel ? watchers.get(panel) : undefined;
      const kernel = panel?.sessionContext.session?.kernel;
      if (watcher?.isOurs && kernel && isRisky(watcher.history(cell.model.id), settings.riskyAfter)) {
        void checkpoint(kernel, { action: 'save', name: 'before' });
      }
    });

    app.commands.addCommand(RESTART_AND_RESTORE, {
      label: 'Restart Kernel and Restore Checkpoint…',
      caption: 'Restart the kernel, then restore its latest checkpoint (cancelkernel)',
      icon: args => (args.toolbar ? historyIcon : undefined),
      isEnabled: () => {
        const panel = current();
        return !!panel && !!watchers.get(panel)?.isOurs;
      },
      execute: () => {
        const panel = current();
        if (panel) {
          restore(panel);
        }
      }
    });
    palette?.addItem({ command: RESTART_AND_RESTORE, category: 'Kernel Operations' });

    tracker.currentChanged.connect(() => status.update());
    statusBar?.registerStatusItem('cancelkernel-jupyterlab:running', {
      item: status,
      align: 'left',
      rank: 5,
      isActive: () => status.shown,
      activeStateChanged: status.activeChanged
    });
  }
};

/** The status bar item: the current notebook's running cell and its state, nothing while idle. */
class RunningStatus extends Widget {
  constructor(private readonly read: () => { phase: string; text: string } | null) {
    super();
    this.addClass('ck-RunningStatus');
    this.node.setAttribute('role', 'status');
  }

  shown = false;

  /** Fires when the item should appear or go (the status bar asks isActive again). */
  get activeChanged(): ISignal<this, void> {
    return this._activeChanged;
  }

  update(): void {
    const summary = this.read();
    const shown = summary !== null;
    if (shown !== this.shown) {
      this.shown = shown;
      this._activeChanged.emit();
    }
    this.node.textContent = summary ? `cancelkernel: ${summary.text}` : '';
    this.node.dataset.phase = summary?.phase ?? 'idle';
    this.node.hidden = !this.shown;
  }

  private readonly _activeChanged = new Signal<this, void>(this);
}

export default plugin;
