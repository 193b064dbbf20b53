/**
 * The kernel messages of ours the page sends (docs/protocol.md), over the notebook's own kernel
 * connection: control messages go through JupyterLab's websocket like an interrupt does.
 */

import { Kernel, KernelMessage, ServerConnection } from '@jupyterlab/services';
import { URLExt } from '@jupyterlab/coreutils';

import { IExecutionStatus, IFrame } from './state';

/** The feature our kernel lists in kernel_info_reply `supported_features`. */
export const FEATURE = 'cancelkernel';
/** The `transient` key of our kernel's events on iopub. */
export const EVENT_MIME = 'application/vnd.cancelkernel.event+json';

export interface ICancelStatus {
  status: 'ok' | 'error';
  execution: IExecutionStatus | null;
  executions: IExecutionStatus[];
  interrupt_grace: number;
  memory: { resident: number | null } | null;
}

export interface ICheckpointReply {
  status: 'ok' | 'error';
  summary?: string;
  restored?: string[];
  skipped?: { name: string; reason: string }[];
  ename?: string;
  evalue?: string;
}

function message(kernel: Kernel.IKernelConnection, channel: 'control' | 'shell', msgType: string, content: object): any {
  // Our message types are not in JupyterLab's closed unions of types; the wire takes any type.
  return KernelMessage.createMessage({
    channel,
    msgType,
    session: kernel.clientId,
    username: kernel.username,
    content
  } as any);
}

/** Is this kernel ours? (kernel_info_reply lists the feature.) */
export async function isOurKernel(kernel: Kernel.IKernelConnection): Promise<boolean> {
  const info = await kernel.info;
  return ((info as any).supported_features ?? []).includes(FEATURE);
}

/**
 * One cancel_status_request; `onReply` gets the reply's content.
 *
 * Our kernel publishes no busy/idle around this request (Jupyter Server would take that idle for
 * the kernel's), so the future's `done` never resolves: the reply ends it, then it is disposed.
 */
export function requestCancelStatus(kernel: Kernel.IKernelConnection, onReply: (status: ICancelStatus) => void): { dispose(): void } {
  const future = kernel.sendControlMessage(message(kernel, 'control', 'cancel_status_request', {}), true, false);
  future.onReply = (reply: any) => {
    onReply(reply.content as ICancelStatus);
    future.dispose();
  };
  return future;
}

/** What interrupt_reply says (docs/protocol.md, "Interrupt"). */
export interface IInterruptReply {
  status: 'ok' | 'error';
  interrupted?: boolean;
  pending?: boolean; // the target has not started: it will be cancelled when it starts, none of its code runs
}

/** A targeted interrupt: only the execution `msgId`, running or still queued (then it never starts). */
export function interruptExecution(kernel: Kernel.IKernelConnection, msgId: string, onReply: (reply: IInterruptReply) => void): void {
  const future = kernel.sendControlMessage(message(kernel, 'control', 'interrupt_request', { target: msgId }), true, false);
  future.onReply = (reply: any) => {
    onReply(reply.content as IInterruptReply);
    future.dispose();
  };
}

/** A checkpoint_request on the shell channel (it waits behind a running cell, like any shell request). */
export async function checkpoint(kernel: Kernel.IKernelConnection, content: { action: 'save' | 'restore'; name?: string }): Promise<ICheckpointReply> {
  const reply = await kernel.sendShellMessage(message(kernel, 'shell', 'checkpoint_request', content), true, true).done;
  return reply.content as unknown as ICheckpointReply;
}

/** What the server extension read from the kernel's faulthandler dump (kernel/lab/handlers.py). */
export interface IServerStack {
  available: boolean;
  why?: string;
  frames?: IFrame[];
}

/** The stack of a kernel that does not answer, from the Jupyter Server extension (SIGUSR1, then its dump file). */
export async function stackFromServer(kernelId: string): Promise<IServerStack> {
  const settings = ServerConnection.makeSettings();
  const url = URLExt.join(settings.baseUrl, 'cancelkernel', 'kernels', encodeURIComponent(kernelId), 'stack');
  try {
    const response = await ServerConnection.makeRequest(url, { method: 'POST' }, settings);
    if (response.status === 404 && !(response.headers.get('content-type') ?? '').includes('json')) {
      return { available: false, why: "the server has no cancelkernel extension, so no stack can be had while the kernel does not answer" };
    }
    return (await response.json()) as IServerStack;
  } catch (error) {
    return { available: false, why: `the server could not be asked for the stack: ${error}` };
  }
}
