// A real 2025-11-25 tasks client against `warden serve` over stdio: the official
// TypeScript SDK 1.32.2 and its own experimental tasks API
// (`client.experimental.tasks.callToolStream / getTask / getTaskResult /
// listTasks / cancelTask`), as a host such as VS Code drives it.
//
//   node tasks_2025.mjs <run|cancel|hold> '<json config>'
//
// config: {command, args, env, cwd, tool, arguments, ttl?, plain?: {tool, arguments}}
//   ttl    given: the call is sent with `task: {ttl}`; absent: the SDK decides
//          from `tools/list` (`execution.taskSupport`), sending `task: {}`.
//   plain  a tool called the ordinary way afterwards (the server still answers
//          non-task calls).
//
// stdout: one JSON object per line, {"event": ..., ...}, one per observation.
// stdin (cancel, hold): after {"event":"created"} the script waits for a line
// ("cancel" cancels the task); end of input closes the client (hold).
// Exit status: 0 when every step behaved as the scenario expects, 1 otherwise
// (the last line is then {"event":"fatal", ...}).

import readline from "node:readline";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { CallToolResultSchema } from "@modelcontextprotocol/sdk/types.js";

const [scenario, rawConfig] = process.argv.slice(2);
if (!["run", "cancel", "hold"].includes(scenario) || rawConfig === undefined) {
  process.stderr.write("usage: tasks_2025.mjs <run|cancel|hold> '<json config>'\n");
  process.exit(2);
}
const config = JSON.parse(rawConfig);

function emit(event, fields = {}) {
  process.stdout.write(JSON.stringify({ event, ...fields }) + "\n");
}

function errorFields(error) {
  return {
    message: error?.message ?? String(error),
    ...(error?.code === undefined ? {} : { code: error.code }),
    ...(error?.data === undefined ? {} : { data: error.data }),
  };
}

class Unexpected extends Error {}
function expect(condition, message, detail) {
  if (!condition) throw new Unexpected(`${message}${detail === undefined ? "" : ": " + JSON.stringify(detail)}`);
}

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

const transport = new StdioClientTransport({
  command: config.command,
  args: config.args ?? [],
  env: config.env ?? {},
  cwd: config.cwd,
  stderr: "inherit",
});
const client = new Client({ name: "warden-tasks-2025", version: "0.0.0" }, { capabilities: {} });

// The server process's end, as the host sees it.
let serverExit;
const serverExited = new Promise((resolve) => {
  serverExit = resolve;
});
let transportClosed = false;
client.onclose = () => {
  transportClosed = true;
  emit("transport_closed");
};

function watchServerProcess() {
  const child = transport._process; // the SDK keeps the ChildProcess here
  if (!child) return;
  child.once("exit", (code, signal) => {
    emit("server_exit", { code, signal, at: Date.now() });
    serverExit({ code, signal });
  });
}

// Consumes a callToolStream in the background, emitting every message.
function follow(stream) {
  const seen = { statuses: [], polls: 0, result: undefined, error: undefined, task: undefined };
  let lastKey;
  let created;
  const createdPromise = new Promise((resolve) => (created = resolve));
  const done = (async () => {
    for await (const message of stream) {
      switch (message.type) {
        case "taskCreated":
          seen.task = message.task;
          emit("created", { task: message.task });
          created(message.task);
          break;
        case "taskStatus": {
          // Every poll is counted; a line is written when the status or its message changes.
          seen.polls += 1;
          const key = `${message.task.status}\u0000${message.task.statusMessage ?? ""}`;
          if (key !== lastKey) {
            lastKey = key;
            seen.statuses.push(message.task.status);
            emit("status", { task: message.task, polls: seen.polls });
          }
          break;
        }
        case "result":
          seen.result = message.result;
          emit("result", { result: message.result });
          break;
        case "error":
          seen.error = message.error;
          emit("stream_error", errorFields(message.error));
          break;
        default:
          emit("stream_message", { message });
      }
    }
    created(undefined);
    return seen;
  })();
  return { created: createdPromise, done };
}

function callStream() {
  const options = config.ttl === undefined ? { timeout: 600_000 } : { timeout: 600_000, task: { ttl: config.ttl } };
  return client.experimental.tasks.callToolStream(
    { name: config.tool, arguments: config.arguments ?? {} },
    CallToolResultSchema,
    options,
  );
}

