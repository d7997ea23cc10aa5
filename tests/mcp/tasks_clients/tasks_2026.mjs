// A real 2026-07-28 Tasks (SEP-2663, `io.modelcontextprotocol/tasks`) client
// against `warden serve` over stdio: the official TypeScript client v2
// (`@modelcontextprotocol/client`, pinned to protocol 2026-07-28 through
// `server/discover`) and the official `@modelcontextprotocol/ext-tasks` session
// (`createTaskSessionFromClient`, `session.callTool`, `execution.settle/cancel`,
// `session.task(id).snapshot()`).
//
//   node tasks_2026.mjs <run|cancel|hold> '<json config>'
//
// config: {command, args, env, cwd, tool, arguments, plain?: {tool, arguments},
//          traceRaw?: true (also print every raw request and its response)}
//
// The client SDK's 2026 result decoder accepts only `resultType: "complete"`
// and `"input_required"`, so ext-tasks sends `tools/call` and `tasks/*` through
// a host-owned raw path (`rawDispatch`) with the per-request `_meta` envelope
// it frames itself (`v2RequestFraming`). Here that raw path is a transport
// wrapper: it writes the request on the same stdio connection under its own
// string ids and takes their responses before the Client sees them.
//
// stdout: one JSON object per line, {"event": ..., ...}, one per observation.
// stdin (cancel, hold): after {"event":"created"} the script waits for a line
// ("cancel" cancels the task); end of input closes the client (hold).
// Exit status: 0 when every step behaved as the scenario expects, 1 otherwise
// (the last line is then {"event":"fatal", ...}).

import readline from "node:readline";
import { Client } from "@modelcontextprotocol/client";
import { StdioClientTransport } from "@modelcontextprotocol/client/stdio";
import { DispatchError, createTaskSessionFromClient } from "@modelcontextprotocol/ext-tasks/client";

const PROTOCOL = "2026-07-28";
const TASKS = "io.modelcontextprotocol/tasks";

const [scenario, rawConfig] = process.argv.slice(2);
if (!["run", "cancel", "hold"].includes(scenario) || rawConfig === undefined) {
  process.stderr.write("usage: tasks_2026.mjs <run|cancel|hold> '<json config>'\n");
  process.exit(2);
}
const config = JSON.parse(rawConfig);

function emit(event, fields = {}) {
  process.stdout.write(JSON.stringify({ event, ...fields }) + "\n");
}

function errorFields(error, depth = 0) {
  return {
    name: error?.name,
    message: error?.message ?? String(error),
    ...(error?.code === undefined ? {} : { code: error.code }),
    ...(error?.data === undefined ? {} : { data: error.data }),
    ...(error?.cause === undefined || depth > 2 ? {} : { cause: errorFields(error.cause, depth + 1) }),
  };
}

// A TaskOutcome as JSON (a failed one carries an Error).
function outcomeFields(outcome) {
  return outcome.status === "failed" ? { ...outcome, error: errorFields(outcome.error) } : outcome;
}

