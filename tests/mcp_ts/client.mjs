// The official MCP TypeScript SDK client against `cancelkernel mcp --http`, for tests/integration/test_mcp_ts_client.py.
//
//   node client.mjs SCENARIO     (MCP_URL, MCP_TOKEN and the scenario's files in the environment)
//
// It makes the calls and prints what it saw as one JSON object on stdout; the Python test asserts on it
// (and checks every structuredContent against its tool's outputSchema, which this client validates too).
// It waits on the server's state (a task's statusMessage naming the cell's line), never on the clock.

import { writeFileSync } from 'node:fs';
import http from 'node:http';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CallToolResultSchema, CreateTaskResultSchema } from '@modelcontextprotocol/sdk/types.js';

const url = new URL(process.env.MCP_URL);
const token = process.env.MCP_TOKEN;
const LONG = { timeout: 120_000 }; // tasks/result blocks until the cell ends

function transport(headers = {}, options = {}) {
  return new StreamableHTTPClientTransport(url, { requestInit: { headers }, ...options });
}

async function connected(headers = { Authorization: `Bearer ${token}` }, options = {}) {
  const client = new Client({ name: 'cancelkernel-ts-test', version: '1.0.0' });
  await client.connect(transport(headers, options));
  return client;
}

function failure(error) {
  return { message: String(error?.message ?? error), code: error?.code ?? null };
}

async function refused(headers, options = {}) {
  try {
    const client = await connected(headers, options);
    await client.close();
    return { connected: true };
  } catch (error) {
    return { connected: false, ...failure(error) };
  }
}

// A fetch over node:http that sends the Host header given (undici's fetch replaces it): the DNS-rebinding check.
function fetchWithHost(host) {
  return (target, init = {}) =>
    new Promise((resolve, reject) => {
      const headers = { ...Object.fromEntries(new Headers(init.headers ?? {})), host };
      const request = http.request(String(target), { method: init.method ?? 'GET', headers }, (response) => {
        const chunks = [];
        response.on('data', (chunk) => chunks.push(chunk));
        response.on('end', () =>
          resolve(new Response(Buffer.concat(chunks), { status: response.statusCode, headers: response.headers })),
        );
      });
      request.on('error', reject);
      if (init.body) request.write(init.body);
      request.end();
    });
}

async function auth() {
  const right = await connected();
  const tools = (await right.listTools()).tools.map((tool) => tool.name);
  await right.close();
  return {
    no_token: await refused({}),
    wrong_token: await refused({ Authorization: 'Bearer wrong' }),
    right_token: { tools },
    bad_host: await refused({ Authorization: `Bearer ${token}` }, { fetch: fetchWithHost(`evil.example:${url.port}`) }),
    bad_host_no_token: await refused({}, { fetch: fetchWithHost(`evil.example:${url.port}`) }),
  };
}

// Poll tasks/get (at the server's pollInterval) until `done(task)`; every status seen is kept.
async function pollUntil(client, taskId, done, seen) {
  for (;;) {
    const task = await client.experimental.tasks.getTask(taskId);
    seen.push({ status: task.status, statusMessage: task.statusMessage, meta: task._meta ?? null });
    if (done(task)) return task;
    await new Promise((resolve) => setTimeout(resolve, task.pollInterval ?? 1000));
  }
}