async function plainCall() {
  if (!config.plain) return;
  const result = await client.callTool({ name: config.plain.tool, arguments: config.plain.arguments ?? {} });
  emit("plain_result", { result });
  expect(!result.isError, "the plain call failed", result);
}

async function main() {
  await client.connect(transport);
  watchServerProcess();
  emit("initialized", {
    serverCapabilities: client.getServerCapabilities(),
    serverVersion: client.getServerVersion(),
    serverPid: transport.pid,
  });
  const { tools } = await client.listTools();
  emit("tools", { tools: tools.map((t) => ({ name: t.name, execution: t.execution ?? null })) });
  emit("task_tool", { tool: config.tool, isToolTask: client.isToolTask(config.tool) });

  if (scenario === "run") {
    const seen = await follow(callStream()).done;
    expect(seen.task !== undefined, "no task was created");
    expect(seen.error === undefined, "the task stream ended in an error", errorFields(seen.error));
    expect(seen.result !== undefined, "the task stream ended without a result");
    const taskId = seen.task.taskId;

    const after = await client.experimental.tasks.getTask(taskId);
    emit("get", { task: after });
    expect(after.status === "completed", "tasks/get after the result is not completed", after);

    // tasks/result again: the same result, still retrievable after completion.
    const again = await client.experimental.tasks.getTaskResult(taskId, CallToolResultSchema);
    emit("task_result", { result: again });

    const listed = await client.experimental.tasks.listTasks();
    emit("list", { tasks: listed.tasks, nextCursor: listed.nextCursor ?? null });
    expect(listed.tasks.some((t) => t.taskId === taskId), "tasks/list does not list the task", listed);

    await plainCall();
  } else if (scenario === "cancel") {
    const followed = follow(callStream());
    const task = await followed.created;
    if (task === undefined) expect(false, "no task was created", await followed.done);
    emit("waiting");
    const line = await lines.next();
    expect(line !== null, "stdin ended before the cancel line");

    const cancelled = await client.experimental.tasks.cancelTask(task.taskId);
    emit("cancel", { task: cancelled });

    const seen = await followed.done;
    expect(seen.result === undefined, "a cancelled task produced a result", seen.result);

    // tasks/get, until the server reports the terminal status.
    let after;
    const deadline = Date.now() + 20_000;
    for (;;) {
      after = await client.experimental.tasks.getTask(task.taskId);
      if (after.status !== "working" || Date.now() > deadline) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    emit("get", { task: after });
    expect(after.status === "cancelled", "tasks/get after tasks/cancel is not cancelled", after);

    // tasks/result of a cancelled task: an observation, whatever the server answers.
    try {
      emit("task_result", { result: await client.experimental.tasks.getTaskResult(task.taskId, CallToolResultSchema) });
    } catch (error) {
      emit("task_result_error", errorFields(error));
    }

    const listed = await client.experimental.tasks.listTasks();
    emit("list", { tasks: listed.tasks, nextCursor: listed.nextCursor ?? null });

    // An unknown task id: the error as the SDK surfaces it.
    try {
      emit("unknown_get", { task: await client.experimental.tasks.getTask("j-" + "0".repeat(32)) });
    } catch (error) {
      emit("unknown_get_error", errorFields(error));
    }

    await plainCall();
  } else {
    // hold: start a long task and keep the session until the server goes away
    // (the test stops it) or stdin ends (then the client closes, as a host does).
    const followed = follow(callStream());
    const task = await followed.created;
    if (task === undefined) expect(false, "no task was created", await followed.done);
    emit("holding", { taskId: task.taskId, serverPid: transport.pid });
    const ended = await Promise.race([
      serverExited.then(() => "server"),
      lines.next().then(() => "stdin"),
    ]);
    if (ended === "stdin") {
      emit("closing", { at: Date.now() });
      await client.close();
    }
    emit("held", { ended });
    await Promise.race([serverExited, new Promise((r) => setTimeout(r, 15_000))]);
    await followed.done.catch(() => {});
    return;
  }
  await client.close();
  await Promise.race([serverExited, new Promise((r) => setTimeout(r, 5_000))]);
}

main().then(
  () => process.exit(0),
  (error) => {
    emit("fatal", { ...errorFields(error), unexpected: error instanceof Unexpected, transportClosed });
    process.exit(1);
  },
);