class Unexpected extends Error {}
function expect(condition, message, detail) {
  if (!condition) throw new Unexpected(`${message}${detail === undefined ? "" : ": " + JSON.stringify(detail)}`);
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// stdin, line by line: next() resolves to the next line, or null at end of input.
const lines = (() => {
  const queue = [];
  const waiters = [];
  let ended = false;
  const rl = readline.createInterface({ input: process.stdin });
  rl.on("line", (line) => (waiters.length ? waiters.shift()(line) : queue.push(line)));
  rl.on("close", () => {
    ended = true;
    while (waiters.length) waiters.shift()(null);
  });
  return {
    next: () =>
      queue.length ? Promise.resolve(queue.shift()) : ended ? Promise.resolve(null) : new Promise((r) => waiters.push(r)),
  };
})();

/**
 * The host's request coordinator: a Transport around the SDK's stdio transport
 * that also offers `dispatch`, the `rawDispatch` ext-tasks needs. Raw requests
 * get string ids ("raw-N"; the Client's own ids are numbers) and their
 * responses are answered here; everything else passes through to the Client.
 * It exposes `pid`/`stderr` so the Client treats it as a stdio transport
 * (its `server/discover` probe then runs in place, on this one process).
 */
class CoordinatingTransport {
  constructor(inner) {
    this.inner = inner;
    this.pending = new Map();
    this.next = 0;
    this.raw = []; // every raw exchange, for the report
    this.dispatch = this.dispatch.bind(this);
  }
  get pid() {
    return this.inner.pid;
  }
  get stderr() {
    return this.inner.stderr;
  }
  get sessionId() {
    return this.inner.sessionId;
  }
  setProtocolVersion(version) {
    this.inner.setProtocolVersion?.(version);
  }
  setSupportedProtocolVersions(versions) {
    this.inner.setSupportedProtocolVersions?.(versions);
  }
  async start() {
    this.inner.onmessage = (message, extra) => this.route(message, extra);
    this.inner.onerror = (error) => this.onerror?.(error);
    this.inner.onclose = () => {
      for (const { reject } of this.pending.values()) reject(new DispatchError("MCP connection closed"));
      this.pending.clear();
      this.onclose?.();
    };
    await this.inner.start();
    this.process = this.inner._process; // the SDK keeps the ChildProcess here
  }
  send(message, options) {
    return this.inner.send(message, options);
  }
  close() {
    return this.inner.close();
  }
  route(message, extra) {
    const waiter =
      typeof message?.id === "string" && !("method" in message) ? this.pending.get(message.id) : undefined;
    if (waiter === undefined) {
      this.onmessage?.(message, extra);
      return;
    }
    this.pending.delete(message.id);
    waiter.resolve(message);
  }
  async dispatch(request, options = {}) {
    const id = `raw-${++this.next}`;
    const signal = options.signal;
    if (signal?.aborted) throw signal.reason instanceof Error ? signal.reason : new DispatchError("aborted");
    const timeoutMs = options.context?.requestTimeoutMs ?? 120_000;
    const response = await new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new DispatchError(`${request.method} timed out after ${timeoutMs} ms`));
      }, timeoutMs);
      const onAbort = () => {
        clearTimeout(timer);
        this.pending.delete(id);
        this.inner
          .send({ jsonrpc: "2.0", method: "notifications/cancelled", params: { requestId: id, reason: "aborted" } })
          .catch(() => {});
        reject(signal.reason instanceof Error ? signal.reason : new DispatchError("aborted"));
      };
      signal?.addEventListener("abort", onAbort, { once: true });
      this.pending.set(id, {
        resolve: (message) => {
          clearTimeout(timer);
          signal?.removeEventListener("abort", onAbort);
          resolve(message);
        },
        reject: (error) => {
          clearTimeout(timer);
          signal?.removeEventListener("abort", onAbort);
          reject(error);
        },
      });
      this.inner.send({ jsonrpc: "2.0", id, ...request }).catch((error) => {
        this.pending.get(id)?.reject(new DispatchError(`send failed: ${error?.message ?? error}`));
        this.pending.delete(id);
      });
    });
    this.raw.push({ request, response });
    if (config.traceRaw) emit("raw", { request, response });
    if ("error" in response) return { kind: "error", error: response.error };
    return { kind: "result", result: response.result };
  }
}

const clientInfo = { name: "warden-tasks-2026", version: "0.0.0" };
const clientCapabilities = { extensions: { [TASKS]: {} } };
const stdio = new StdioClientTransport({
  command: config.command,
  args: config.args ?? [],
  env: config.env ?? {},
  cwd: config.cwd,
  stderr: "inherit",
});
const transport = new CoordinatingTransport(stdio);
const client = new Client(clientInfo, {
  capabilities: clientCapabilities,
  versionNegotiation: { mode: { pin: PROTOCOL } },
});

let serverExit;
const serverExited = new Promise((resolve) => {
  serverExit = resolve;
});
let transportClosed = false;
client.onerror = (error) => emit("client_error", errorFields(error));

function watchServerProcess() {
  const child = transport.process;
  if (!child) return;
  child.once("exit", (code, signal) => {
    emit("server_exit", { code, signal, at: Date.now() });
    serverExit({ code, signal });
  });
}

function view(task) {
  // A TaskView: the generation-neutral projection plus the raw wire object.
  return task === undefined ? null : { status: task.status, statusMessage: task.statusMessage, raw: task.raw };
}

async function plainCall(session) {
  if (!config.plain) return;
  const execution = await session.callTool(config.plain.tool, config.plain.arguments ?? {}, {
    task: { preference: "allow" },
  });
  emit("plain_execution", { kind: execution.kind });
  expect(execution.kind === "immediate", "a plain tool call became a task");
  const { outcome } = await execution.settle();
  emit("plain_result", { outcome: outcomeFields(outcome) });
  expect(outcome.status === "completed" && !outcome.result.isError, "the plain call failed", outcomeFields(outcome));
}

async function startTask(session) {
  const execution = await session.callTool(config.tool, config.arguments ?? {}, {
    task: { preference: "require" },
    requestTimeoutMs: 120_000,
  });
  expect(execution.kind === "task", "the background tool did not answer with a task", execution.kind);
  // The CreateTaskResult as it came over the wire (the first raw tools/call answer).
  const created = transport.raw.filter((x) => x.request.method === "tools/call").at(-1)?.response?.result;
  emit("created", { taskId: execution.handle.taskId, operation: execution.handle.operation, wire: created });
  return execution;
}

