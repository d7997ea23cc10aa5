// A 2025-11-25 client over Streamable HTTP: the official TypeScript SDK 1.32.2,
// declaring elicitation (as Claude Code's HTTP transport and the Inspector do).
// warden's stateless HTTP transport cannot send it a request, so a call that
// needs approval waits in warden's inbox until a person answers with
// `warden approvals` (tests/mcp/test_inbox.py).
//
//   node inbox_http.mjs '<json config>'   config: {url, token, tool, arguments}
//
// stdout: the call's result as one JSON line. Exit 0 when the call returned a
// result (an error result included), 1 when the client failed.

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ElicitRequestSchema } from "@modelcontextprotocol/sdk/types.js";

const config = JSON.parse(process.argv[2]);
const client = new Client({ name: "inbox-test", version: "0.0.0" }, { capabilities: { elicitation: {} } });
// Never called over stateless HTTP; accepting would be the person's answer.
client.setRequestHandler(ElicitRequestSchema, async () => ({ action: "accept", content: {} }));
const transport = new StreamableHTTPClientTransport(new URL(config.url), {
  requestInit: { headers: { Authorization: `Bearer ${config.token}` } },
});
try {
  await client.connect(transport);
  const result = await client.callTool({ name: config.tool, arguments: config.arguments }, undefined, {
    timeout: 90_000,
  });
  process.stdout.write(JSON.stringify(result) + "\n");
  await client.close();
} catch (error) {
  process.stdout.write(JSON.stringify({ fatal: error?.message ?? String(error) }) + "\n");
  process.exit(1);
}
