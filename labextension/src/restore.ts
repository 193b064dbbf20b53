/**
 * Restart and restore: restart the kernel, then restore its latest checkpoint, and say in the
 * notebook what came back and what did not. Kernel > Restart keeps its stock meaning.
 */

import { Dialog, Notification, showDialog } from '@jupyterlab/apputils';
import { NotebookPanel } from '@jupyterlab/notebook';

import { checkpoint } from './messages';

export async function restartAndRestore(panel: NotebookPanel, confirm: boolean): Promise<void> {
  const context = panel.sessionContext;
  if (confirm) {
    const answer = await showDialog({
      title: 'Restart the kernel and restore its checkpoint?',
      body:
        'The kernel restarts (a running cell is stopped), then its latest checkpoint is restored: ' +
        'the variables saved in it come back; what changed since it was saved is lost.',
      buttons: [Dialog.cancelButton(), Dialog.warnButton({ label: 'Restart and restore' })]
    });
    if (!answer.button.accept) {
      return;
    }
  }
  await context.restartKernel();
  const kernel = context.session?.kernel;
  if (!kernel) {
    Notification.error('The kernel did not come back after the restart: nothing was restored.');
    return;
  }
  const reply = await checkpoint(kernel, { action: 'restore' });
  if (reply.status !== 'ok') {
    const nothing = reply.ename === 'CheckpointNotFound';
    const said = nothing ? 'there was no checkpoint to restore, so the kernel starts empty' : `the restore failed: ${reply.evalue}`;
    Notification.warning(`Kernel restarted; ${said}.`, { autoClose: false });
    return;
  }
  const skipped = reply.skipped ?? [];
  const lost = skipped.length ? ` Not restored: ${skipped.map(s => `${s.name} (${s.reason})`).join('; ')}.` : '';
  const message = `Kernel restarted and restored: ${(reply.restored ?? []).join(', ') || 'no names'}.${lost}`;
  (skipped.length ? Notification.warning : Notification.success)(message, { autoClose: skipped.length ? false : 8000 });
}