// The execution's events, as ext-tasks reports them, without repeating an
// unchanged status.
function settleReporting(execution) {
  let lastKey;
  let observed = 0;
  const statuses = [];
  const settlement = execution.settle({
    close: false,
    onEvent: (event) => {
      if (event.type === "task") {
        observed += 1;
        const key = `${event.task.status}\u0000${event.task.statusMessage ?? ""}`;
        if (key === lastKey) return;
        lastKey = key;
        statuses.push(event.task.status);
        emit("status", { task: view(event.task), observed });
      } else {
        emit("outcome", { outcome: outcomeFields(event.outcome) });
      }
    },
  });
  return { settlement, statuses };
}

async function main() {
  await client.connect(transport);
  watchServerProcess();
  emit("initialized", {
    era: client.getProtocolEra(),
    protocolVersion: client.getNegotiatedProtocolVersion(),
    serverCapabilities: client.getServerCapabilities(),
    serverVersion: client.getServerVersion(),
    serverPid: transport.pid,
  });
  expect(client.getProtocolEra() === "modern", "the connection is not on the 2026-07-28 era");

  const session = createTaskSessionFromClient(client, {
    endpointId: "warden-stdio",
    rawDispatch: transport.dispatch,
    v2RequestFraming: {
      protocolVersion: client.getNegotiatedProtocolVersion(),
      clientInfo,
      clientCapabilities,
    },
    onError: (error) => emit("session_error", errorFields(error)),
  });
  emit("session", { capabilities: session.capabilities });
  expect(session.capabilities.execution === true, "ext-tasks did not detect a 2026-07-28 Tasks server", session.capabilities);

  const { tools } = await client.listTools();
  emit("tools", { tools: tools.map((t) => ({ name: t.name, execution: t.execution ?? null })) });

  if (scenario === "run") {
    const execution = await startTask(session);
    const taskId = execution.handle.taskId;
    const { settlement, statuses } = settleReporting(execution);
    const { outcome } = await settlement;
    emit("result", { outcome: outcomeFields(outcome), statuses });
    expect(outcome.status === "completed", "the task did not complete", outcomeFields(outcome));

    // tasks/get after the end: the DetailedTask with the result inline.
    const after = await session.task(taskId).snapshot();
    emit("get", { task: view(after) });
    expect(after.status === "completed", "tasks/get after the result is not completed", view(after));

    // An unknown task id: the error as ext-tasks surfaces it.
    try {
      emit("unknown_get", { task: view(await session.task("j-" + "0".repeat(32)).snapshot()) });
    } catch (error) {
      emit("unknown_get_error", errorFields(error));
    }

    await plainCall(session);
  } else if (scenario === "cancel") {
    const execution = await startTask(session);
    const taskId = execution.handle.taskId;
    const { settlement, statuses } = settleReporting(execution);
    emit("waiting");
    const line = await lines.next();
    expect(line !== null, "stdin ended before the cancel line");

    await execution.cancel();
    const ack = transport.raw.filter((x) => x.request.method === "tasks/cancel").at(-1)?.response;
    emit("cancel", { response: ack });
    const { outcome } = await settlement;
    emit("result", { outcome: outcomeFields(outcome), statuses });
    expect(outcome.status === "cancelled", "the execution did not end cancelled", outcomeFields(outcome));

    // tasks/get, until the server reports the terminal status.
    let after;
    const deadline = Date.now() + 20_000;
    for (;;) {
      after = await session.task(taskId).snapshot();
      if (after.status !== "working" || Date.now() > deadline) break;
      await sleep(100);
    }
    emit("get", { task: view(after) });
    expect(after.status === "cancelled", "tasks/get after tasks/cancel is not cancelled", view(after));

    // tasks/update: nothing to answer (an observation, whatever the server says).
    try {
      await session.task(taskId).update({});
      emit("update", { ok: true });
    } catch (error) {
      emit("update_error", errorFields(error));
    }

    await plainCall(session);
  } else {
    // hold: start a long task and keep the session until the server goes away
    // (the test stops it) or stdin ends (then the client closes, as a host does).
    const execution = await startTask(session);
    const { settlement } = settleReporting(execution);
    settlement.catch((error) => emit("settle_error", errorFields(error)));
    emit("holding", { taskId: execution.handle.taskId, serverPid: transport.pid });
    const ended = await Promise.race([serverExited.then(() => "server"), lines.next().then(() => "stdin")]);
    if (ended === "stdin") {
      emit("closing", { at: Date.now() });
      // Leave the task to the server: detach (a session or execution close
      // would send tasks/cancel), then close the connection.
      await execution.detach();
      await client.close();
    }
    emit("held", { ended });
    await Promise.race([serverExited, sleep(15_000)]);
    return;
  }
  await session.close();
  await client.close();
  await Promise.race([serverExited, sleep(5_000)]);
}

client.onclose = () => {
  transportClosed = true;
  emit("transport_closed");
};

main().then(
  () => process.exit(0),
  (error) => {
    emit("fatal", { ...errorFields(error), unexpected: error instanceof Unexpected, transportClosed });
    process.exit(1);
  },
);
