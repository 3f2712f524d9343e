// An agent runtime chatrelay did not write: the official TypeScript MCP
// SDK's client starts `chatrelay mcp` over stdio and plays one exchange
// with a person (the Go test's chat server, over HTTP with fetch), then
// a wait that outlives its request timeout on progress notifications:
//
//   node client.mjs BINARY DATA URL TOKEN THREAD
//
// It prints one JSON object: what the server said at each step. The Go
// test (TestMCPFromTheTypeScriptSDK) judges it.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const [bin, data, url, token, thread] = process.argv.slice(2);
const transport = new StdioClientTransport({
  command: bin,
  args: ["mcp", "--data", data, "--fsync", "never", "--progress-every", "100ms"],
  env: { ...process.env, CHATRELAY_DATA: "", CHATRELAY_STORE: "" },
  stderr: "inherit",
});
const client = new Client({ name: "chatrelay-interop", version: "1.0.0" });
await client.connect(transport);

const person = (path, body) =>
  fetch(url + path, {
    method: "POST",
    headers: { "X-Chat-Token": token, "Content-Type": "application/json" },
    body: JSON.stringify(body),
  }).then((r) => r.status);
const call = (name, args) => client.callTool({ name: "chatrelay_" + name, arguments: args });

const out = {
  server: client.getServerVersion(),
  capabilities: client.getServerCapabilities(),
  instructions: client.getInstructions() ?? "",
};
out.tools = (await client.listTools()).tools;
out.post = await person("/api/chat/post", { text: "can you deploy build 412?" });
out.list = await call("list_threads", {});
out.send = await call("send", { thread, text: "Yes, once you approve.", client_id: "reply-1" });
out.resend = await call("send", { thread, text: "Yes, once you approve.", client_id: "reply-1" });
out.blank = await call("send", { thread, text: " \n" });
out.ask = await call("request_approval", { thread, summary: "Deploy build 412 to production?", title: "deploy" });
const id = out.ask.structuredContent?.interaction?.id;
const waiting = call("wait_interaction", { thread, interaction_id: id, timeout: 60 });
out.respond = await person("/api/chat/respond", { interaction_id: id, decision: "approve" });
out.wait = await waiting;

// A wait longer than the client's request timeout (1 s): with onprogress
// and resetTimeoutOnProgress, each progress notification resets the
// timeout, so the call outlives it and gets the person's answer.
out.ask2 = await call("request_approval", { thread, summary: "Restart the service?", title: "restart" });
const id2 = out.ask2.structuredContent?.interaction?.id;
out.progress = [];
let enough;
const reached = new Promise((resolve) => (enough = resolve));
const slow = client.callTool({ name: "chatrelay_wait_interaction", arguments: { thread, interaction_id: id2, timeout: 60 } }, undefined, {
  timeout: 1000,
  resetTimeoutOnProgress: true,
  onprogress: (p) => {
    out.progress.push(p);
    if (out.progress.length === 15) enough(); // 1.5 s: past the request timeout
  },
});
await Promise.race([reached, slow]); // a timeout rejects slow, and ends this script with its error
out.respond2 = await person("/api/chat/respond", { interaction_id: id2, decision: "approve" });
out.slowWait = await slow;
await client.close();
process.stdout.write(JSON.stringify(out) + "\n");
