// An agent that runs elsewhere: the official TypeScript MCP SDK's
// Streamable HTTP client reaches `chatrelay serve --mcp` with an agent
// key, plays one exchange with a person (the server's own API, with
// fetch), and waits for an approval longer than its request timeout,
// kept alive by progress notifications (resetTimeoutOnProgress):
//
//   node httpclient.mjs MCP_URL KEY BASE TOKEN THREAD APPROVE_AFTER_MS
//
// The wait uses the SDK's own request timeout (DEFAULT_REQUEST_TIMEOUT_MSEC,
// 60 s), as an agent that sets none does; the person approves once the
// wait has lasted APPROVE_AFTER_MS (90 s in the test).
//
// It prints one JSON object: what the server said at each step. The Go
// test (TestMCPOverHTTPFromTheTypeScriptSDK) judges it.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { DEFAULT_REQUEST_TIMEOUT_MSEC } from "@modelcontextprotocol/sdk/shared/protocol.js";

const [mcpURL, key, base, token, thread, approveAfterMs] = process.argv.slice(2);
const requestTimeout = DEFAULT_REQUEST_TIMEOUT_MSEC;
const approveAfter = Number(approveAfterMs);
const connect = async (k) => {
  const transport = new StreamableHTTPClientTransport(new URL(mcpURL), {
    requestInit: { headers: { Authorization: "Bearer " + k } },
  });
  const client = new Client({ name: "chatrelay-http-interop", version: "1.0.0" });
  await client.connect(transport);
  return client;
};

const out = {};
// A wrong key: the server answers 401, and the client says so.
try {
  await connect("cha_" + "A".repeat(43));
  out.wrongKey = { connected: true };
} catch (e) {
  out.wrongKey = { code: e.code ?? null, message: String(e.message ?? e) };
}

const client = await connect(key);
const person = (path, body) =>
  fetch(base + path, {
    method: "POST",
    headers: { "X-Chat-Token": token, "Content-Type": "application/json" },
    body: JSON.stringify(body),
  }).then((r) => r.status);
const call = (name, args) => client.callTool({ name: "chatrelay_" + name, arguments: args });

out.server = client.getServerVersion();
out.tools = (await client.listTools()).tools;
out.post = await person("/api/chat/post", { text: "can you deploy build 412?" });
out.send = await call("send", { thread, text: "Yes, once you approve." });
out.ask = await call("request_approval", { thread, summary: "Deploy build 412 to production?" });
const id = out.ask.structuredContent?.interaction?.id;

// The wait outlives the request timeout: each progress notification
// resets it. The person approves once the wait has lasted approveAfter.
out.progress = [];
const started = Date.now();
let enough;
const reached = new Promise((resolve) => (enough = resolve));
const waiting = client.callTool({ name: "chatrelay_wait_interaction", arguments: { thread, interaction_id: id } }, undefined, {
  resetTimeoutOnProgress: true, // no timeout: the SDK's default
  onprogress: (p) => {
    out.progress.push(p);
    if (Date.now() - started >= approveAfter) enough();
  },
});
await Promise.race([reached, waiting]); // a timeout rejects waiting, and ends this script with its error
out.respond = await person("/api/chat/respond", { interaction_id: id, decision: "approve" });
out.wait = await waiting;
out.waitedMs = Date.now() - started;
out.requestTimeoutMs = requestTimeout;
await client.close();
process.stdout.write(JSON.stringify(out) + "\n");
