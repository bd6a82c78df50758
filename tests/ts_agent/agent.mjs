// A small ACP agent on the TypeScript SDK's API (the package ships no example agent), run by the
// proxy tests with node. A prompt turn streams a chunk, reports a tool call, asks the client for
// permission under it, completes the tool call and ends the turn. "fail" in the prompt answers with
// a JSON-RPC error; "exit" makes the process die with status 3 while the request is pending.
import { Readable, Writable } from "node:stream";
import * as acp from "@agentclientprotocol/sdk";

const stream = acp.ndJsonStream(Writable.toWeb(process.stdout), Readable.toWeb(process.stdin));
let sessions = 0;

function textOf(prompt) {
  return (prompt || []).map((block) => block.text || "").join(" ");
}

const app = acp
  .agent({ name: "ts-test-agent" })
  .onRequest(acp.methods.agent.initialize, () => ({
    protocolVersion: acp.PROTOCOL_VERSION,
    agentCapabilities: { loadSession: false },
    agentInfo: { name: "ts-test-agent", version: "2.4.0" },
  }))
  .onRequest(acp.methods.agent.session.new, () => ({ sessionId: `ts-sess-${++sessions}` }))
  .onNotification(acp.methods.agent.session.cancel, () => {})
  .onRequest(acp.methods.agent.session.prompt, async ({ params, client }) => {
    const text = textOf(params.prompt);
    if (text.includes("exit")) process.exit(3);
    if (text.includes("fail")) throw acp.RequestError.invalidParams({ reason: "asked to fail" });
    const sessionId = params.sessionId;
    await client.notify(acp.methods.client.session.update, {
      sessionId,
      update: { sessionUpdate: "agent_message_chunk", content: { type: "text", text: "Hello from TypeScript" } },
    });
    await client.notify(acp.methods.client.session.update, {
      sessionId,
      update: { sessionUpdate: "tool_call", toolCallId: "ts-call-1", title: "Read a file", kind: "read", status: "pending" },
    });
    const permission = await client.request(acp.methods.client.session.requestPermission, {
      sessionId,
      toolCall: { toolCallId: "ts-call-1", title: "Read a file", status: "pending" },
      options: [{ optionId: "allow", name: "Allow once", kind: "allow_once" }],
    });
    await client.notify(acp.methods.client.session.update, {
      sessionId,
      update: { sessionUpdate: "tool_call_update", toolCallId: "ts-call-1", status: "completed" },
    });
    return { stopReason: permission.outcome.outcome === "selected" ? "end_turn" : "refusal" };
  });

const connection = app.connect(stream);
connection.closed.then(() => process.exit(0));