const running = (task) => task.status !== 'working' || /at Cell In\[/.test(task.statusMessage ?? '');

function waitingCell(flag, tag) {
  return `import os, time  # ${tag}\nprint('waiting', flush=True)\nwhile not os.path.exists(${JSON.stringify(flag)}):\n    time.sleep(0.01)\nprint('done', flush=True)`;
}

async function tasks() {
  const flags = JSON.parse(process.env.MCP_FLAGS);
  const client = await connected();
  const out = { capabilities: client.getServerCapabilities().tasks ?? null };
  const listed = (await client.listTools()).tools;
  out.task_support = Object.fromEntries(listed.map((tool) => [tool.name, tool.execution?.taskSupport ?? null]));
  out.is_tool_task = { execute: client.isToolTask('execute'), status: client.isToolTask('status') };

  // 1. callToolStream: the task is made on its own (isToolTask), polled, and its result fetched.
  const stream = [];
  for await (const message of client.experimental.tasks.callToolStream(
    { name: 'execute', arguments: { code: waitingCell(flags.stream, 'stream') } },
    CallToolResultSchema,
    LONG,
  )) {
    if (message.type === 'taskStatus' && running(message.task)) writeFileSync(flags.stream, '');
    stream.push(
      message.type === 'result'
        ? { type: 'result', result: message.result }
        : message.type === 'error'
          ? { type: 'error', ...failure(message.error) }
          : { type: message.type, status: message.task.status, statusMessage: message.task.statusMessage },
    );
  }
  out.stream = stream;

  // 2. The task by hand: created at once, tasks/get while it runs, tasks/result blocks until the end.
  const created = await client.request(
    { method: 'tools/call', params: { name: 'execute', arguments: { code: waitingCell(flags.manual, 'manual') } } },
    CreateTaskResultSchema,
    { task: { ttl: 60_000 } },
  );
  const seen = [];
  await pollUntil(client, created.task.taskId, running, seen);
  writeFileSync(flags.manual, '');
  const result = await client.experimental.tasks.getTaskResult(created.task.taskId, CallToolResultSchema, LONG);
  const after = await client.experimental.tasks.getTask(created.task.taskId);
  out.manual = { created, seen, result, after: { status: after.status, statusMessage: after.statusMessage } };

  // 3. tasks/cancel: the cell's targeted interrupt; the task is cancelled, tasks/result says how the cell ended.
  const loop = await client.request(
    {
      method: 'tools/call',
      params: { name: 'execute', arguments: { code: 'import time  # cancel\nwhile True:\n    time.sleep(0.01)' } },
    },
    CreateTaskResultSchema,
    { task: {} },
  );
  const loopSeen = [];
  await pollUntil(client, loop.task.taskId, running, loopSeen);
  const cancelled = await client.experimental.tasks.cancelTask(loop.task.taskId);
  const ended = await client.experimental.tasks.getTaskResult(loop.task.taskId, CallToolResultSchema, LONG);
  let again;
  try {
    await client.experimental.tasks.cancelTask(loop.task.taskId);
    again = { ok: true };
  } catch (error) {
    again = failure(error);
  }
  out.cancel = { seen: loopSeen, cancelled, result: ended, again };

  // 4. A cell that fails: the task is `failed` (2025-11-25: isError); tasks/result still gives the answer.
  const failing = [];
  for await (const message of client.experimental.tasks.callToolStream(
    { name: 'execute', arguments: { code: '1 / 0' } },
    CallToolResultSchema,
    LONG,
  )) {
    failing.push(message.type === 'error' ? { type: 'error', ...failure(message.error) } : { type: message.type, task: message.task ?? null });
  }
  const failedId = failing.find((m) => m.type === 'taskCreated')?.task?.taskId;
  out.failing = {
    stream: failing,
    result: failedId ? await client.experimental.tasks.getTaskResult(failedId, CallToolResultSchema, LONG) : null,
  };

  // 5. The notebook tools as tasks.
  out.run_cell = await client.experimental.tasks.getTaskResult(
    (
      await client.request(
        { method: 'tools/call', params: { name: 'run_cell', arguments: { path: flags.notebook, index: 0 } } },
        CreateTaskResultSchema,
        { task: {} },
      )
    ).task.taskId,
    CallToolResultSchema,
    LONG,
  );
  out.run_notebook = await client.experimental.tasks.getTaskResult(
    (
      await client.request(
        { method: 'tools/call', params: { name: 'run_notebook', arguments: { path: flags.notebook } } },
        CreateTaskResultSchema,
        { task: {} },
      )
    ).task.taskId,
    CallToolResultSchema,
    LONG,
  );

  // 6. tasks/list, an unknown task, a tool that does not run as a task.
  out.list = (await client.experimental.tasks.listTasks()).tasks.map((task) => [task.taskId, task.status]);
  try {
    await client.experimental.tasks.getTask('no-such-task');
    out.unknown = { ok: true };
  } catch (error) {
    out.unknown = failure(error);
  }
  try {
    await client.request({ method: 'tools/call', params: { name: 'status', arguments: {} } }, CreateTaskResultSchema, {
      task: {},
    });
    out.forbidden = { ok: true };
  } catch (error) {
    out.forbidden = failure(error);
  }

  // 7. Without tasks, as before: execute answers `running` after `wait`, get_execution follows it to the end.
  const plain = await client.callTool({
    name: 'execute',
    arguments: { code: waitingCell(flags.plain, 'plain'), wait: 0.5 },
  });
  writeFileSync(flags.plain, '');
  const followed = await client.callTool(
    { name: 'get_execution', arguments: { execution_id: plain.structuredContent.execution_id, wait: 60 } },
    undefined,
    LONG,
  );
  out.plain = { first: plain, followed };
  await client.close();
  return out;
}

const scenarios = { auth, tasks };
const scenario = scenarios[process.argv[2]];
if (!scenario) {
  console.error(`usage: node client.mjs ${Object.keys(scenarios).join('|')}`);
  process.exit(2);
}
try {
  console.log(JSON.stringify(await scenario()));
} catch (error) {
  console.error(error?.stack ?? String(error));
  process.exit(1);
}
